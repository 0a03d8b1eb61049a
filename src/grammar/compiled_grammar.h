// A grammar compiled against a vocabulary: the byte automaton plus, for every place a stack
// top can be, which tokens it allows whatever lies below in the stack (computed once), so
// that a decoding step only combines a few precomputed sets (the idea of XGrammar's
// context-independent tokens, with repetition counts).
//
// For a top at element p, the grammar alone often tells what comes after p's rule: a rule
// used in one place returns there (Pda::continuation), so the walk from p follows a static
// chain of continuations down to the first place that depends on the stack (the boundary)
// or to the end of the grammar. Walking the vocabulary trie from p along that chain sorts
// every token into
//
//   accepted    matched without passing the boundary (or ending exactly on it)
//   conditional the chain holds a repetition frame whose count c is only known at run time;
//               the token is allowed iff  c + j < max  (it stays inside iteration c+j+1) or
//               min <= c + j <= max  (it leaves the repetition after j more iterations)
//   crossing    it reaches the boundary after d of its bytes (having left the counted frame
//               after j iterations, if there is one) and goes on with bytes FOLLOW(boundary
//               rule) allows: allowed iff the count allows j and the rest of its bytes (the
//               suffix) match from the real stack below the boundary. Few tokens (e.g. `",`
//               after a string) and fewer distinct suffixes (`,`): at run time the suffixes
//               are matched once per (position, stack below the boundary), which stays the
//               same from token to token inside a string and for every string of a list
//   rejected    everything else
//
//   str ::= "\"" char{0,64} "\""     top inside char, c = 5:  "hello" -> conditional, j = 4:
//                                    allowed as 5 + 4 < 64;  `x"` -> leaves after j = 1
//   list ::= "[" str ("," str)* "]"   top inside char: `x",` crosses after 2 bytes (j = 1),
//                                    suffix `,`: allowed iff 5 + 1 <= 64 and `,` can follow
//                                    the list element on the real stack
//
// Immutable after compile(); one CompiledGrammar serves any number of matchers in any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/gbnf.h"
#include "grammar/pda.h"
#include "grammar/token_table.h"

namespace lumen::grammar {

// A set of token ids: a sorted list, or a bitset once that is smaller.
class TokenSet {
 public:
  void assign(std::vector<int32_t> ids, int32_t n_vocab);
  void or_into(uint64_t* mask) const;
  size_t size() const { return count_; }
  bool empty() const { return count_ == 0; }
  bool contains(int32_t id) const;
  size_t memory_bytes() const { return ids_.capacity() * 4 + bits_.capacity() * 8; }

 private:
  std::vector<int32_t> ids_;
  std::vector<uint64_t> bits_;
  size_t count_ = 0;
};

struct CountedToken {
  int32_t token;
  int32_t j;  // iterations of the frame's repetition completed inside the token
};

// Conditional tokens sorted by j, with cumulative bitsets at a few j so that the tokens of
// a range lo <= j <= hi that starts at the smallest j (or ends at the largest) cost one
// bitset OR plus a walk of at most a segment of the list:
//
//   j:      1 1 1 ... 1 2 2 ... 2 3 3 ... 3 4 5 7 9 ...     (sorted list)
//   prefix checkpoints  ^j<=1     ^j<=2     ^j<=3      (one after every >= segment tokens)
//   j <= 5:  OR prefix bits (j <= 3), then set the bits of the few tokens with j in 4..5
//
// A range bounded on both sides inside the list (a string with minLength: lo = min - c,
// hi = max - c) takes the difference of two prefix bitsets in a scratch bitset, with the
// segments between checkpoints and range ends walked, and the few tokens listed at several
// j walked apart:
//
//   scratch = prefix(j <= a) & ~prefix(j <= b)     a: last checkpoint <= hi, b: last < lo
//   clear b < j < lo;  mask |= scratch;  set a < j <= hi;  set several-j tokens in [lo, hi]
class CountedTokens {
 public:
  void assign(std::vector<CountedToken> tokens, int32_t n_vocab, bool with_suffix);
  // Sets the bit of every token whose j lies in [lo, hi]. scratch: a bitset of the
  // vocabulary's size (its contents are overwritten).
  void or_range(int64_t lo, int64_t hi, uint64_t* mask, uint64_t* scratch) const;
  size_t size() const { return list_.size(); }
  bool empty() const { return list_.empty(); }
  size_t memory_bytes() const;
  const std::vector<CountedToken>& list() const { return list_; }

