// N-gram / prompt lookup: propose what followed the latest earlier occurrence of the
// sequence's last n tokens, in its own prompt and output. Free to compute (no model),
// and right surprisingly often where text repeats: code edits, summaries that quote,
// stories that reuse names and phrases.
//
//   tokens:  ... a b c X Y Z ... a b c | ?        last n = 3 tokens "a b c"
//                      ^^^^^ proposed: X Y Z (up to max_n), found by scanning backwards
//
// Longer matches are tried first (n = n_max down to n_min): a longer context is a better
// predictor. Deterministic: the verify step treats its proposals as q = one-hot.
#pragma once

#include <cstdint>
#include <span>

#include "spec/proposer.h"

namespace lumen::spec {

// Writes up to out.size() tokens that followed the latest earlier occurrence of the last n
// tokens of `tokens`, for the largest n in [n_min, n_max] that has one; returns how many.
// O(len * n_max) per call, allocates nothing.
int32_t ngram_lookup(std::span<const int32_t> tokens, int32_t n_min, int32_t n_max, std::span<int32_t> out);

class NgramProposer final : public Proposer {
 public:
  // Precondition: 1 <= n_min <= n_max.
  NgramProposer(int32_t n_min, int32_t n_max);
  void propose(std::span<ProposeSeq> seqs) override;
  void release(uint64_t) override {}  // stateless: everything is in the tokens
  const char* name() const override { return "ngram"; }

 private:
  int32_t n_min_, n_max_;
};

}  // namespace lumen::spec
