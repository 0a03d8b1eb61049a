#include "grammar/compiled_grammar.h"

#include <algorithm>
#include <climits>
#include <map>
#include <string>
#include <tuple>

#include "base/check.h"
#include "base/timer.h"
#include "grammar/stack.h"

namespace lumen::grammar {

void TokenSet::assign(std::vector<int32_t> ids, int32_t n_vocab) {
  std::sort(ids.begin(), ids.end());
  ids.erase(std::unique(ids.begin(), ids.end()), ids.end());
  count_ = ids.size();
  const size_t n_words = (static_cast<size_t>(n_vocab) + 63) / 64;
  if (ids.size() > n_words * 2) {  // a list costs 4 bytes per id, the bitset 8 per 64 ids
    bits_.assign(n_words, 0);
    for (int32_t id : ids) bits_[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
    ids_.clear();
    ids_.shrink_to_fit();
  } else {
    ids_ = std::move(ids);
    ids_.shrink_to_fit();
    bits_.clear();
  }
}

void TokenSet::or_into(uint64_t* mask) const {
  if (!bits_.empty()) {
    for (size_t i = 0; i < bits_.size(); ++i) mask[i] |= bits_[i];
    return;
  }
  for (int32_t id : ids_) mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63);
}

bool TokenSet::contains(int32_t id) const {
  if (!bits_.empty()) return (bits_[static_cast<size_t>(id) >> 6] >> (id & 63)) & 1;
  return std::binary_search(ids_.begin(), ids_.end(), id);
}

namespace {

constexpr int32_t kMaxChain = 64;
// A CountedTokens list walks at most about this many entries per range (more only where one
// j alone has more tokens), and at most kMaxCheckpoints bitsets per direction are kept.
constexpr size_t kSegment = 256;
constexpr size_t kMaxCheckpoints = 48;

inline void set_bit(uint64_t* mask, int32_t id) { mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }

}  // namespace

void CountedTokens::assign(std::vector<CountedToken> tokens, int32_t n_vocab, bool with_suffix) {
  std::sort(tokens.begin(), tokens.end(),
            [](const CountedToken& a, const CountedToken& b) { return a.j < b.j || (a.j == b.j && a.token < b.token); });
  list_ = std::move(tokens);
  list_.shrink_to_fit();
  prefix_.clear();
  suffix_.clear();
  several_.clear();
  const size_t n_words = (static_cast<size_t>(n_vocab) + 63) / 64;
  if (list_.size() <= 2 * kSegment) return;
  std::vector<uint8_t> seen(static_cast<size_t>(n_vocab), 0);
  for (const CountedToken& e : list_) {
    uint8_t& n = seen[static_cast<size_t>(e.token)];
    n = n < 2 ? static_cast<uint8_t>(n + 1) : n;
  }
  for (const CountedToken& e : list_)
    if (seen[static_cast<size_t>(e.token)] > 1) several_.push_back(e);
  const size_t segment = std::max(kSegment, list_.size() / kMaxCheckpoints);
  // Prefix checkpoints, after the last token of a j once `segment` tokens have gone by.
  std::vector<uint64_t> acc(n_words, 0);
  size_t since = 0;
  for (size_t i = 0; i < list_.size(); ++i) {
    set_bit(acc.data(), list_[i].token);
    ++since;
    const bool j_ends = i + 1 == list_.size() || list_[i + 1].j != list_[i].j;
    if (j_ends && since >= segment) {
      prefix_.push_back({list_[i].j, static_cast<uint32_t>(i + 1), acc});
      since = 0;
    }
  }
  if (!with_suffix) return;
  std::fill(acc.begin(), acc.end(), 0);
  since = 0;
  for (size_t i = list_.size(); i-- > 0;) {
    set_bit(acc.data(), list_[i].token);
    ++since;
    const bool j_starts = i == 0 || list_[i - 1].j != list_[i].j;
    if (j_starts && since >= segment) {
      suffix_.push_back({list_[i].j, static_cast<uint32_t>(i), acc});
      since = 0;
    }
  }
  std::reverse(suffix_.begin(), suffix_.end());
}

size_t CountedTokens::first_above(int64_t j) const {
  return static_cast<size_t>(
      std::partition_point(list_.begin(), list_.end(), [&](const CountedToken& e) { return e.j <= j; }) -
      list_.begin());
}

void CountedTokens::or_range(int64_t lo, int64_t hi, uint64_t* mask, uint64_t* scratch) const {
  if (list_.empty()) return;
  const int32_t j_min = list_.front().j, j_max = list_.back().j;
  lo = std::max<int64_t>(lo, j_min);
  hi = std::min<int64_t>(hi, j_max);
  if (hi < lo) return;
  size_t begin = first_above(lo - 1), end = first_above(hi);
  const std::vector<uint64_t>* bits = nullptr;
  if (lo == j_min && !prefix_.empty() && prefix_.front().j <= hi) {
    const auto k = std::partition_point(prefix_.begin(), prefix_.end(), [&](const Checkpoint& c) { return c.j <= hi; });
    bits = &std::prev(k)->bits;
    begin = std::prev(k)->index;
  } else if (hi == j_max && !suffix_.empty() && suffix_.back().j >= lo) {
    const auto k = std::partition_point(suffix_.begin(), suffix_.end(), [&](const Checkpoint& c) { return c.j < lo; });
    bits = &k->bits;
    end = k->index;
  } else if (or_between(lo, hi, mask, scratch)) {
    return;
  }
  if (bits != nullptr)
    for (size_t w = 0; w < bits->size(); ++w) mask[w] |= (*bits)[w];
  for (size_t i = begin; i < end; ++i) set_bit(mask, list_[i].token);
}

// [lo, hi] inside the list (j_min < lo <= hi < j_max): the difference of two prefix bitsets
// (see the class comment). False when no checkpoint lies in [lo, hi] (the range is within
// one segment: walk it).
bool CountedTokens::or_between(int64_t lo, int64_t hi, uint64_t* mask, uint64_t* scratch) const {
  const auto ka = std::partition_point(prefix_.begin(), prefix_.end(), [&](const Checkpoint& c) { return c.j <= hi; });
  if (ka == prefix_.begin() || std::prev(ka)->j < lo) return false;
  const Checkpoint& a = *std::prev(ka);
  const auto kb = std::partition_point(prefix_.begin(), prefix_.end(), [&](const Checkpoint& c) { return c.j < lo; });
  const Checkpoint* b = kb == prefix_.begin() ? nullptr : &*std::prev(kb);
  const size_t n_words = a.bits.size();
  if (b != nullptr)
    for (size_t w = 0; w < n_words; ++w) scratch[w] = a.bits[w] & ~b->bits[w];
  else
    std::copy(a.bits.begin(), a.bits.end(), scratch);
  // Tokens at b < j < lo are in the difference but out of range (if one also has a j in
  // range, it is in several_ and set again below).
  for (size_t i = b != nullptr ? b->index : 0, e = first_above(lo - 1); i < e; ++i)
    scratch[static_cast<size_t>(list_[i].token) >> 6] &= ~(uint64_t{1} << (list_[i].token & 63));
  for (size_t w = 0; w < n_words; ++w) mask[w] |= scratch[w];
  for (size_t i = a.index, e = first_above(hi); i < e; ++i) set_bit(mask, list_[i].token);
  const auto in_range = std::partition_point(several_.begin(), several_.end(), [&](const CountedToken& e) { return e.j < lo; });
  for (auto it = in_range; it != several_.end() && it->j <= hi; ++it) set_bit(mask, it->token);
  return true;
}

size_t CountedTokens::memory_bytes() const {
  size_t n = (list_.capacity() + several_.capacity()) * sizeof(CountedToken);
  for (const auto* v : {&prefix_, &suffix_})
    for (const Checkpoint& c : *v) n += sizeof(Checkpoint) + c.bits.capacity() * 8;
  return n;
}

namespace {

// What a token ending right after one step can be, before the frame count is known.
struct Outcome {
  bool plain = false;            // allowed outright
  int32_t stay_j = INT32_MAX;    // smallest j of a path staying inside the frame's repetition
  std::vector<int32_t> exit_js;  // j of paths that left it
  std::vector<int32_t> boundary_js;  // j (-1: no counted frame) of paths that reached the boundary
};

struct Transition {
  int32_t next = 0;              // state id
  bool accept = false, boundary = false, overflow = false;
  int32_t outcome = -1;          // index into outcomes_
};

}  // namespace

// Builds every PositionMask of a grammar: a walk over the vocabulary trie per stack top,
// with the steps of the automaton memoized per (set of tops, byte).
class MaskBuilder {
 public:
  MaskBuilder(CompiledGrammar* g, const CompileLimits& limits)
      : g_(*g), pda_(g->pda_), vocab_(*g->vocab_), limits_(limits), arena_(4096), exp_(pda_, &arena_) {}

