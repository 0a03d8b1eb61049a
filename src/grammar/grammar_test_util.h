// Helpers shared by the grammar tests.
#pragma once

#include <fstream>
#include <memory>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "grammar/compiled_grammar.h"
#include "grammar/matcher.h"
#include "grammar/token_table.h"

namespace lumen::grammar::testing {

inline std::string read_testdata(const std::string& name) {
  std::string dir = __FILE__;
  dir = dir.substr(0, dir.find_last_of('/'));
  std::ifstream f(dir + "/testdata/" + name, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every single byte is a token (ids 0..255), then `extra`, then one end-of-generation token.
inline std::shared_ptr<const TokenTable> byte_vocab(const std::vector<std::string>& extra = {}) {
  std::vector<std::string> pieces;
  for (int b = 0; b < 256; ++b) pieces.push_back(std::string(1, static_cast<char>(b)));
  pieces.insert(pieces.end(), extra.begin(), extra.end());
  pieces.push_back("");
  return TokenTable::from_pieces(pieces, {static_cast<int32_t>(pieces.size()) - 1});
}

// Whether the grammar matches `text` completely.
inline bool matches(const std::shared_ptr<const CompiledGrammar>& g, std::string_view text) {
  GrammarMatcher m(g);
  return m.accept_bytes(text) && m.can_end();
}

inline std::shared_ptr<const CompiledGrammar> compile_or_die(std::string_view gbnf,
                                                            std::shared_ptr<const TokenTable> vocab) {
  auto g = CompiledGrammar::from_gbnf(gbnf, std::move(vocab));
  EXPECT_TRUE(g.ok()) << g.message();
  return g.ok() ? *g : nullptr;
}

// The token ids a mask allows.
inline std::vector<int32_t> allowed_ids(const std::vector<uint64_t>& mask, int32_t n_vocab) {
  std::vector<int32_t> allowed;
  for (int32_t id = 0; id < n_vocab; ++id)
    if ((mask[static_cast<size_t>(id) / 64] >> (id % 64)) & 1) allowed.push_back(id);
  return allowed;
}

// The precomputed masks must equal trying every token against the real stacks.
inline std::vector<uint64_t> brute_mask(GrammarMatcher& m, int32_t n_vocab) {
  std::vector<uint64_t> mask((static_cast<size_t>(n_vocab) + 63) / 64, 0);
  for (int32_t id = 0; id < n_vocab; ++id) {
    if (m.accept_token(id)) {
      mask[static_cast<size_t>(id) / 64] |= uint64_t{1} << (id % 64);
      m.rollback(1);
    }
  }
  return mask;
}

inline void random_walks_match_brute_force(const std::string& gbnf, std::shared_ptr<const TokenTable> vocab, int n_walks,
                                    int max_steps, uint64_t seed) {
  auto g = compile_or_die(gbnf, vocab);
  ASSERT_NE(g, nullptr);
  std::mt19937_64 rng(seed);
  const int32_t n_vocab = vocab->n_vocab();
  for (int walk = 0; walk < n_walks; ++walk) {
    GrammarMatcher m(g);
    std::string text;
    for (int step = 0; step < max_steps && !m.terminated(); ++step) {
      std::vector<uint64_t> fast(brute_mask(m, n_vocab).size());
      ASSERT_TRUE(m.fill_mask(fast)) << m.error();
      const std::vector<uint64_t> slow = brute_mask(m, n_vocab);
      for (int32_t id = 0; id < n_vocab; ++id) {
        const bool f = (fast[id / 64] >> (id % 64)) & 1, s = (slow[id / 64] >> (id % 64)) & 1;
        ASSERT_EQ(f, s) << "token " << id << " '" << vocab->bytes(id) << "' after '" << text << "' (walk " << walk
                        << ", step " << step << ")\n" << gbnf;
      }
      std::vector<int32_t> allowed;
      for (int32_t id = 0; id < n_vocab; ++id)
        if ((slow[id / 64] >> (id % 64)) & 1) allowed.push_back(id);
      ASSERT_FALSE(allowed.empty()) << text;
      // Prefer continuing: take the end of generation only one time in four.
      int32_t pick = allowed[rng() % allowed.size()];
      if (vocab->is_eog(pick) && allowed.size() > 1 && rng() % 4 != 0)
        while (vocab->is_eog(pick)) pick = allowed[rng() % allowed.size()];
      ASSERT_TRUE(m.accept_token(pick));
      text += vocab->bytes(pick);
    }
  }
}

// Tokens made of the grammar's own characters, so random walks go deep.
inline std::shared_ptr<const TokenTable> random_vocab(const std::string& alphabet, int n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<std::string> extra;
  std::vector<std::string> units;  // characters (whole UTF-8 sequences) of the alphabet
  for (size_t i = 0; i < alphabet.size();) {
    size_t len = 1;
    const auto b = static_cast<unsigned char>(alphabet[i]);
    if (b >= 0xF0) len = 4;
    else if (b >= 0xE0) len = 3;
    else if (b >= 0xC0) len = 2;
    units.push_back(alphabet.substr(i, len));
    i += len;
  }
  for (int k = 0; k < n; ++k) {
    std::string t;
    const int len = 1 + static_cast<int>(rng() % 6);
    for (int i = 0; i < len; ++i) t += units[rng() % units.size()];
    if (rng() % 8 == 0) t = t.substr(0, t.size() - 1);  // may cut a character in half
    if (t.empty()) t = "x";
    extra.push_back(t);
  }
  return byte_vocab(extra);
}

}  // namespace lumen::grammar::testing
