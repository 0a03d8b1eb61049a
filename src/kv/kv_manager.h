// KvManager: the KV cache between the scheduler and the block pools, by layer group.
//
// A model's layers that store K/V are partitioned into groups by attention window
// (model/kv_layout.h): the full-attention layers form one group, the sliding layers of each
// window another. Each group has its own BlockPool and its own storage region, and a block
// of a group holds the K/V of all the group's layers for block_size tokens. A sequence has
// one block table per group:
//
//   seq 7, 40 tokens computed, block 16      full group:      [b3][b9][b12]
//                                            sliding w=16:    [--][b21][b30]
//
// The sliding group released block 0: the next query (position 40) sees keys 25..40 only,
// and a block goes as soon as every position in it is < min_query_pos - window + 1
// (release_out_of_window). So a sliding group holds at most
// ceil((window - 1 + chunk) / block_size) + 1 blocks per sequence, however long it runs.
//
// Every operation on a sequence is all-or-nothing over the groups. Blocks a sequence
// releases go to the free list, or to the evictable LRU if the prefix cache holds them.
//
// Prefix cache, per group: group g's key of block i is the hash chain
//   h_0 = hash(root (model id + cache_salt), g, window),  h_i+1 = hash(h_i, tokens of block i)
// so groups never answer for each other. A hit of k blocks needs every full group's blocks
// 0..k-1 and each sliding group's blocks that a query at position >= k * block_size can
// still see (those holding positions k*B - window + 1 .. k*B - 1); k shrinks until all
// groups agree (lookup_prefix).
//
// Copy-on-write: a sequence about to write into a block it shares (forked n>1 siblings
// share their prompt's partial last block) or that the prefix cache holds (only after a
// truncate) gets a private block first, a copy when the block holds computed positions;
// allocate_slots lists the copies for the model runner (copy_blocks) to perform before the
// forward pass.
//
// Single-threaded by contract (the engine thread).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "base/status.h"
#include "kv/block_pool.h"
#include "kv/kv_cache.h"
#include "tensor/paged_kv_view.h"

namespace lumen::kv {

struct KvGroupSpec {
  int32_t n_slots = 0;  // layers stored in the group
  int32_t window = 0;   // 0: full attention; w > 0: query q sees keys q - w < k <= q
};

struct KvManagerConfig {
  std::vector<KvGroupSpec> groups;  // full group(s) first, then sliding groups
  int32_t n_kv_head = 0;
  int32_t head_dim = 0;
  int32_t block_size = 16;
  KvDTypes dtypes = {};          // K and V element types (kv_cache.h)
  bool k_only = false;           // one row per token and layer, no V (model/kv_layout.h)
  int32_t n_ctx = 0;             // longest sequence
  int32_t max_seqs = 1;          // sequences running at once
  int32_t max_batch_tokens = 0;  // tokens per step at most (largest chunk of one sequence)
  // Memory of all groups together; 0: enough for max_seqs full contexts.
  int64_t memory_bytes = 0;
  bool enable_prefix_cache = true;
};

// The groups and row shape of a KvManagerConfig from a model's KV layout: any type that
// lists `groups` (each with `window` and its `layers`), `n_kv_head` / `head_dim` and `k_only` —
// model::KvLayout is the one (a template, so that kv and model need not know each other).
// The caller sets the rest (block size, dtype, context, memory, prefix cache).
template <class Layout>
KvManagerConfig kv_config_for_layout(const Layout& layout) {
  KvManagerConfig c;
  for (const auto& g : layout.groups) c.groups.push_back({static_cast<int32_t>(g.layers.size()), g.window});
  c.n_kv_head = layout.n_kv_head;
  c.head_dim = layout.head_dim;
  c.k_only = layout.k_only;
  return c;
}

// How the memory is split: blocks per group (plan_kv_memory).
struct KvGroupPlan {
  int32_t n_blocks = 0;
  size_t block_bytes = 0;       // K and V of all the group's slots for block_size tokens
  int32_t n_blocks_per_seq = 0; // most one sequence can ever hold (window + chunk, or context)
};

// Sliding groups get what max_seqs running sequences can ever hold, ceil((window - 1 +
// max_batch_tokens) / block_size) + 1 blocks each (capped at a full context), plus as much
// again of headroom for the prefix cache (one window per sequence) when it is on. Full
// groups get the rest of memory_bytes (at least one full context); when every group is
// sliding, the rest is spread over them in proportion to their sizes. Errors name the
// remedy (the smallest memory that would do).
Result<std::vector<KvGroupPlan>> plan_kv_memory(const KvManagerConfig& config);

// Blocks one sequence of n_tokens computed tokens holds in a group while it decodes: every
// block for full attention, the blocks holding what the next query (at n_tokens) can see for
// a sliding window. What `lumen info` and the tests count KV bytes per sequence with.
int64_t seq_blocks_at(const KvGroupSpec& group, int32_t block_size, int64_t n_tokens);

struct BlockCopy {
  int32_t group = 0;
  int32_t src_block = 0;
  int32_t dst_block = 0;
};

// One sequence's place in the cache: a block table and a prefix hash chain per group.
// Owned by the sequence, changed only through the KvManager. Move-only in spirit (block
// references are not copied with it: use KvManager::fork).
struct SeqKv {
  uint64_t root_hash = 0;                      // prefix-cache namespace (model id + cache_salt)
  std::vector<BlockTable> tables;              // [n_groups]; -1 = released (sliding groups)
  std::vector<std::vector<uint64_t>> hashes;   // [n_groups][n full blocks cached so far]
  // false after its rows were moved (begin_move): the K/V of its blocks from the move on are
  // not what a fresh run over its tokens computes, so they never enter the prefix cache.
  // Back to true when it releases everything (a preempted sequence recomputes).
  bool cacheable = true;
};

// A move in progress (KvManager::begin_move): the tables before it (what the rows are read
// from), and the blocks it replaced, still referenced until end_move.
struct KvMove {
  int32_t first_block = 0;                       // the block holding n_keep
  std::vector<std::vector<int32_t>> old_tables;  // [n_groups] block ids before the move
  std::vector<std::vector<int32_t>> replaced;    // [n_groups] shared blocks given private copies
};

// Per-group usage for /metrics and logs.
struct KvGroupUsage {
  int32_t window = 0;
  int32_t n_slots = 0;
  int32_t n_blocks = 0;
  int32_t n_used = 0;     // referenced by sequences
  int32_t n_cached = 0;   // in the prefix index (referenced or evictable)
  size_t block_bytes = 0;  // K and V of all the group's layers for block_size tokens
  int32_t block_size = 0;
};

class KvManager {
 public:
  KvManager() = default;
  static Result<KvManager> create(const KvManagerConfig& config);

