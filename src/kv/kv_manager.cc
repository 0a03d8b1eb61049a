#include "kv/kv_manager.h"

#include <algorithm>
#include <array>
#include <utility>

#include "base/check.h"

namespace lumen::kv {
namespace {

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

std::string gib(int64_t bytes) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "%.2f GiB", static_cast<double>(bytes) / (1 << 30));
  return std::string(buf) + " (" + std::to_string(bytes) + " bytes)";
}

}  // namespace

Result<std::vector<KvGroupPlan>> plan_kv_memory(const KvManagerConfig& c) {
  if (c.groups.empty()) return error("kv cache: the model stores no K/V (no attention layers)");
  if (c.n_kv_head <= 0 || c.head_dim <= 0 || c.block_size <= 0 || c.n_ctx <= 0 || c.max_seqs <= 0 ||
      c.max_batch_tokens <= 0)
    return error("kv cache: every dimension must be positive");
  LUMEN_TRY(check_kv_dtypes(c.k_only ? KvDTypes{c.dtypes.k, c.dtypes.k} : c.dtypes, c.head_dim));  // K-only: V is K
  // Bytes of one token's K and V rows in one layer (the types' row sizes).
  const size_t token_bytes = row_bytes(c.dtypes.k, c.head_dim) + (c.k_only ? 0 : row_bytes(c.dtypes.v, c.head_dim));
  const int64_t bs = c.block_size;
  const int64_t blocks_ctx = ceil_div(c.n_ctx, bs);
  std::vector<KvGroupPlan> plan(c.groups.size());
  int64_t sliding_bytes = 0, full_block_bytes = 0;
  bool any_full = false;
  for (size_t g = 0; g < c.groups.size(); ++g) {
    const KvGroupSpec& spec = c.groups[g];
    if (spec.n_slots <= 0 || spec.window < 0) return error("kv cache: group " + std::to_string(g) + " is empty");
    KvGroupPlan& p = plan[g];
    p.block_bytes = size_t{1} * spec.n_slots * c.n_kv_head * token_bytes * c.block_size;
    if (spec.window == 0) {
      any_full = true;
      p.n_blocks_per_seq = static_cast<int32_t>(blocks_ctx);
      full_block_bytes += static_cast<int64_t>(p.block_bytes);
      continue;
    }
    // A chunk of n tokens at pos0 reads keys pos0 - window + 1 .. pos0 + n - 1: at most
    // window - 1 + n positions, spread over one block more than they fill when unaligned.
    const int64_t per_seq = std::min(ceil_div(spec.window - 1 + c.max_batch_tokens, bs) + 1, blocks_ctx);
    // Headroom for the prefix cache: one window per sequence again, so that released
    // blocks of a shared prefix (a system prompt) survive a while in the LRU.
    const int64_t headroom = c.enable_prefix_cache ? c.max_seqs * std::min(ceil_div(spec.window - 1, bs) + 1, blocks_ctx) : 0;
    p.n_blocks_per_seq = static_cast<int32_t>(per_seq);
    p.n_blocks = static_cast<int32_t>(std::min<int64_t>(c.max_seqs * per_seq + headroom, int64_t{1} << 30));
    sliding_bytes += p.n_blocks * static_cast<int64_t>(p.block_bytes);
  }
  const int64_t min_full_bytes = blocks_ctx * full_block_bytes;  // one full context
  if (c.memory_bytes > 0 && c.memory_bytes < sliding_bytes + min_full_bytes)
    return error("--kv-memory " + gib(c.memory_bytes) + " cannot hold " +
                 (any_full ? "one full context of " + std::to_string(c.n_ctx) + " tokens beside " : std::string()) +
                 "the sliding-window layers' blocks of " + std::to_string(c.max_seqs) +
                 " sequences; increase it to at least " + gib(sliding_bytes + min_full_bytes) +
                 " or lower -c / --max-seqs");
  if (any_full) {
    // Full groups share the rest block for block (each holds the same tokens).
    const int64_t n_blocks = c.memory_bytes > 0 ? (c.memory_bytes - sliding_bytes) / full_block_bytes
                                                : blocks_ctx * c.max_seqs;
    if (n_blocks > (int64_t{1} << 30)) return error("kv cache: too large (more than 2^30 blocks)");
    for (size_t g = 0; g < c.groups.size(); ++g)
      if (c.groups[g].window == 0) plan[g].n_blocks = static_cast<int32_t>(n_blocks);
  } else if (c.memory_bytes > 0) {
    // Every group is sliding: all of the memory, in proportion to what each needs.
    const double scale = static_cast<double>(c.memory_bytes) / static_cast<double>(sliding_bytes);
    for (KvGroupPlan& p : plan) p.n_blocks = static_cast<int32_t>(std::min(p.n_blocks * scale, double{1 << 30}));
  }
  return plan;
}