 private:
  struct Checkpoint {
    int32_t j = 0;       // prefix: every token with j' <= j; suffix: every token with j' >= j
    uint32_t index = 0;  // prefix: end of those tokens in list_; suffix: their begin
    std::vector<uint64_t> bits;
  };
  bool or_between(int64_t lo, int64_t hi, uint64_t* mask, uint64_t* scratch) const;
  size_t first_above(int64_t j) const;  // index in list_ of the first entry with j' > j

  std::vector<CountedToken> list_;
  std::vector<CountedToken> several_;        // the entries of tokens listed at several j, by j
  std::vector<Checkpoint> prefix_, suffix_;  // both by ascending j
};

// A token that reaches the boundary after some of its bytes and continues past it.
struct CrossingToken {
  int32_t token;
  int32_t suffix;  // PositionMask::suffixes index: the token's bytes after the boundary
  int32_t j;       // iterations of the counted frame when it was left; -1: no counted frame
};

// What a stack top at one element allows (see the file comment).
struct PositionMask {
  int32_t frame_depth = -1;          // parents from the top to the counted frame; -1: none
  int32_t rep_min = 0, rep_max = 0;  // that repetition's bounds (max -1: unbounded)
  int32_t boundary_depth = 1;        // parents from the top to the stack below the boundary
  TokenSet accepted;
  CountedTokens stays;               // conditional, staying inside the repetition (j >= 1)
  CountedTokens exits;               // conditional, leaving it
  std::vector<CrossingToken> crossing;  // by suffix
  std::vector<std::string> suffixes;    // distinct, sorted
  std::vector<uint16_t> suffix_lcp;     // bytes shared with the previous suffix
  // Tokens whose count passed kMaxSymbolic inside the token (a repetition longer than
  // that within one token): checked whole against the real stack at run time.
  std::vector<int32_t> uncertain;       // trie order
  std::vector<uint16_t> uncertain_lcp;  // bytes shared with the previous uncertain token
};

struct CompileStats {
  int32_t n_positions = 0;
  int64_t n_trie_steps = 0;      // trie nodes visited over all positions
  int64_t n_accepted = 0, n_conditional = 0, n_crossing = 0, n_uncertain = 0;  // summed over positions
  int64_t n_suffixes = 0;
  size_t memory_bytes = 0;
  double ms = 0;
};

struct CompileLimits {
  PdaLimits pda;
  int64_t max_trie_steps = 400'000'000;  // total work of the precomputation
};

class CompiledGrammar {
 public:
  static Result<std::shared_ptr<const CompiledGrammar>> compile(const Grammar& grammar,
                                                                std::shared_ptr<const TokenTable> vocab,
                                                                const CompileLimits& limits = {});
  // Parses GBNF text and compiles it.
  static Result<std::shared_ptr<const CompiledGrammar>> from_gbnf(std::string_view text,
                                                                  std::shared_ptr<const TokenTable> vocab,
                                                                  const CompileLimits& limits = {});

  const Pda& pda() const { return pda_; }
  const TokenTable& vocab() const { return *vocab_; }
  // Null for elements that are never a stack top.
  const PositionMask* position(int32_t pos) const {
    const int32_t i = pos_index_[static_cast<size_t>(pos)];
    return i < 0 ? nullptr : &masks_[static_cast<size_t>(i)];
  }
  const CompileStats& stats() const { return stats_; }

 private:
  friend class MaskBuilder;
  Pda pda_;
  std::shared_ptr<const TokenTable> vocab_;
  std::vector<int32_t> pos_index_;  // [n_elems] -> masks_ index or -1
  std::vector<PositionMask> masks_;
  CompileStats stats_;
};

}  // namespace lumen::grammar