  const KvManagerConfig& config() const { return config_; }
  int32_t n_groups() const { return static_cast<int32_t>(groups_.size()); }
  int32_t block_size() const { return config_.block_size; }
  // [n_groups] storage views for Model::forward.
  std::span<const KvStorageView> views() const { return views_; }
  KvGroupUsage usage(int32_t group) const;
  const BlockPool& pool(int32_t group) const { return groups_[group].pool; }
  // Bytes of one token's K and V over every group (what a full-context token costs).
  size_t bytes_per_token() const;
  size_t total_bytes() const;
  // Blocks referenced by sequences / in all pools, summed over groups.
  int32_t n_used_blocks() const;
  int32_t n_blocks() const;

  // An empty sequence under `root_hash` (tables reserved for a full context: growing
  // them later does not allocate).
  void init_seq(SeqKv& seq, uint64_t root_hash) const;
  // `child` shares the blocks holding `parent`'s first n_computed positions (one reference
  // more each) and its hash chain. Precondition: child holds no blocks.
  void fork(const SeqKv& parent, int64_t n_computed, SeqKv& child);

  // Prefix lookup for `tokens` (at most (tokens.size() - 1) / block_size blocks: the last
  // token is always computed). Returns the number of whole blocks every group can serve.
  int32_t lookup_prefix(const SeqKv& seq, std::span<const int32_t> tokens) const;
  // Looks up and takes references on the hit's blocks (a sliding group only those still
  // visible; the rest are -1). Returns the tokens covered (a multiple of block_size).
  // Precondition: seq holds no blocks.
  int64_t acquire_prefix(SeqKv& seq, std::span<const int32_t> tokens);

