#include "spec/ngram.h"

#include <vector>

#include <gtest/gtest.h>

namespace lumen::spec {
namespace {

std::vector<int32_t> lookup(const std::vector<int32_t>& t, int32_t n_min, int32_t n_max, int32_t max_n) {
  std::vector<int32_t> out(static_cast<size_t>(max_n));
  out.resize(static_cast<size_t>(ngram_lookup(t, n_min, n_max, out)));
  return out;
}

TEST(Ngram, ProposesWhatFollowedTheLatestMatch) {
  //                       a  b  c  X  Y  Z  .  a  b  c  W  .  a  b  c
  const std::vector<int32_t> t = {1, 2, 3, 7, 8, 9, 0, 1, 2, 3, 5, 0, 1, 2, 3};
  EXPECT_EQ(lookup(t, 2, 4, 3), (std::vector<int32_t>{5, 0, 1}));  // latest "a b c" is followed by W
  EXPECT_EQ(lookup(t, 2, 4, 8), (std::vector<int32_t>{5, 0, 1, 2, 3}));  // runs to the end
}

TEST(Ngram, PrefersLongerMatches) {
  // Last 3 tokens "4 1 2" occur once early (followed by 9); "1 2" occurs later (followed by 6).
  const std::vector<int32_t> t = {4, 1, 2, 9, 1, 2, 6, 4, 1, 2};
  EXPECT_EQ(lookup(t, 2, 3, 1), (std::vector<int32_t>{9}));
  EXPECT_EQ(lookup(t, 2, 2, 1), (std::vector<int32_t>{6}));
}

TEST(Ngram, NothingWithoutAMatchOrRoom) {
  EXPECT_TRUE(lookup({1, 2, 3, 4, 5}, 2, 4, 4).empty());
  EXPECT_TRUE(lookup({1}, 1, 4, 4).empty());
  EXPECT_TRUE(lookup({}, 1, 4, 4).empty());
  EXPECT_TRUE(lookup({1, 1, 1}, 1, 2, 0).empty());
  EXPECT_EQ(lookup({1, 1, 1}, 1, 4, 4), (std::vector<int32_t>{1}));  // "1 1" at 0 is followed by 1
}

TEST(Ngram, ProposerFillsEachSequence) {
  NgramProposer p(1, 3);
  const std::vector<int32_t> a = {5, 6, 7, 5, 6}, b = {1, 2, 3};
  std::vector<int32_t> oa(4), ob(4);
  std::vector<ProposeSeq> seqs(2);
  seqs[0].seq_id = 1;
  seqs[0].tokens = a;
  seqs[0].max_n = 2;
  seqs[0].out_tokens = oa;
  seqs[0].probs_valid = true;
  seqs[1].seq_id = 2;
  seqs[1].tokens = b;
  seqs[1].max_n = 4;
  seqs[1].out_tokens = ob;
  p.propose(seqs);
  EXPECT_EQ(seqs[0].n_out, 2);
  EXPECT_EQ(oa[0], 7);
  EXPECT_EQ(oa[1], 5);
  EXPECT_FALSE(seqs[0].probs_valid);
  EXPECT_EQ(seqs[1].n_out, 0);
}

}  // namespace
}  // namespace lumen::spec
