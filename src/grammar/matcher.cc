#include "grammar/matcher.h"

#include <algorithm>
#include <cstdint>

#include "base/check.h"

namespace lumen::grammar {
namespace {

constexpr size_t kCacheSlots = 1024;           // cached suffix / uncertain-token results
constexpr size_t kResolvedPoolMax = 1 << 20;   // ids kept over all cached results

inline void set_bit(uint64_t* mask, int32_t id) { mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)),
      arena_(std::make_unique<StackArena>(4096)),
      exp_(grammar_->pda(), arena_.get()),
      scratch_(std::make_unique<StackArena>(256)),
      scratch_exp_(grammar_->pda(), scratch_.get()),
      cache_(kCacheSlots),
      scratch_bits_((static_cast<size_t>(grammar_->vocab().n_vocab()) + 63) / 64) {
  reset();
}

GrammarMatcher::GrammarMatcher(GrammarMatcher&&) noexcept = default;
GrammarMatcher& GrammarMatcher::operator=(GrammarMatcher&&) noexcept = default;
GrammarMatcher::~GrammarMatcher() = default;

void GrammarMatcher::reset() {
  arena_->clear();
  hist_.clear();
  hist_begin_.clear();
  terminated_.clear();
  error_.clear();
  std::fill(cache_.begin(), cache_.end(), CacheEntry{});
  n_cached_ = 0;
  resolved_.clear();
  last_valid_ = false;
  tmp_a_.clear();
  ev_.clear();
  Status st = exp_.initial(&tmp_a_, &ev_);
  if (!st.ok()) error_ = st.message();
  if (ev_.accept) tmp_a_.insert(tmp_a_.begin(), kAcceptTop);
  push_state(tmp_a_, false);
}

void GrammarMatcher::push_state(const std::vector<int32_t>& s, bool terminated) {
  hist_begin_.push_back(static_cast<uint32_t>(hist_.size()));
  hist_.insert(hist_.end(), s.begin(), s.end());
  terminated_.push_back(terminated ? 1 : 0);
}

bool GrammarMatcher::can_end() const {
  const std::span<const int32_t> s = state();
  return !s.empty() && s[0] == kAcceptTop;
}

bool GrammarMatcher::must_end() const {
  const std::span<const int32_t> s = state();
  return s.size() == 1 && s[0] == kAcceptTop;
}

bool GrammarMatcher::advance_state(std::span<const int32_t> from, std::string_view bytes, std::vector<int32_t>* to) {
  tmp_a_.assign(from.begin(), from.end());
  for (const char ch : bytes) {
    to->clear();
    ev_.clear();
    Status st = exp_.advance(tmp_a_, static_cast<uint8_t>(ch), to, &ev_);
    if (!st.ok()) {
      error_ = st.message();
      return false;
    }
    if (ev_.accept) to->insert(to->begin(), kAcceptTop);
    if (to->empty()) return false;
    tmp_a_.swap(*to);
  }
  to->swap(tmp_a_);
  return true;
}

bool GrammarMatcher::accept_token(int32_t id) {
  if (failed() || id < 0 || id >= grammar_->vocab().n_vocab()) return false;
  const TokenTable& vocab = grammar_->vocab();
  if (vocab.is_eog(id)) {
    if (!can_end()) return false;
    tmp_b_.assign(1, kAcceptTop);
    push_state(tmp_b_, true);
    return true;
  }
  if (terminated()) return false;
  const std::string_view bytes = vocab.bytes(id);
  if (bytes.empty()) return false;
  if (!advance_state(state(), bytes, &tmp_b_)) return false;
  push_state(tmp_b_, false);
  return true;
}

bool GrammarMatcher::accept_bytes(std::string_view bytes) {
  if (failed() || terminated()) return false;
  if (!advance_state(state(), bytes, &tmp_b_)) return false;
  // Replace the current state (raw bytes are not a token of the history).
  hist_.resize(hist_begin_.back());
  hist_.insert(hist_.end(), tmp_b_.begin(), tmp_b_.end());
  return true;
}

void GrammarMatcher::rollback(int32_t n) {
  LUMEN_CHECK(n >= 0 && n <= n_tokens());
  for (int32_t k = 0; k < n; ++k) {
    hist_.resize(hist_begin_.back());
    hist_begin_.pop_back();
    terminated_.pop_back();
  }
}

void GrammarMatcher::add_conditional(int32_t top, const PositionMask& pm, uint64_t* mask) {
  int32_t x = top;
  for (int32_t k = 0; k < pm.frame_depth; ++k) x = (*arena_)[x].parent;
  const int64_t c = (*arena_)[x].count;  // iterations of the repetition complete
  LUMEN_DCHECK(c >= 0 && c < kSymBase);
  const int64_t unbounded = INT64_MAX / 2;
  // A stay ends inside iteration c + j + 1, which must exist: c + j < max (unbounded: the
  // stays were accepted outright). An exit leaves after c + j iterations: min <= c + j <= max.
  if (pm.rep_max >= 0) pm.stays.or_range(INT64_MIN / 2, pm.rep_max - c - 1, mask, scratch_bits_.data());
  pm.exits.or_range(pm.rep_min - c, pm.rep_max >= 0 ? pm.rep_max - c : unbounded, mask, scratch_bits_.data());
}

// Copies the stack from node `x` down into the scratch arena (cleared), the counted frame
// excepted: none here, the copy is exact. Returns the copy's id (kBottom for kBottom).
int32_t GrammarMatcher::copy_to_scratch(int32_t x) {
  scratch_->clear();
  chain_.clear();
  for (; x >= 0; x = (*arena_)[x].parent) chain_.push_back(x);
  int32_t copy = kBottom;
  for (size_t i = chain_.size(); i-- > 0;) {
    const StackNode& n = (*arena_)[chain_[i]];
    copy = scratch_->intern(n.pos, copy, n.count);
  }
  return copy;
}

// Matches n byte strings, sorted so that string k shares lcp[k] leading bytes with string
// k - 1, from the scratch state levels_[0] (level_accept_[0]: whether it is complete);
// appends 1 (the string matches: a stack survives, or it completes the grammar) or 0 per
// string to resolved_. False if the grammar failed.
template <typename BytesOf>
bool GrammarMatcher::match_sorted(size_t n, BytesOf bytes_of, const std::vector<uint16_t>& lcp) {
  size_t valid = 0;  // levels_[0..valid] hold the states after that many bytes of the last string
  for (size_t k = 0; k < n; ++k) {
    const std::string_view bytes = bytes_of(k);
    size_t d = std::min<size_t>(lcp[k], valid);
    bool alive = true;
    while (d < bytes.size()) {
      if (levels_[d].empty()) {
        alive = false;
        break;
      }
      if (levels_.size() < d + 2) {
        levels_.resize(d + 2);
        level_accept_.resize(d + 2, 0);
      }
      levels_[d + 1].clear();
      ev_.clear();
      Status st = scratch_exp_.advance(levels_[d], static_cast<uint8_t>(bytes[d]), &levels_[d + 1], &ev_);
      if (!st.ok()) {
        error_ = st.message();
        return false;
      }
      level_accept_[d + 1] = ev_.accept ? 1 : 0;
      ++d;
    }
    valid = d;
    resolved_.push_back(alive && (!levels_[d].empty() || level_accept_[d]) ? 1 : 0);
  }
  return true;
}

// Checks the position's uncertain tokens (whole) against the real stack under `top`, on a
// copy of that stack in the scratch arena (the main arena keeps only the states of accepted
// tokens); appends the ids of those allowed to resolved_.
bool GrammarMatcher::resolve(int32_t top, const PositionMask& pm) {
  if (levels_.empty()) levels_.resize(1);
  levels_[0].assign(1, copy_to_scratch(top));
  level_accept_.assign(1, 0);
  const size_t begin = resolved_.size();
  const TokenTable& vocab = grammar_->vocab();
  if (!match_sorted(pm.uncertain.size(), [&](size_t k) { return vocab.bytes(pm.uncertain[k]); }, pm.uncertain_lcp))
    return false;
  size_t out = begin;
  for (size_t k = 0; k < pm.uncertain.size(); ++k)
    if (resolved_[begin + k] != 0) resolved_[out++] = pm.uncertain[k];
  resolved_.resize(out);
  return true;
}

// Matches the position's suffixes from where the stack `below` continues (a copy of it in the
// scratch arena); appends one 0 / 1 per suffix to resolved_.
bool GrammarMatcher::match_suffixes(int32_t below, const PositionMask& pm) {
  if (levels_.empty()) levels_.resize(1);
  levels_[0].clear();
  ev_.clear();
  Status st = scratch_exp_.resume(copy_to_scratch(below), &levels_[0], &ev_);
  if (!st.ok()) {
    error_ = st.message();
    return false;
  }
  level_accept_.assign(1, ev_.accept ? 1 : 0);
  return match_sorted(pm.suffixes.size(), [&](size_t k) { return std::string_view(pm.suffixes[k]); }, pm.suffix_lcp);
}

// The cached results for (key_pos, key_node), computing them on a miss: the allowed ids of
// the uncertain tokens (key_pos = kWholeTokens, key_node = the top), or one 0 / 1 per
// suffix (key_pos = the top's position, key_node = the stack below the boundary). Null if
// the grammar failed.
const GrammarMatcher::CacheEntry* GrammarMatcher::cached(int32_t key_pos, int32_t key_node, int32_t top,
                                                         const PositionMask& pm) {
  const size_t slots = cache_.size();
  const auto hash = [&] {
    return static_cast<size_t>((static_cast<uint64_t>(static_cast<uint32_t>(key_pos)) << 32 |
                                static_cast<uint32_t>(key_node)) * 0x9E3779B97F4A7C15ull >> 40) & (slots - 1);
  };
  size_t i = hash();
  for (; cache_[i].begin != kEmptySlot; i = (i + 1) & (slots - 1))
    if (cache_[i].key_pos == key_pos && cache_[i].key_node == key_node) return &cache_[i];
  if (static_cast<size_t>(n_cached_ + 1) * 2 > slots || resolved_.size() > kResolvedPoolMax) {
    std::fill(cache_.begin(), cache_.end(), CacheEntry{});
    n_cached_ = 0;
    resolved_.clear();
    i = hash();
  }
  const auto begin = static_cast<uint32_t>(resolved_.size());
  if (!(key_pos == kWholeTokens ? resolve(top, pm) : match_suffixes(key_node, pm))) {
    resolved_.resize(begin);
    return nullptr;
  }
  cache_[i] = CacheEntry{key_pos, key_node, begin, static_cast<uint32_t>(resolved_.size())};
  ++n_cached_;
  return &cache_[i];
}

void GrammarMatcher::add_resolved(int32_t top, const PositionMask& pm, uint64_t* mask) {
  if (!pm.crossing.empty()) {
    int32_t below = top;
    for (int32_t k = 0; k < pm.boundary_depth; ++k) {
      LUMEN_DCHECK(below >= 0);
      below = (*arena_)[below].parent;
    }
    const CacheEntry* e = cached((*arena_)[top].pos, below, top, pm);
    if (e == nullptr) return;
    const int32_t* ok = resolved_.data() + e->begin;  // one per suffix
    int64_t c = 0;  // iterations of the counted frame complete (when there is one)
    if (pm.frame_depth >= 0) {
      int32_t x = top;
      for (int32_t k = 0; k < pm.frame_depth; ++k) x = (*arena_)[x].parent;
      c = (*arena_)[x].count;
    }
    for (const CrossingToken& ct : pm.crossing) {
      if (ok[ct.suffix] == 0) continue;
      // Left the frame after c + j iterations: min <= c + j <= max.
      if (ct.j >= 0 && (c + ct.j < pm.rep_min || (pm.rep_max >= 0 && c + ct.j > pm.rep_max))) continue;
      set_bit(mask, ct.token);
    }
  }
  if (!pm.uncertain.empty()) {
    const CacheEntry* e = cached(kWholeTokens, top, top, pm);
    if (e == nullptr) return;
    for (uint32_t k = e->begin; k < e->end; ++k) set_bit(mask, resolved_[k]);
  }
}

bool GrammarMatcher::fill_mask(std::span<uint64_t> mask) {
  const TokenTable& vocab = grammar_->vocab();
  LUMEN_CHECK(mask.size() * 64 >= static_cast<size_t>(vocab.n_vocab()));
  std::fill(mask.begin(), mask.end(), 0);
  if (failed()) return false;
  if (can_end() || terminated())
    for (int32_t id : vocab.eog_ids()) set_bit(mask.data(), id);
  if (terminated()) return true;
  const std::span<const int32_t> st = state();
  const size_t n_words = (static_cast<size_t>(vocab.n_vocab()) + 63) / 64;
  if (last_valid_ && std::equal(st.begin(), st.end(), last_state_.begin(), last_state_.end())) {
    std::copy(last_mask_.begin(), last_mask_.end(), mask.begin());
    return true;
  }
  // st points into hist_, which resolve() does not touch.
  for (const int32_t t : st) {
    if (t < 0) continue;
    const PositionMask* pm = grammar_->position((*arena_)[t].pos);
    LUMEN_DCHECK(pm != nullptr);
    pm->accepted.or_into(mask.data());
    if (pm->frame_depth >= 0) add_conditional(t, *pm, mask.data());
    if (!pm->crossing.empty() || !pm->uncertain.empty()) add_resolved(t, *pm, mask.data());
    if (failed()) return false;
  }
  last_state_.assign(st.begin(), st.end());
  last_mask_.assign(mask.begin(), mask.begin() + static_cast<ptrdiff_t>(n_words));
  last_valid_ = true;
  return true;
}

}  // namespace lumen::grammar