int64_t seq_blocks_at(const KvGroupSpec& group, int32_t block_size, int64_t n_tokens) {
  const int64_t n_blocks = ceil_div(n_tokens, block_size);
  if (group.window == 0 || n_tokens <= 0) return n_blocks;
  return n_blocks - std::max<int64_t>(0, n_tokens - group.window + 1) / block_size;
}

Result<KvManager> KvManager::create(const KvManagerConfig& config) {
  LUMEN_ASSIGN_OR_RETURN(std::vector<KvGroupPlan> plan, plan_kv_memory(config));
  KvManager m;
  m.config_ = config;
  m.max_blocks_per_seq_ = static_cast<int32_t>(ceil_div(config.n_ctx, config.block_size) + 1);
  m.groups_.resize(config.groups.size());
  for (size_t g = 0; g < config.groups.size(); ++g) {
    Group& grp = m.groups_[g];
    grp.spec = config.groups[g];
    grp.plan = plan[g];
    KvCacheConfig kc;
    kc.n_slots = grp.spec.n_slots;
    kc.n_kv_head = config.n_kv_head;
    kc.head_dim = config.head_dim;
    kc.block_size = config.block_size;
    kc.n_blocks = grp.plan.n_blocks;
    kc.dtypes = config.dtypes;
    kc.k_only = config.k_only;
    LUMEN_ASSIGN_OR_RETURN(grp.storage, KvStorage::allocate(kc));
    grp.pool = BlockPool(kc.n_blocks, kc.block_size);
    // Keep a few blocks in reserve when others are running, so that a new admission does
    // not immediately force a preemption on the next decode step.
    grp.watermark = std::max(1, kc.n_blocks / 100);
    m.views_.push_back(grp.storage.view());
  }
  m.chain_scratch_.resize(m.groups_.size());
  m.present_scratch_.resize(m.groups_.size());
  for (size_t g = 0; g < m.groups_.size(); ++g) {
    m.chain_scratch_[g].reserve(m.max_blocks_per_seq_);
    m.present_scratch_[g].reserve(m.max_blocks_per_seq_);
  }
  return m;
}

KvGroupUsage KvManager::usage(int32_t group) const {
  const Group& g = groups_[group];
  return {g.spec.window,      g.spec.n_slots,    g.pool.n_blocks(), g.pool.n_used(),
          g.pool.n_cached(), g.plan.block_bytes, config_.block_size};
}

size_t KvManager::bytes_per_token() const {
  size_t n = 0;
  for (const Group& g : groups_) n += g.plan.block_bytes / config_.block_size;
  return n;
}

size_t KvManager::total_bytes() const {
  size_t n = 0;
  for (const Group& g : groups_) n += g.plan.block_bytes * static_cast<size_t>(g.plan.n_blocks);
  return n;
}

int32_t KvManager::n_used_blocks() const {
  int32_t n = 0;
  for (const Group& g : groups_) n += g.pool.n_used();
  return n;
}