  Status build_all() {
    const double t0 = now_ms();
    g_.pos_index_.assign(static_cast<size_t>(pda_.n_elems()), -1);
    for (int32_t pos : pda_.byte_positions()) {
      g_.pos_index_[static_cast<size_t>(pos)] = static_cast<int32_t>(g_.masks_.size());
      g_.masks_.emplace_back();
      LUMEN_TRY(build_position(pos, &g_.masks_.back()));
    }
    CompileStats& s = g_.stats_;
    s.n_positions = static_cast<int32_t>(g_.masks_.size());
    s.n_trie_steps = n_steps_;
    s.memory_bytes = 0;
    for (const PositionMask& m : g_.masks_) {
      s.n_accepted += static_cast<int64_t>(m.accepted.size());
      s.n_conditional += static_cast<int64_t>(m.stays.size() + m.exits.size());
      s.n_crossing += static_cast<int64_t>(m.crossing.size());
      s.n_suffixes += static_cast<int64_t>(m.suffixes.size());
      s.n_uncertain += static_cast<int64_t>(m.uncertain.size());
      s.memory_bytes += m.accepted.memory_bytes() + m.stays.memory_bytes() + m.exits.memory_bytes() +
                        m.crossing.size() * sizeof(CrossingToken) + m.uncertain.size() * 6;
      for (const std::string& suffix : m.suffixes) s.memory_bytes += suffix.size() + 2;
    }
    s.ms = now_ms() - t0;
    return Status();
  }

