#include "grammar/stack.h"

#include <algorithm>

#include "base/check.h"

namespace lumen::grammar {
namespace {

uint64_t mix(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  return h ^ (h >> 33);
}

uint64_t key_hash(int32_t pos, int32_t parent, int32_t count) {
  return mix((static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 32 | static_cast<uint32_t>(parent)) ^
             (static_cast<uint64_t>(static_cast<uint32_t>(count)) * 0x9e3779b97f4a7c15ull));
}

}  // namespace

StackArena::StackArena(size_t reserve) {
  nodes_.reserve(reserve);
  size_t cap = 16;
  while (cap < reserve * 2) cap <<= 1;
  rehash(cap);
}

void StackArena::rehash(size_t capacity) {
  table_.assign(capacity, 0);
  mask_ = capacity - 1;
  for (size_t id = 0; id < nodes_.size(); ++id) {
    const StackNode& n = nodes_[id];
    for (size_t i = key_hash(n.pos, n.parent, n.count) & mask_;; i = (i + 1) & mask_) {
      if (table_[i] == 0) {
        table_[i] = static_cast<int32_t>(id + 1);
        break;
      }
    }
  }
}

int32_t StackArena::intern(int32_t pos, int32_t parent, int32_t count) {
  for (size_t i = key_hash(pos, parent, count) & mask_;; i = (i + 1) & mask_) {
    const int32_t slot = table_[i];
    if (slot == 0) {
      const auto id = static_cast<int32_t>(nodes_.size());
      nodes_.push_back(StackNode{pos, parent, count});
      table_[i] = id + 1;
      if (nodes_.size() * 2 > table_.size()) rehash(table_.size() * 2);
      return id;
    }
    const StackNode& n = nodes_[static_cast<size_t>(slot - 1)];
    if (n.pos == pos && n.parent == parent && n.count == count) return slot - 1;
  }
}

void StackArena::clear() {
  nodes_.clear();
  std::fill(table_.begin(), table_.end(), 0);
}

Expander::Expander(const Pda& pda, StackArena* arena, ExpandLimits limits)
    : pda_(&pda), arena_(arena), limits_(limits), seen_(1024, Seen{0, 0, 0, 0}) {
  work_.reserve(256);
}

bool Expander::first_visit(int32_t pos, int32_t parent, int32_t tag) {
  if (static_cast<size_t>(n_seen_ + 1) * 2 > seen_.size()) {
    std::vector<Seen> old = std::move(seen_);
    seen_.assign(old.size() * 2, Seen{0, 0, 0, 0});
    n_seen_ = 0;
    for (const Seen& s : old)
      if (s.stamp == stamp_) first_visit(s.pos, s.parent, s.tag);
  }
  const size_t mask = seen_.size() - 1;
  for (size_t i = key_hash(pos, parent, tag) & mask;; i = (i + 1) & mask) {
    Seen& s = seen_[i];
    if (s.stamp != stamp_) {
      s = Seen{pos, parent, tag, stamp_};
      ++n_seen_;
      return true;
    }
    if (s.pos == pos && s.parent == parent && s.tag == tag) return false;
  }
}

void Expander::push(int32_t pos, int32_t parent, int32_t tag) { work_.push_back(Work{pos, parent, tag}); }

void Expander::enter_body(int32_t rule, int32_t frame, int32_t tag) {
  for (int32_t a = pda_->alt_begin(rule); a < pda_->alt_end(rule); ++a) push(pda_->alt_start(a), frame, tag);
}

// Completing the element run above `parent`: continue wherever the parent says.
void Expander::pop_to(int32_t parent, int32_t tag) {
  for (;;) {
    if (parent == kBottom) {
      ev_->accept = true;
      ev_->accept_tags.push_back(tag);
      return;
    }
    if (parent == kBoundary) {
      ev_->boundary = true;
      ev_->boundary_tags.push_back(tag);
      return;
    }
    const StackNode n = (*arena_)[parent];
    if (n.count == kPlain) {
      push(n.pos, n.parent, tag);
      return;
    }
    if (n.count >= kExitBase) {  // the symbolic frame was left: pass through, remember j
      tag = n.count - kExitBase;
      parent = n.parent;
      continue;
    }
    const Elem& rep = pda_->elem(n.pos);
    if (n.count >= kSymBase) {  // one more iteration of the unknown-count frame
      const int32_t j = n.count - kSymBase + 1;
      if (j > kMaxSymbolic) {
        ev_->overflow = true;
        return;
      }
      if (rep.max < 0 || j < rep.max) enter_body(rep.arg, arena_->intern(n.pos, n.parent, kSymBase + j), tag);
      if (rep.max < 0 || j <= rep.max) push(n.pos + 1, arena_->intern(n.pos, n.parent, kExitBase + j), tag);
      return;
    }
    const int32_t c = n.count + 1;  // iterations complete now
    if (rep.max < 0 || c < rep.max) {
      const int32_t saturated = rep.max < 0 ? std::min(c, rep.min) : c;
      enter_body(rep.arg, arena_->intern(n.pos, n.parent, saturated), tag);
    }
    if (c >= rep.min) push(n.pos + 1, n.parent, tag);
    return;
  }
}

Status Expander::run(std::vector<int32_t>* tops, ExpandEvents* ev) {
  ev_ = ev;
  while (!work_.empty()) {
    const Work w = work_.back();
    work_.pop_back();
    if (!first_visit(w.pos, w.parent, w.tag)) continue;
    if (++n_work_done_ > limits_.max_work) {
      work_.clear();
      return error("grammar: too ambiguous (more than " + std::to_string(limits_.max_work) +
                   " expansion steps for one byte)");
    }
    const Elem& e = pda_->elem(w.pos);
    switch (e.kind) {
      case ElemKind::kBytes:
        tops->push_back(arena_->intern(w.pos, w.parent, w.tag >= 0 ? kTopTagBase + w.tag : kPlain));
        break;
      case ElemKind::kEnd:
        pop_to(w.parent, w.tag);
        break;
      case ElemKind::kRule: {
        const int32_t ret = w.pos + 1;
        const int32_t frame =
            pda_->elem(ret).kind == ElemKind::kEnd ? w.parent : arena_->intern(ret, w.parent, kPlain);
        enter_body(e.arg, frame, w.tag);
        break;
      }
      case ElemKind::kRepeat:
        if (e.max != 0) enter_body(e.arg, arena_->intern(w.pos, w.parent, 0), w.tag);
        if (e.min == 0) push(w.pos + 1, w.parent, w.tag);
        break;
    }
  }
  if (static_cast<int32_t>(tops->size()) > limits_.max_tops)
    return error("grammar: too ambiguous (more than " + std::to_string(limits_.max_tops) + " parses at once)");
  return Status();
}

Status Expander::expand(int32_t pos, int32_t parent, std::vector<int32_t>* tops, ExpandEvents* ev) {
  ++stamp_;
  n_seen_ = 0;
  n_work_done_ = 0;
  work_.clear();
  push(pos, parent, -1);
  Status st = run(tops, ev);
  std::sort(tops->begin(), tops->end());
  tops->erase(std::unique(tops->begin(), tops->end()), tops->end());
  return st;
}

Status Expander::resume(int32_t parent, std::vector<int32_t>* tops, ExpandEvents* ev) {
  ++stamp_;
  n_seen_ = 0;
  n_work_done_ = 0;
  work_.clear();
  ev_ = ev;
  pop_to(parent, -1);
  Status st = run(tops, ev);
  std::sort(tops->begin(), tops->end());
  tops->erase(std::unique(tops->begin(), tops->end()), tops->end());
  return st;
}

Status Expander::initial(std::vector<int32_t>* tops, ExpandEvents* ev) {
  ++stamp_;
  n_seen_ = 0;
  n_work_done_ = 0;
  work_.clear();
  enter_body(pda_->root(), kBottom, -1);
  Status st = run(tops, ev);
  std::sort(tops->begin(), tops->end());
  tops->erase(std::unique(tops->begin(), tops->end()), tops->end());
  return st;
}

Status Expander::advance(std::span<const int32_t> tops, uint8_t b, std::vector<int32_t>* out, ExpandEvents* ev) {
  ++stamp_;
  n_seen_ = 0;
  n_work_done_ = 0;
  work_.clear();
  for (const int32_t t : tops) {
    if (t < 0) continue;  // kAcceptTop consumes nothing
    const StackNode n = (*arena_)[t];
    if (pda_->byte_set(pda_->elem(n.pos).arg).has(b))
      push(n.pos + 1, n.parent, n.count >= kTopTagBase ? n.count - kTopTagBase : -1);
  }
  Status st = run(out, ev);
  std::sort(out->begin(), out->end());
  out->erase(std::unique(out->begin(), out->end()), out->end());
  return st;
}

}  // namespace lumen::grammar