int32_t KvManager::n_blocks() const {
  int32_t n = 0;
  for (const Group& g : groups_) n += g.pool.n_blocks();
  return n;
}

void KvManager::init_seq(SeqKv& seq, uint64_t root_hash) const {
  LUMEN_DCHECK(seq.tables.empty() || seq.tables[0].n_blocks() == 0);
  seq.root_hash = root_hash;
  seq.cacheable = true;
  seq.tables.resize(groups_.size());
  seq.hashes.resize(groups_.size());
  for (size_t g = 0; g < groups_.size(); ++g) {
    seq.tables[g].reserve_entries(max_blocks_per_seq_);
    seq.hashes[g].reserve(max_blocks_per_seq_);
  }
}

void KvManager::fork(const SeqKv& parent, int64_t n_computed, SeqKv& child) {
  init_seq(child, parent.root_hash);
  const auto n_blocks = static_cast<size_t>(ceil_div(n_computed, config_.block_size));
  for (size_t g = 0; g < groups_.size(); ++g) {
    LUMEN_CHECK(child.tables[g].n_blocks() == 0);
    for (int32_t id : parent.tables[g].ids().first(std::min(n_blocks, parent.tables[g].ids().size()))) {
      if (id >= 0) groups_[g].pool.add_ref(id);
      child.tables[g].push_back(id);
    }
    child.hashes[g] = parent.hashes[g];
  }
  child.cacheable = parent.cacheable;
}

uint64_t KvManager::group_root(const SeqKv& seq, int32_t g) const {
  const std::array<int32_t, 2> ns = {g, groups_[g].spec.window};
  return block_hash(seq.root_hash, ns);
}

void KvManager::hash_chain(const SeqKv& seq, int32_t g, std::span<const int32_t> tokens, int32_t n_blocks,
                           std::vector<uint64_t>& out) const {
  const int32_t bs = config_.block_size;
  uint64_t parent = group_root(seq, g);
  out.clear();
  for (int32_t i = 0; i < n_blocks; ++i) {
    parent = block_hash(parent, tokens.subspan(static_cast<size_t>(i) * bs, bs));
    out.push_back(parent);
  }
}

int32_t KvManager::lookup_prefix(const SeqKv& seq, std::span<const int32_t> tokens) const {
  if (!config_.enable_prefix_cache || tokens.empty()) return 0;
  const int32_t bs = config_.block_size;
  // Whole blocks only, and never every token: the last token must be computed to give
  // the logits the next token is sampled from (and a cached block is never written).
  int32_t k = static_cast<int32_t>(std::min<int64_t>((static_cast<int64_t>(tokens.size()) - 1) / bs, max_blocks_per_seq_));
  if (k == 0) return 0;
  // present[g][i]: group g's prefix cache holds block i of this chain.
  std::vector<std::vector<char>>& present = present_scratch_;
  for (int32_t g = 0; g < n_groups(); ++g) {
    std::vector<uint64_t>& chain = chain_scratch_[g];
    hash_chain(seq, g, tokens, k, chain);
    present[g].assign(k, 0);
    const bool full = groups_[g].spec.window == 0;
    for (int32_t i = 0; i < k; ++i) {
      const uint64_t parent = i == 0 ? group_root(seq, g) : chain[i - 1];
      present[g][i] = groups_[g].pool.lookup(chain[i], parent, tokens.subspan(static_cast<size_t>(i) * bs, bs)).has_value();
      if (full && !present[g][i]) {
        k = i;  // a full group needs the whole prefix
        break;
      }
    }
  }
  // Each sliding group needs the blocks a query at k * bs can see; shrink k until all agree.
  for (; k > 0; --k) {
    bool ok = true;
    for (int32_t g = 0; g < n_groups() && ok; ++g) {
      const Group& grp = groups_[g];
      if (grp.spec.window == 0) continue;
      for (int64_t i = first_visible(grp.spec, int64_t{k} * bs) / bs; i < k && ok; ++i) ok = present[g][i];
    }
    if (ok) break;
  }
  return k;
}