 private:
  struct Chain {
    std::vector<std::pair<int32_t, int32_t>> frames;  // (pos, count), innermost first
    int32_t bottom = kBoundary;
    int32_t boundary_rule = -1;
    int32_t sym_index = -1;  // frames index of the counted repetition frame
  };

  Chain chain_for(int32_t pos) const {
    Chain c;
    int32_t r = pda_.elem(pos).rule;
    for (int32_t depth = 0; depth < kMaxChain; ++depth) {
      const Continuation& k = pda_.continuation(r);
      switch (k.kind) {
        case Continuation::Kind::kBottom:
          c.bottom = kBottom;
          return c;
        case Continuation::Kind::kNone:
        case Continuation::Kind::kMany:
          c.boundary_rule = r;
          return c;
        case Continuation::Kind::kReturn:
          c.frames.push_back({k.pos, kPlain});
          r = pda_.elem(k.pos).rule;
          break;
        case Continuation::Kind::kFrame: {
          const Elem& rep = pda_.elem(k.pos);
          // Inside the body of x* or x? the count is known: 0 (x* saturates at its min).
          if ((rep.max < 0 && rep.min == 0) || rep.max == 1) {
            c.frames.push_back({k.pos, 0});
            r = rep.rule;
            break;
          }
          if (c.sym_index >= 0 || pda_.nullable(rep.arg)) {
            c.boundary_rule = r;
            return c;
          }
          c.sym_index = static_cast<int32_t>(c.frames.size());
          c.frames.push_back({k.pos, kSymBase});
          r = rep.rule;
          break;
        }
      }
    }
    c.boundary_rule = r;
    return c;
  }

  void reset_walk() {
    arena_.clear();
    states_.clear();
    state_ids_.clear();
    next_.clear();
    trans_.clear();
    outcomes_.clear();
    state_id({});  // id 0: no stacks
  }

  int32_t state_id(const std::vector<int32_t>& tops) {
    auto it = state_ids_.find(tops);
    if (it != state_ids_.end()) return it->second;
    const auto id = static_cast<int32_t>(states_.size());
    states_.push_back(tops);
    state_ids_.emplace(tops, id);
    next_.emplace_back();
    return id;
  }

