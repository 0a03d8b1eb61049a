// HashIndex: the prefix cache's hash -> block map, with its memory fixed at creation.
//
// Open addressing with linear probing over a power-of-two table at least twice the number
// of blocks (each block has at most one entry, so the load stays <= 1/2); erase shifts the
// following entries back (no tombstones), so lookups stay short however long the cache
// runs. Inserting or erasing never allocates, unlike std::unordered_map's node per entry:
// caching a full block is on the per-token path.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "base/check.h"

namespace lumen::kv {

class HashIndex {
 public:
  explicit HashIndex(int32_t max_entries = 0) {
    size_t cap = 8;
    while (cap < 2 * static_cast<size_t>(max_entries)) cap *= 2;
    slots_.assign(cap, Slot{});
    mask_ = cap - 1;
    max_entries_ = max_entries;
  }

  int32_t size() const { return size_; }

  std::optional<int32_t> find(uint64_t key) const {
    for (size_t i = home(key);; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.value < 0) return std::nullopt;
      if (s.key == key) return s.value;
    }
  }
  bool contains(uint64_t key) const { return find(key).has_value(); }

  // Precondition: key is absent and size() < max_entries.
  void insert(uint64_t key, int32_t value) {
    LUMEN_CHECK(size_ < max_entries_ && value >= 0);
    size_t i = home(key);
    while (slots_[i].value >= 0) i = (i + 1) & mask_;
    slots_[i] = {key, value};
    ++size_;
  }

  // Erases key if it maps to value; returns whether it did.
  bool erase(uint64_t key, int32_t value) {
    size_t i = home(key);
    for (;; i = (i + 1) & mask_) {
      if (slots_[i].value < 0) return false;
      if (slots_[i].key == key && slots_[i].value == value) break;
    }
    // Backward shift: move later entries of the probe run into the hole when their home
    // position does not lie cyclically in (hole, j].
    size_t hole = i;
    for (size_t j = (i + 1) & mask_; slots_[j].value >= 0; j = (j + 1) & mask_) {
      const size_t h = home(slots_[j].key);
      const bool h_in_range = hole <= j ? (hole < h && h <= j) : (hole < h || h <= j);
      if (!h_in_range) {
        slots_[hole] = slots_[j];
        hole = j;
      }
    }
    slots_[hole] = Slot{};
    --size_;
    return true;
  }

  // Calls fn(key, value) for every entry.
  template <typename Fn>
  void for_each(Fn&& fn) const {
    for (const Slot& s : slots_)
      if (s.value >= 0) fn(s.key, s.value);
  }

 private:
  struct Slot {
    uint64_t key = 0;
    int32_t value = -1;  // -1: empty
  };
  // Keys are already strong 64-bit hashes: their low bits are the home slot.
  size_t home(uint64_t key) const { return static_cast<size_t>(key) & mask_; }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  int32_t size_ = 0;
  int32_t max_entries_ = 0;
};

}  // namespace lumen::kv
