// Grammar stacks as shared, interned nodes, and the expansion that moves them over bytes.
//
// A stack is a chain of nodes, top first. The top is always a kBytes element (the byte the
// stack expects next); the nodes below it are where to continue when the rule above
// completes: a plain continuation (an element position) or a repetition frame (the kRepeat
// element and how many iterations are complete).
//
//   object ::= "{" pair ( "," pair )* "}"        after `{"a":1,`  the stack is
//                                                  top   [pair: first byte of the key]
//                                                  frame [( "," pair )*, 1 iteration done]
//                                                  cont  ["}"]   -> parent: kBottom
//
// Nodes are interned: (pos, parent, count) has one id in an arena, so equal stacks are
// equal ids, a set of stacks is a sorted vector of top ids, and stacks share their bottoms.
// A rule used as the last element of an alternative is entered without pushing a
// continuation (a tail call), so right recursion and repetition keep stacks flat.
//
// Single-threaded: each matcher (and the precomputation) owns its arena and expander.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "base/status.h"
#include "grammar/pda.h"

namespace lumen::grammar {

// Special parents (and one special top).
constexpr int32_t kBottom = -1;     // below the root rule: popping here completes the grammar
constexpr int32_t kAcceptTop = -2;  // a state member: the grammar is complete
constexpr int32_t kBoundary = -3;   // precomputation only: the rest of the stack is unknown

// Node counts.
constexpr int32_t kPlain = -1;          // a continuation at `pos`
// >= 0: a repetition frame at `pos` with that many iterations complete (saturated at the
// repetition's min when it is unbounded: more makes no difference).
constexpr int32_t kSymBase = 1 << 28;   // precomputation: a frame with an unknown count c; the
                                        // value - kSymBase = iterations completed since (j)
constexpr int32_t kExitBase = 1 << 29;  // precomputation: the frame was left after j = value -
                                        // kExitBase iterations; popping it passes through
constexpr int32_t kMaxSymbolic = 4096;  // j beyond this: the precomputation gives up (uncertain)
constexpr int32_t kTopTagBase = 1 << 27;  // precomputation: a top reached after leaving the
                                          // frame after j iterations has count kTopTagBase + j
                                          // (the frame is no longer in its chain to tell)

struct StackNode {
  int32_t pos = 0;
  int32_t parent = kBottom;
  int32_t count = kPlain;
};

class StackArena {
 public:
  explicit StackArena(size_t reserve = 1024);
  int32_t intern(int32_t pos, int32_t parent, int32_t count);
  const StackNode& operator[](int32_t id) const { return nodes_[static_cast<size_t>(id)]; }
  size_t size() const { return nodes_.size(); }
  void clear();

 private:
  void rehash(size_t capacity);
  std::vector<StackNode> nodes_;
  std::vector<int32_t> table_;  // node id + 1; 0 = empty
  size_t mask_ = 0;
};

// What one expansion met besides new tops.
struct ExpandEvents {
  bool accept = false;     // a path completed the grammar
  bool boundary = false;   // a path reached kBoundary (completed the statically known part)
  bool overflow = false;   // a symbolic count passed kMaxSymbolic
  // Exit counts (j) of the paths that accepted / reached the boundary; -1: not via an exit.
  std::vector<int32_t> accept_tags, boundary_tags;
  void clear() {
    accept = boundary = overflow = false;
    accept_tags.clear();
    boundary_tags.clear();
  }
};

struct ExpandLimits {
  int32_t max_work = 1 << 20;   // work items per call
  int32_t max_tops = 4096;      // stacks in one state
};

class Expander {
 public:
  Expander(const Pda& pda, StackArena* arena, ExpandLimits limits = {});

  // The tops of the stacks that continue at element `pos` above `parent` (no bytes consumed).
  Status expand(int32_t pos, int32_t parent, std::vector<int32_t>* tops, ExpandEvents* ev);
  // The tops of the stacks that continue where the run above `parent` completes (what
  // popping to `parent` leads to; no bytes consumed).
  Status resume(int32_t parent, std::vector<int32_t>* tops, ExpandEvents* ev);
  // The state of a fresh grammar: the root's alternatives above kBottom.
  Status initial(std::vector<int32_t>* tops, ExpandEvents* ev);
  // Every stack of `tops` whose top accepts byte b, moved past it. `out` is sorted, unique.
  Status advance(std::span<const int32_t> tops, uint8_t b, std::vector<int32_t>* out, ExpandEvents* ev);

 private:
  struct Work {
    int32_t pos, parent, tag;
  };
  void push(int32_t pos, int32_t parent, int32_t tag);
  void pop_to(int32_t parent, int32_t tag);
  Status run(std::vector<int32_t>* tops, ExpandEvents* ev);
  bool first_visit(int32_t pos, int32_t parent, int32_t tag);
  void enter_body(int32_t rule, int32_t frame, int32_t tag);

  const Pda* pda_;
  StackArena* arena_;
  ExpandLimits limits_;
  std::vector<Work> work_;
  ExpandEvents* ev_ = nullptr;
  // Visited (pos, parent, tag) in this call: open addressing, cleared by bumping the stamp.
  struct Seen {
    int32_t pos, parent, tag;
    uint32_t stamp;
  };
  std::vector<Seen> seen_;
  uint32_t stamp_ = 1;
  int32_t n_seen_ = 0;
  int32_t n_work_done_ = 0;
};

}  // namespace lumen::grammar