  Result<int32_t> step(int32_t state, uint8_t byte) {
    std::vector<int32_t>& nx = next_[static_cast<size_t>(state)];
    if (nx.empty()) nx.assign(256, -1);
    if (nx[byte] >= 0) return nx[byte];
    tops_.clear();
    ev_.clear();
    LUMEN_TRY(exp_.advance(states_[static_cast<size_t>(state)], byte, &tops_, &ev_));
    Transition t;
    t.next = state_id(tops_);
    t.accept = ev_.accept;
    t.boundary = ev_.boundary;
    t.overflow = ev_.overflow;
    t.outcome = static_cast<int32_t>(outcomes_.size());
    outcomes_.push_back(outcome_of(tops_, ev_));
    const auto id = static_cast<int32_t>(trans_.size());
    trans_.push_back(t);
    next_[static_cast<size_t>(state)][byte] = id;  // next_ may have grown: index again
    return id;
  }

  Outcome outcome_of(const std::vector<int32_t>& tops, const ExpandEvents& ev) const {
    Outcome o;
    for (int32_t t : tops) {
      if (arena_[t].count >= kTopTagBase) {  // left the frame earlier in the token
        o.exit_js.push_back(arena_[t].count - kTopTagBase);
        continue;
      }
      int32_t x = t;
      bool framed = false;
      while (x >= 0) {
        const StackNode& n = arena_[x];
        if (n.count >= kExitBase) {
          o.exit_js.push_back(n.count - kExitBase);
          framed = true;
          break;
        }
        if (n.count >= kSymBase) {
          o.stay_j = std::min(o.stay_j, n.count - kSymBase);
          framed = true;
          break;
        }
        x = n.parent;
      }
      if (!framed) o.plain = true;
    }
    for (const auto* tags : {&ev.accept_tags, &ev.boundary_tags})
      for (int32_t tag : *tags) {
        if (tag < 0) o.plain = true;
        else o.exit_js.push_back(tag);
      }
    o.boundary_js = ev.boundary_tags;
    for (std::vector<int32_t>* v : {&o.exit_js, &o.boundary_js}) {
      std::sort(v->begin(), v->end());
      v->erase(std::unique(v->begin(), v->end()), v->end());
    }
    return o;
  }

  // A token that may go on past the boundary (`unknown`: a count overflowed on its way, so
  // only the whole token checked at run time tells): records every place d < depth where
  // its walk reached the boundary and its next byte is one FOLLOW allows, with the suffix
  // after d. levels_[1 .. depth) are the walk's states along the token's first bytes.
  void add_crossings(int32_t token, uint16_t depth, bool unknown, const ByteSet& follow) {
    if (unknown) {
      uncertain_.push_back(token);
      return;
    }
    const std::string_view bytes = vocab_.bytes(token);
    for (uint16_t k = 1; k < depth && k < bytes.size(); ++k) {
      const Level& lv = levels_[k];
      if (!lv.pending || !follow.has(static_cast<uint8_t>(bytes[k]))) continue;
      const std::string suffix(bytes.substr(k));
      auto [it, fresh] = suffix_ids_.emplace(suffix, static_cast<int32_t>(suffix_ids_.size()));
      for (int32_t j : outcomes_[static_cast<size_t>(trans_[static_cast<size_t>(lv.trans)].outcome)].boundary_js)
        crossing_.push_back({token, it->second, j});
    }
  }

  // Sorts one token by the outcome of its last step.
  void classify(int32_t token, const Outcome& o, bool uncertain, const PositionMask& m) {
    const bool counted = m.frame_depth >= 0;
    bool accepted = o.plain;
    if (counted) {
      if (o.stay_j != INT32_MAX && (m.rep_max < 0 || o.stay_j == 0)) accepted = true;
      for (int32_t j : o.exit_js)
        if (j >= m.rep_min && (m.rep_max < 0 || j <= 1)) accepted = true;
    }
    if (accepted) {
      accepted_.push_back(token);
      return;
    }
    if (counted) {
      if (o.stay_j != INT32_MAX) stays_.push_back({token, o.stay_j});
      for (int32_t j : o.exit_js) exits_.push_back({token, j});
    }
    if (uncertain) add_crossings(token, cur_depth_, cur_unknown_, cur_follow_);
  }