int64_t KvManager::acquire_prefix(SeqKv& seq, std::span<const int32_t> tokens) {
  for (const BlockTable& t : seq.tables) LUMEN_CHECK(t.n_blocks() == 0);
  const int32_t k = lookup_prefix(seq, tokens);
  if (k == 0) return 0;
  const int32_t bs = config_.block_size;
  for (int32_t g = 0; g < n_groups(); ++g) {
    Group& grp = groups_[g];
    hash_chain(seq, g, tokens, k, seq.hashes[g]);
    const int64_t first = first_visible(grp.spec, int64_t{k} * bs) / bs;
    for (int32_t i = 0; i < k; ++i) {
      if (i < first) {
        seq.tables[g].push_back(-1);
        continue;
      }
      const uint64_t parent = i == 0 ? group_root(seq, g) : seq.hashes[g][i - 1];
      const std::optional<int32_t> hit = grp.pool.lookup(seq.hashes[g][i], parent, tokens.subspan(static_cast<size_t>(i) * bs, bs));
      LUMEN_CHECK(hit.has_value());  // lookup_prefix saw it
      grp.pool.acquire_cached(*hit);
      seq.tables[g].push_back(*hit);
    }
  }
  return int64_t{k} * bs;
}

int32_t KvManager::n_new_blocks(const Group& g, const BlockTable& t, int64_t end) const {
  return static_cast<int32_t>(std::max<int64_t>(0, ceil_div(end, config_.block_size) - t.n_blocks()));
}

bool KvManager::must_privatize(const Group& g, int32_t block_id) const {
  LUMEN_CHECK(block_id >= 0);  // a block being written is visible to its own query
  return g.pool.ref_cnt(block_id) > 1 || g.pool.is_cached(block_id);
}

int32_t KvManager::n_to_privatize(const Group& g, const BlockTable& t, int64_t n_computed, int64_t end) const {
  const int32_t bs = config_.block_size;
  const auto last = static_cast<int32_t>(std::min<int64_t>(t.n_blocks(), ceil_div(end, bs)));
  int32_t n = 0;
  for (auto i = static_cast<int32_t>(n_computed / bs); i < last; ++i) n += must_privatize(g, t.ids()[i]);
  return n;
}

bool KvManager::can_allocate(const SeqKv& seq, int64_t n_computed, int32_t n_new, int32_t n_lookahead,
                             bool keep_watermark) const {
  const int64_t end = n_computed + n_new + n_lookahead;
  for (int32_t g = 0; g < n_groups(); ++g) {
    const Group& grp = groups_[g];
    const int32_t need = n_new_blocks(grp, seq.tables[g], end) + n_to_privatize(grp, seq.tables[g], n_computed, end);
    if (need > grp.pool.n_free() - (keep_watermark ? grp.watermark : 0)) return false;
  }
  return true;
}

bool KvManager::allocate_slots(SeqKv& seq, int64_t n_computed, int32_t n_new, int32_t n_lookahead,
                               std::vector<BlockCopy>* copies) {
  if (!can_allocate(seq, n_computed, n_new, n_lookahead, false)) return false;
  const int32_t bs = config_.block_size;
  const int64_t end = n_computed + n_new + n_lookahead;
  for (int32_t g = 0; g < n_groups(); ++g) {
    Group& grp = groups_[g];
    BlockTable& t = seq.tables[g];
    // Blocks about to be written that others share (forked siblings) or the prefix cache
    // holds (after a truncate) become private: a copy if they hold computed positions.
    const auto last = static_cast<int32_t>(std::min<int64_t>(t.n_blocks(), ceil_div(end, bs)));
    for (auto i = static_cast<int32_t>(n_computed / bs); i < last; ++i) {
      const int32_t shared = t.ids()[i];
      if (!must_privatize(grp, shared)) continue;
      const std::optional<int32_t> own = grp.pool.allocate();
      LUMEN_CHECK(own.has_value());  // counted by can_allocate
      if (int64_t{i} * bs < n_computed) copies->push_back({g, shared, *own});
      t.replace(i, *own);
      grp.pool.release(shared);
    }
    const bool ok = t.reserve(grp.pool, end, bs);
    LUMEN_CHECK(ok);  // counted by can_allocate
  }
  return true;
}