  // Whether n_new + n_lookahead slots after n_computed fit in every group; with
  // keep_watermark, a reserve of ~1% of each group's blocks must stay free.
  bool can_allocate(const SeqKv& seq, int64_t n_computed, int32_t n_new, int32_t n_lookahead,
                    bool keep_watermark) const;
  // Makes slots n_computed .. n_computed + n_new + n_lookahead - 1 writable in every group:
  // a block in that range that is shared or cached is replaced by a private one (copied if
  // it holds computed positions: listed in *copies), then new blocks are appended.
  // All or nothing: false leaves the sequence and the pools as they were.
  bool allocate_slots(SeqKv& seq, int64_t n_computed, int32_t n_new, int32_t n_lookahead,
                      std::vector<BlockCopy>* copies);
  // Sliding groups drop the blocks whose every position is < min_query_pos - window + 1:
  // no query at min_query_pos or later can see them.
  void release_out_of_window(SeqKv& seq, int64_t min_query_pos);
  // Keeps the first n_tokens positions: frees the blocks beyond and shortens the hash
  // chains (speculative rollback). A cached partial tail block this sequence alone holds
  // leaves the prefix index (it will be written again).
  // Precondition: what a query at n_tokens can see was not released (callers release
  // windows only up to the position they may roll back to).
  void truncate(SeqKv& seq, int64_t n_tokens);
  // Registers the sequence's full blocks among its first n_computed tokens in the prefix
  // cache of every group (no-op when the prefix cache is off).
  void cache_full_blocks(SeqKv& seq, std::span<const int32_t> tokens, int64_t n_computed);
  // Returns every block of the sequence.
  void release_all(SeqKv& seq);
  // Context shift by moving rows (engine/context_shift.h): rows will be copied from
  // positions >= n_keep to lower ones, ending at n_end, reading through move->old_tables
  // and writing through the sequence's tables. The blocks to be written (those holding
  // n_keep .. n_end - 1) must be private: one that another sequence shares gets a fresh
  // block (the kept rows of the block holding n_keep are then copied too), one only the
  // prefix cache also holds leaves the index and is written in place (ascending copies to
  // lower positions never overwrite a row before it is read). The sequence stops being
  // cacheable. end_move ends the table at n_end and drops the replaced blocks. false
  // (nothing changed): the pools lack the private blocks. Precondition: only full-attention
  // groups.
  bool begin_move(SeqKv& seq, int64_t n_keep, int64_t n_end, KvMove* move);
  void end_move(SeqKv& seq, int64_t n_end, KvMove* move);
  // Performs copy-on-write copies (before the forward pass that writes the copies).
  void copy_blocks(std::span<const BlockCopy> copies);

  // Bytes of the blocks the sequence holds (shared blocks count for every holder).
  size_t bytes_held(const SeqKv& seq) const;

  // Every pool's invariants; "" if fine.
  std::string check_invariants() const;
  // The sequence's tables against the pools, and that every position a query at
  // n_computed or later can see (all of [0, n_computed) for a full group, the last
  // window - 1 positions for a sliding one) is backed by a live block; "" if fine.
  std::string check_seq(const SeqKv& seq, int64_t n_computed) const;

 private:
  struct Group {
    KvGroupSpec spec;
    KvGroupPlan plan;
    BlockPool pool{0, 1};
    KvStorage storage;
    int32_t watermark = 1;
  };
  // First position a query at q can see in a group (0 for full attention).
  static int64_t first_visible(const KvGroupSpec& g, int64_t q) {
    return g.window == 0 ? 0 : q - g.window + 1 > 0 ? q - g.window + 1 : 0;
  }
  // Blocks group g needs beyond the table to write up to `end`.
  int32_t n_new_blocks(const Group& g, const BlockTable& t, int64_t end) const;
  // A block that others share or the prefix cache holds: not to be written in place.
  bool must_privatize(const Group& g, int32_t block_id) const;
  // Such blocks among those that will receive positions n_computed .. end - 1.
  int32_t n_to_privatize(const Group& g, const BlockTable& t, int64_t n_computed, int64_t end) const;
  // Root of group g's prefix key chain: the sequence's namespace, the group and its window.
  uint64_t group_root(const SeqKv& seq, int32_t g) const;
  // Group g's prefix key chain for `tokens`' first n_blocks blocks.
  void hash_chain(const SeqKv& seq, int32_t g, std::span<const int32_t> tokens, int32_t n_blocks,
                  std::vector<uint64_t>& out) const;

  KvManagerConfig config_;
  std::vector<Group> groups_;
  std::vector<KvStorageView> views_;
  int32_t max_blocks_per_seq_ = 0;  // table capacity (a full context + 1)
  // lookup_prefix's work space, sized at creation (admission allocates nothing).
  mutable std::vector<std::vector<uint64_t>> chain_scratch_;  // [n_groups][max_blocks_per_seq_]
  mutable std::vector<std::vector<char>> present_scratch_;    // [n_groups][max_blocks_per_seq_]
};

}  // namespace lumen::kv