  Status build_position(int32_t pos, PositionMask* m) {
    reset_walk();
    const Chain chain = chain_for(pos);
    int32_t parent = chain.bottom;
    for (size_t i = chain.frames.size(); i-- > 0;)
      parent = arena_.intern(chain.frames[i].first, parent, chain.frames[i].second);
    if (chain.sym_index >= 0) {
      const Elem& rep = pda_.elem(chain.frames[static_cast<size_t>(chain.sym_index)].first);
      m->frame_depth = chain.sym_index + 1;
      m->rep_min = rep.min;
      m->rep_max = rep.max;
    }
    m->boundary_depth = static_cast<int32_t>(chain.frames.size()) + 1;
    const ByteSet follow = chain.bottom == kBoundary ? pda_.follow(chain.boundary_rule) : ByteSet{};
    cur_follow_ = follow;
    const int32_t root_state = state_id({arena_.intern(pos, parent, kPlain)});

    accepted_.clear();
    stays_.clear();
    exits_.clear();
    uncertain_.clear();
    crossing_.clear();
    suffix_ids_.clear();
    const std::vector<TrieNode>& trie = vocab_.trie();
    const std::vector<int32_t>& trie_tokens = vocab_.trie_tokens();
    std::vector<Level>& levels = levels_;
    levels.assign(1, Level{root_state, -1, false, false, false});
    for (size_t i = 1; i < trie.size();) {
      const TrieNode& node = trie[i];
      if (++n_steps_ > limits_.max_trie_steps)
        return error("grammar: too large to precompute (over " + std::to_string(limits_.max_trie_steps) +
                     " steps; simplify it)");
      const Level& up = levels[node.depth - 1];
      LUMEN_ASSIGN_OR_RETURN(int32_t ti, step(up.state, node.byte));
      const Transition tr = trans_[static_cast<size_t>(ti)];
      const bool unc = up.uncertain || (up.pending && follow.has(node.byte)) || tr.overflow;
      const bool unknown = up.overflow || tr.overflow;
      const bool live = !states_[static_cast<size_t>(tr.next)].empty();
      if (!live && !tr.accept && !tr.boundary && !unc) {
        i = static_cast<size_t>(node.end);
        continue;
      }
      const Outcome& o = outcomes_[static_cast<size_t>(tr.outcome)];
      cur_depth_ = node.depth;
      cur_unknown_ = unknown;
      for (int32_t k = node.tok_begin; k < node.tok_end; ++k)
        classify(trie_tokens[static_cast<size_t>(k)], o, unc, *m);
      if (!live && !tr.boundary) {  // no more bytes can match; maybe past the boundary
        if (unc)
          for (int32_t j = static_cast<int32_t>(i) + 1; j < node.end; ++j)
            for (int32_t k = trie[j].tok_begin; k < trie[j].tok_end; ++k)
              add_crossings(trie_tokens[static_cast<size_t>(k)], node.depth, unknown, follow);
        i = static_cast<size_t>(node.end);
        continue;
      }
      if (levels.size() <= node.depth) levels.resize(node.depth + 1u);
      levels[node.depth] = Level{tr.next, ti, unc, tr.boundary, unknown};
      ++i;
    }

    m->accepted.assign(std::move(accepted_), vocab_.n_vocab());
    accepted_ = {};
    m->stays.assign(stays_, vocab_.n_vocab(), /*with_suffix=*/false);  // a stay needs j <= bound
    m->exits.assign(exits_, vocab_.n_vocab(), /*with_suffix=*/true);
    finish_crossings(m);
    m->uncertain = uncertain_;
    m->uncertain_lcp.resize(m->uncertain.size());
    for (size_t k = 0; k < m->uncertain.size(); ++k) {
      size_t lcp = 0;
      if (k > 0) {
        const std::string_view a = vocab_.bytes(m->uncertain[k - 1]), b = vocab_.bytes(m->uncertain[k]);
        while (lcp < a.size() && lcp < b.size() && a[lcp] == b[lcp]) ++lcp;
      }
      m->uncertain_lcp[k] = static_cast<uint16_t>(std::min<size_t>(lcp, 65535));
    }
    return Status();
  }