void KvManager::release_out_of_window(SeqKv& seq, int64_t min_query_pos) {
  for (int32_t g = 0; g < n_groups(); ++g) {
    const Group& grp = groups_[g];
    if (grp.spec.window == 0) continue;
    const auto n_drop = static_cast<int32_t>(first_visible(grp.spec, min_query_pos) / config_.block_size);
    seq.tables[g].release_front(n_drop, groups_[g].pool);
  }
}

void KvManager::truncate(SeqKv& seq, int64_t n_tokens) {
  const int32_t bs = config_.block_size;
  for (int32_t g = 0; g < n_groups(); ++g) {
    Group& grp = groups_[g];
    BlockTable& t = seq.tables[g];
    LUMEN_CHECK_MSG(n_tokens == 0 || t.first_live() <= first_visible(grp.spec, n_tokens) / bs,
                    "truncate: a query at the new end would see released blocks");
    t.truncate(static_cast<int32_t>(ceil_div(n_tokens, bs)), grp.pool);
    if (static_cast<int64_t>(seq.hashes[g].size()) > n_tokens / bs) seq.hashes[g].resize(n_tokens / bs);
    if (n_tokens % bs != 0 && t.n_blocks() > 0) {
      const int32_t tail = t.ids()[t.n_blocks() - 1];
      // The tail will be written again: a cached copy only this sequence holds must leave
      // the index (a shared one is copied on write instead).
      if (tail >= 0 && grp.pool.is_cached(tail) && grp.pool.ref_cnt(tail) == 1) grp.pool.drop_from_cache(tail);
    }
  }
}

void KvManager::cache_full_blocks(SeqKv& seq, std::span<const int32_t> tokens, int64_t n_computed) {
  if (!config_.enable_prefix_cache || !seq.cacheable) return;
  const int32_t bs = config_.block_size;
  const int64_t n_full = std::min<int64_t>(n_computed, static_cast<int64_t>(tokens.size())) / bs;
  for (int32_t g = 0; g < n_groups(); ++g) {
    std::vector<uint64_t>& h = seq.hashes[g];
    const BlockTable& t = seq.tables[g];
    while (static_cast<int64_t>(h.size()) < n_full) {
      const size_t i = h.size();
      const uint64_t parent = i == 0 ? group_root(seq, g) : h[i - 1];
      std::span<const int32_t> toks = tokens.subspan(i * bs, bs);
      const uint64_t hash = block_hash(parent, toks);
      const int32_t id = static_cast<int32_t>(i) < t.n_blocks() ? t.ids()[i] : -1;
      if (id >= 0) groups_[g].pool.cache_full_block(id, hash, parent, toks);
      h.push_back(hash);
    }
  }
}

void KvManager::release_all(SeqKv& seq) {
  for (size_t g = 0; g < seq.tables.size(); ++g) {
    seq.tables[g].release_all(groups_[g].pool);
    seq.hashes[g].clear();
  }
  seq.cacheable = true;
}

