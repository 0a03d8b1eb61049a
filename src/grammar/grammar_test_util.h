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

}  // namespace lumen::grammar::testing
