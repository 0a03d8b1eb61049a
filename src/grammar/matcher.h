// GrammarMatcher: one generation's position in a grammar. Per decoding step:
//
//   matcher.fill_mask(mask)      allowed token ids (bits), from the precomputed sets of each
//                                stack top plus the few uncertain tokens checked for real
//   id = sample(logits, mask)
//   matcher.accept_token(id)     advance over the token's bytes (false: not allowed)
//
// For speculative decoding, accept_token() tells whether a proposed token fits and
// rollback(n) undoes the last n accepted tokens (the state after every token is kept).
//
// End-of-generation tokens are allowed exactly when the grammar is complete (can_end());
// after one, only end-of-generation tokens are allowed.
//
// Single-threaded by contract: one matcher per sequence, used by one thread at a time.
// fill_mask and accept_token allocate nothing once their buffers have grown to the
// grammar's needs (a few steps in).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "grammar/compiled_grammar.h"
#include "grammar/stack.h"

namespace lumen::grammar {

class GrammarMatcher {
 public:
  explicit GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar);
  GrammarMatcher(GrammarMatcher&&) noexcept;
  GrammarMatcher& operator=(GrammarMatcher&&) noexcept;
  ~GrammarMatcher();

  // Back to the start of the grammar (also clears the history).
  void reset();

  // Sets bit id of `mask` (words of 64 ids; at least ceil(n_vocab / 64) words) for every
  // token the grammar allows next; clears the others. False if the grammar failed (error()).
  bool fill_mask(std::span<uint64_t> mask);

  // Advances over one token. False, with the state unchanged, when the grammar does not
  // allow it (or it failed: see error()).
  bool accept_token(int32_t id);
  // The same for raw bytes (tests, validation of whole texts); not recorded as a token.
  bool accept_bytes(std::string_view bytes);
  // Undoes the last n accepted tokens. Precondition: n <= n_tokens().
  void rollback(int32_t n);

  int32_t n_tokens() const { return static_cast<int32_t>(hist_begin_.size()) - 1; }
  bool can_end() const;        // the grammar is complete (end-of-generation allowed)
  bool must_end() const;       // ... and nothing else can follow
  bool terminated() const { return terminated_.back() != 0; }  // an end-of-generation was accepted
  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  const CompiledGrammar& grammar() const { return *grammar_; }

 private:
  std::span<const int32_t> state() const {
    return std::span<const int32_t>(hist_).subspan(hist_begin_.back());
  }
  bool advance_state(std::span<const int32_t> from, std::string_view bytes, std::vector<int32_t>* to);
  void push_state(const std::vector<int32_t>& s, bool terminated);
  void add_resolved(int32_t top, const PositionMask& pm, uint64_t* mask);
  void add_conditional(int32_t top, const PositionMask& pm, uint64_t* mask);
  struct CacheEntry;
  const CacheEntry* cached(int32_t key_pos, int32_t key_node, int32_t top, const PositionMask& pm);
  bool resolve(int32_t top, const PositionMask& pm);
  bool match_suffixes(int32_t below, const PositionMask& pm);
  int32_t copy_to_scratch(int32_t x);
  template <typename BytesOf>
  bool match_sorted(size_t n, BytesOf bytes_of, const std::vector<uint16_t>& lcp);

  std::shared_ptr<const CompiledGrammar> grammar_;
  std::unique_ptr<StackArena> arena_;  // stable address: exp_ points to it
  Expander exp_;
  // Every state so far (sorted tops; kAcceptTop first when the grammar is complete):
  // hist_[hist_begin_[k] ..) is the state after k tokens.
  std::vector<int32_t> hist_;
  std::vector<uint32_t> hist_begin_;
  std::vector<uint8_t> terminated_;  // per state
  std::vector<int32_t> tmp_a_, tmp_b_;
  ExpandEvents ev_;
  std::string error_;

  // Tokens past the boundary checked against one real stack: a scratch arena holding a copy
  // of the stack, per-depth states, and the results cached by (position, stack below the
  // boundary) for crossing tokens' suffixes, by top for whole uncertain tokens.
  std::unique_ptr<StackArena> scratch_;
  Expander scratch_exp_;
  std::vector<std::vector<int32_t>> levels_;
  std::vector<uint8_t> level_accept_;
  std::vector<int32_t> chain_;
  std::vector<int32_t> resolved_;           // pool of cached results
  static constexpr int32_t kWholeTokens = -1;
  static constexpr uint32_t kEmptySlot = UINT32_MAX;
  struct CacheEntry {
    int32_t key_pos = 0, key_node = 0;
    uint32_t begin = kEmptySlot, end = 0;
  };
  std::vector<CacheEntry> cache_;           // open addressing by key
  int32_t n_cached_ = 0;
  std::vector<uint64_t> scratch_bits_;      // [n_vocab / 64]: CountedTokens::or_range's scratch

  // The last mask and the state it was computed for: inside a string or a long repetition
  // the state repeats from token to token, and then the mask is a copy.
  std::vector<int32_t> last_state_;
  std::vector<uint64_t> last_mask_;
  bool last_valid_ = false;
};

}  // namespace lumen::grammar