bool KvManager::begin_move(SeqKv& seq, int64_t n_keep, int64_t n_end, KvMove* move) {
  const int32_t bs = config_.block_size;
  const auto first = static_cast<int32_t>(n_keep / bs);
  const auto end = static_cast<int32_t>(ceil_div(n_end, bs));
  for (int32_t g = 0; g < n_groups(); ++g) {
    const Group& grp = groups_[g];
    const BlockTable& t = seq.tables[g];
    LUMEN_CHECK(grp.spec.window == 0 && t.n_blocks() >= end);
    int32_t n_shared = 0;
    for (int32_t i = first; i < end; ++i) n_shared += grp.pool.ref_cnt(t.ids()[i]) > 1;
    if (n_shared > grp.pool.n_free()) return false;
  }
  move->first_block = first;
  move->old_tables.resize(groups_.size());
  move->replaced.resize(groups_.size());
  for (int32_t g = 0; g < n_groups(); ++g) {
    Group& grp = groups_[g];
    BlockTable& t = seq.tables[g];
    move->old_tables[g].assign(t.ids().begin(), t.ids().end());
    move->replaced[g].clear();
    for (int32_t i = first; i < end; ++i) {
      const int32_t id = t.ids()[i];
      if (grp.pool.ref_cnt(id) > 1) {
        const std::optional<int32_t> own = grp.pool.allocate();
        LUMEN_CHECK(own.has_value());  // counted above
        t.replace(i, *own);
        move->replaced[g].push_back(id);  // the table's reference, dropped in end_move
      } else if (grp.pool.is_cached(id)) {
        grp.pool.drop_from_cache(id);
      }
    }
    if (static_cast<int32_t>(seq.hashes[g].size()) > first) seq.hashes[g].resize(first);
  }
  seq.cacheable = false;
  return true;
}

void KvManager::end_move(SeqKv& seq, int64_t n_end, KvMove* move) {
  const auto end = static_cast<int32_t>(ceil_div(n_end, config_.block_size));
  for (int32_t g = 0; g < static_cast<int32_t>(move->replaced.size()); ++g) {
    for (const int32_t id : move->replaced[g]) groups_[g].pool.release(id);
    move->replaced[g].clear();
    move->old_tables[g].clear();
    seq.tables[g].truncate(end, groups_[g].pool);
  }
}

void KvManager::copy_blocks(std::span<const BlockCopy> copies) {
  for (const BlockCopy& c : copies) groups_[c.group].storage.copy_block(c.src_block, c.dst_block);
}

size_t KvManager::bytes_held(const SeqKv& seq) const {
  size_t n = 0;
  for (size_t g = 0; g < seq.tables.size(); ++g) n += seq.tables[g].n_live() * groups_[g].plan.block_bytes;
  return n;
}

std::string KvManager::check_invariants() const {
  for (int32_t g = 0; g < n_groups(); ++g) {
    std::string s = groups_[g].pool.check_invariants();
    if (!s.empty()) return "group " + std::to_string(g) + ": " + s;
  }
  return "";
}

std::string KvManager::check_seq(const SeqKv& seq, int64_t n_computed) const {
  if (static_cast<int32_t>(seq.tables.size()) != n_groups()) return "sequence has no table per group";
  const int32_t bs = config_.block_size;
  for (int32_t g = 0; g < n_groups(); ++g) {
    const Group& grp = groups_[g];
    const BlockTable& t = seq.tables[g];
    const std::string where = "group " + std::to_string(g) + ": ";
    for (int32_t i = 0; i < t.n_blocks(); ++i) {
      const int32_t id = t.ids()[i];
      if ((id < 0) != (i < t.first_live())) return where + "released entries do not lead the table";
      if (id >= grp.pool.n_blocks()) return where + "block id out of range";
      if (id >= 0 && grp.pool.ref_cnt(id) < 1) return where + "holds unreferenced block " + std::to_string(id);
    }
    if (t.capacity_tokens(bs) < n_computed) return where + "table does not cover the computed tokens";
    // Every position a query at n_computed (or later) can see must be live.
    const int64_t first = first_visible(grp.spec, n_computed);
    if (first < n_computed && t.first_live() > first / bs)
      return where + "position " + std::to_string(first) + " is still visible but its block was released";
    if (static_cast<int64_t>(seq.hashes[g].size()) > n_computed / bs) return where + "hash chain longer than the full blocks";
  }
  return "";
}

}  // namespace lumen::kv