  CompiledGrammar& g_;
  const Pda& pda_;
  const TokenTable& vocab_;
  CompileLimits limits_;
  StackArena arena_;
  Expander exp_;
  std::vector<std::vector<int32_t>> states_;
  std::map<std::vector<int32_t>, int32_t> state_ids_;
  std::vector<std::vector<int32_t>> next_;  // per state: 256 transition ids (-1: not yet)
  std::vector<Transition> trans_;
  std::vector<Outcome> outcomes_;
  std::vector<int32_t> tops_;
  ExpandEvents ev_;
  // Sorts the suffixes (so that run time walks them sharing prefixes) and the crossing
  // tokens by suffix.
  void finish_crossings(PositionMask* m) {
    std::vector<std::pair<std::string, int32_t>> order(suffix_ids_.begin(), suffix_ids_.end());
    std::sort(order.begin(), order.end());
    std::vector<int32_t> new_id(order.size());
    m->suffixes.clear();
    m->suffix_lcp.clear();
    for (size_t k = 0; k < order.size(); ++k) {
      new_id[static_cast<size_t>(order[k].second)] = static_cast<int32_t>(k);
      size_t lcp = 0;
      if (k > 0) {
        const std::string& a = order[k - 1].first;
        const std::string& b = order[k].first;
        while (lcp < a.size() && lcp < b.size() && a[lcp] == b[lcp]) ++lcp;
      }
      m->suffix_lcp.push_back(static_cast<uint16_t>(std::min<size_t>(lcp, 65535)));
      m->suffixes.push_back(std::move(order[k].first));
    }
    for (CrossingToken& c : crossing_) c.suffix = new_id[static_cast<size_t>(c.suffix)];
    std::sort(crossing_.begin(), crossing_.end(), [](const CrossingToken& a, const CrossingToken& b) {
      return std::tie(a.suffix, a.token, a.j) < std::tie(b.suffix, b.token, b.j);
    });
    crossing_.erase(std::unique(crossing_.begin(), crossing_.end(),
                                [](const CrossingToken& a, const CrossingToken& b) {
                                  return a.suffix == b.suffix && a.token == b.token && a.j == b.j;
                                }),
                    crossing_.end());
    m->crossing = crossing_;
  }

  std::vector<int32_t> accepted_, uncertain_;
  std::vector<CountedToken> stays_, exits_;
  std::vector<CrossingToken> crossing_;
  std::map<std::string, int32_t> suffix_ids_;
  // The token being classified: its trie depth, whether a count overflowed on its way, and
  // the bytes that may follow the boundary.
  uint16_t cur_depth_ = 0;
  bool cur_unknown_ = false;
  ByteSet cur_follow_;
  // The walk's state at each depth of the trie branch being visited.
  struct Level {
    int32_t state = 0;
    int32_t trans = -1;      // the transition into this depth (-1: the root)
    bool uncertain = false;  // a path went past the boundary with a byte FOLLOW allows
    bool pending = false;    // a path reached the boundary at this depth
    bool overflow = false;   // a count overflowed at this depth or above
  };
  std::vector<Level> levels_;
  int64_t n_steps_ = 0;
};

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::compile(const Grammar& grammar,
                                                                        std::shared_ptr<const TokenTable> vocab,
                                                                        const CompileLimits& limits) {
  LUMEN_CHECK(vocab != nullptr);
  auto g = std::shared_ptr<CompiledGrammar>(new CompiledGrammar());
  LUMEN_ASSIGN_OR_RETURN(g->pda_, Pda::compile(grammar, limits.pda));
  g->vocab_ = std::move(vocab);
  MaskBuilder b(g.get(), limits);
  LUMEN_TRY(b.build_all());
  return std::shared_ptr<const CompiledGrammar>(std::move(g));
}

Result<std::shared_ptr<const CompiledGrammar>> CompiledGrammar::from_gbnf(std::string_view text,
                                                                          std::shared_ptr<const TokenTable> vocab,
                                                                          const CompileLimits& limits) {
  LUMEN_ASSIGN_OR_RETURN(Grammar g, parse_gbnf(text));
  return compile(g, std::move(vocab), limits);
}

}  // namespace lumen::grammar
