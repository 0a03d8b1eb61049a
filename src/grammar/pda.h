// The byte-level pushdown automaton a grammar compiles to, and what is known about it
// statically (nullable rules, FIRST / FOLLOW byte sets, each rule's continuation).
//
// Elements live in one flat array; each alternative of a rule is a run of elements ending in
// kEnd. A character item becomes bytes: a single code point is its UTF-8 bytes in a row; a
// class is one kBytes element when it is ASCII only, else a rule of its own whose
// alternatives are the UTF-8 byte-range sequences of its code points (so a token that ends
// in the middle of a character leaves a stack in the middle of that sequence, and the next
// token continues it).
//
//   grammar  item := [a-zA-Z0-9_]{3,8} "é"
//   pda      item: kRepeat(item_1, 3, 8) kBytes{C3} kBytes{A9} kEnd
//            item_1: kBytes{0-9 A-Z _ a-z} kEnd
//
// Repetitions stay elements with counts (kRepeat): a stack holds a frame with the number of
// completed iterations, so x{0,1000} costs what x* costs.
//
// Immutable after compile(); shared by every matcher of the grammar.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"
#include "grammar/gbnf.h"

namespace lumen::grammar {

struct ByteSet {
  std::array<uint64_t, 4> bits{};
  bool has(uint8_t b) const { return (bits[b >> 6] >> (b & 63)) & 1; }
  void add(uint8_t b) { bits[b >> 6] |= uint64_t{1} << (b & 63); }
  void add_range(uint8_t lo, uint8_t hi) {
    for (int b = lo; b <= hi; ++b) add(static_cast<uint8_t>(b));
  }
  // Returns true if anything was added.
  bool merge(const ByteSet& o) {
    bool changed = false;
    for (int i = 0; i < 4; ++i) {
      const uint64_t n = bits[i] | o.bits[i];
      changed |= n != bits[i];
      bits[i] = n;
    }
    return changed;
  }
  bool empty() const { return (bits[0] | bits[1] | bits[2] | bits[3]) == 0; }
  bool operator==(const ByteSet& o) const { return bits == o.bits; }
};

enum class ElemKind : uint8_t { kBytes, kRule, kRepeat, kEnd };

struct Elem {
  ElemKind kind = ElemKind::kEnd;
  int32_t arg = -1;        // kBytes: byte-set index; kRule / kRepeat: the rule
  int32_t min = 0;         // kRepeat: iterations at least
  int32_t max = 0;         // kRepeat: at most; -1 unbounded
  int32_t rule = -1;       // the rule this element belongs to
};

// Where a rule's completion continues, as far as the grammar alone tells.
struct Continuation {
  enum class Kind : uint8_t {
    kNone,    // the rule is never used
    kBottom,  // only the end of the grammar (the root, used nowhere else)
    kReturn,  // always at element `pos` (the element after its only non-tail use)
    kFrame,   // always the repetition element at `pos` (it is that repetition's body only)
    kMany,    // depends on the stack
  };
  Kind kind = Kind::kNone;
  int32_t pos = -1;
  bool operator==(const Continuation& o) const { return kind == o.kind && pos == o.pos; }
};

struct PdaLimits {
  int32_t max_elements = 1 << 21;
  int32_t max_nullable_repeat = 64;  // bounded repetitions of items that match "" at most this
  int64_t max_inline_items = 1 << 16;  // items added by copying small shared rules
};

class Pda {
 public:
  static Result<Pda> compile(const Grammar& grammar, const PdaLimits& limits = {});

  const Elem& elem(int32_t pos) const { return elems_[static_cast<size_t>(pos)]; }
  int32_t n_elems() const { return static_cast<int32_t>(elems_.size()); }
  const ByteSet& byte_set(int32_t idx) const { return sets_[static_cast<size_t>(idx)]; }
  // Alternatives of rule r: start positions alt_starts()[alt_begin(r) .. alt_begin(r + 1)).
  int32_t alt_begin(int32_t r) const { return rule_alt_begin_[static_cast<size_t>(r)]; }
  int32_t alt_end(int32_t r) const { return rule_alt_begin_[static_cast<size_t>(r) + 1]; }
  int32_t alt_start(int32_t i) const { return alt_starts_[static_cast<size_t>(i)]; }
  int32_t n_rules() const { return static_cast<int32_t>(rule_names_.size()); }
  const std::string& rule_name(int32_t r) const { return rule_names_[static_cast<size_t>(r)]; }
  int32_t root() const { return root_; }

  bool nullable(int32_t r) const { return nullable_[static_cast<size_t>(r)]; }
  // Bytes that can come right after rule r completes (in any context).
  const ByteSet& follow(int32_t r) const { return follow_[static_cast<size_t>(r)]; }
  const Continuation& continuation(int32_t r) const { return cont_[static_cast<size_t>(r)]; }

  // Positions of kBytes elements (the tops a stack can have).
  const std::vector<int32_t>& byte_positions() const { return byte_positions_; }

 private:
  Status analyze(const PdaLimits& limits);

  std::vector<Elem> elems_;
  std::vector<ByteSet> sets_;
  std::vector<int32_t> rule_alt_begin_;  // [n_rules + 1]
  std::vector<int32_t> alt_starts_;
  std::vector<std::string> rule_names_;
  int32_t root_ = -1;
  std::vector<bool> nullable_;
  std::vector<ByteSet> first_;   // per rule
  std::vector<ByteSet> follow_;  // per rule
  std::vector<Continuation> cont_;
  std::vector<int32_t> byte_positions_;

  friend class PdaBuilder;
};

// UTF-8 byte-range sequences that together encode exactly the scalar values in [lo, hi]
// (surrogates excluded). Each sequence is 1-4 (first, last) byte ranges.
using ByteRangeSeq = std::vector<std::pair<uint8_t, uint8_t>>;
std::vector<ByteRangeSeq> utf8_sequences(uint32_t lo, uint32_t hi);

}  // namespace lumen::grammar
