#include "grammar/matcher.h"

#include <algorithm>
#include <cstdint>

#include "base/check.h"

namespace lumen::grammar {
namespace {

constexpr size_t kCacheSlots = 1024;           // cached uncertain-token results (by top node)
constexpr size_t kResolvedPoolMax = 1 << 20;   // ids kept over all cached results

inline void set_bit(uint64_t* mask, int32_t id) { mask[static_cast<size_t>(id) >> 6] |= uint64_t{1} << (id & 63); }

}  // namespace

GrammarMatcher::GrammarMatcher(std::shared_ptr<const CompiledGrammar> grammar)
    : grammar_(std::move(grammar)),
      arena_(std::make_unique<StackArena>(4096)),
      exp_(grammar_->pda(), arena_.get()),
      scratch_(std::make_unique<StackArena>(256)),
      scratch_exp_(grammar_->pda(), scratch_.get()),
      cache_(kCacheSlots) {
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

void GrammarMatcher::add_conditional(int32_t top, const PositionMask& pm, uint64_t* mask) const {
  int32_t x = top;
  for (int32_t k = 0; k < pm.frame_depth; ++k) x = (*arena_)[x].parent;
  const int64_t c = (*arena_)[x].count;  // iterations of the repetition complete
  LUMEN_DCHECK(c >= 0 && c < kSymBase);
  const int64_t unbounded = INT64_MAX / 2;
  // A stay ends inside iteration c + j + 1, which must exist: c + j < max (unbounded: the
  // stays were accepted outright). An exit leaves after c + j iterations: min <= c + j <= max.
  if (pm.rep_max >= 0) pm.stays.or_range(INT64_MIN / 2, pm.rep_max - c - 1, mask);
  pm.exits.or_range(pm.rep_min - c, pm.rep_max >= 0 ? pm.rep_max - c : unbounded, mask);
}

// Checks the position's uncertain tokens against the real stack under `top`, on a copy of
// that stack in the scratch arena (the main arena keeps only the states of accepted tokens).
bool GrammarMatcher::resolve(int32_t top, const PositionMask& pm) {
  StackArena& sa = *scratch_;
  sa.clear();
  tmp_a_.clear();
  for (int32_t x = top; x >= 0; x = (*arena_)[x].parent) tmp_a_.push_back(x);
  int32_t copy = kBottom;
  for (size_t i = tmp_a_.size(); i-- > 0;) {
    const StackNode& n = (*arena_)[tmp_a_[i]];
    copy = sa.intern(n.pos, copy, n.count);
  }
  const TokenTable& vocab = grammar_->vocab();
  if (levels_.empty()) levels_.resize(1);
  levels_[0].assign(1, copy);
  level_accept_.assign(1, 0);
  size_t valid = 0;  // levels_[0..valid] hold the states after that many bytes of the last token
  for (size_t k = 0; k < pm.uncertain.size(); ++k) {
    const int32_t tok = pm.uncertain[k];
    const std::string_view bytes = vocab.bytes(tok);
    size_t d = std::min<size_t>(pm.uncertain_lcp[k], valid);
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
    if (alive && (!levels_[d].empty() || level_accept_[d])) resolved_.push_back(tok);
  }
  return true;
}

void GrammarMatcher::add_resolved(int32_t top, const PositionMask& pm, uint64_t* mask) {
  const size_t slots = cache_.size();
  size_t i = static_cast<size_t>(top) * 0x9E3779B1u & (slots - 1);
  for (; cache_[i].top >= 0; i = (i + 1) & (slots - 1)) {
    if (cache_[i].top == top) {
      for (uint32_t k = cache_[i].begin; k < cache_[i].end; ++k) set_bit(mask, resolved_[k]);
      return;
    }
  }
  if (static_cast<size_t>(n_cached_ + 1) * 2 > slots || resolved_.size() > kResolvedPoolMax) {
    std::fill(cache_.begin(), cache_.end(), CacheEntry{});
    n_cached_ = 0;
    resolved_.clear();
    i = static_cast<size_t>(top) * 0x9E3779B1u & (slots - 1);
  }
  const auto begin = static_cast<uint32_t>(resolved_.size());
  if (!resolve(top, pm)) {
    resolved_.resize(begin);
    return;
  }
  cache_[i] = CacheEntry{top, begin, static_cast<uint32_t>(resolved_.size())};
  ++n_cached_;
  for (uint32_t k = begin; k < resolved_.size(); ++k) set_bit(mask, resolved_[k]);
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
    if (!pm->uncertain.empty()) add_resolved(t, *pm, mask.data());
    if (failed()) return false;
  }
  last_state_.assign(st.begin(), st.end());
  last_mask_.assign(mask.begin(), mask.begin() + static_cast<ptrdiff_t>(n_words));
  last_valid_ = true;
  return true;
}

}  // namespace lumen::grammar
