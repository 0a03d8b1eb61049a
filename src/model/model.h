// Model: hyper-parameters + bound weights + the forward pass over a batch of tokens from
// one or more sequences. The model never sees the engine or the KV cache manager: it says
// what it needs from the cache (kv_layout(): its KV groups) and gets plain data back (token
// ids, positions, per-sequence block tables of each group) and one KvStorageView per group.
//
// Single-threaded by contract (one forward at a time); compute parallelism goes through
// the ThreadPool passed to forward().
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string_view>
#include <vector>

#include "base/huge_buffer.h"
#include "base/mapped_file.h"
#include "base/progress.h"
#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/model_file.h"
#include "kernels/ops.h"
#include "model/hparams.h"
#include "model/kv_layout.h"
#include "model/layer_spec.h"
#include "model/weights.h"
#include "tensor/paged_kv_view.h"

namespace lumen::model {

struct Workspace;  // blocks.h

// One sequence's slice of a batch: tokens [token_begin, token_begin + n_tokens) of the
// batch, at positions pos0 .. pos0 + n_tokens - 1. Each of its block tables must already
// cover pos0 + n_tokens positions; K/V for positions < pos0 are already in the cache.
struct ForwardSeq {
  int32_t token_begin = 0;
  int32_t n_tokens = 0;
  int64_t pos0 = 0;
  // [n_groups] one block table per KV group (kv_layout()); a sliding group's table has -1
  // for blocks it released (outside the window of every query of this and later steps).
  std::span<const std::span<const int32_t>> block_tables;
};

struct ForwardBatch {
  std::span<const int32_t> token_ids;   // [n_tokens], all sequences concatenated
  std::span<const ForwardSeq> seqs;     // ordered, non-overlapping, covering token_ids
  std::span<const int32_t> logit_rows;  // batch token indices whose logits are wanted
  // Batch token indices whose final hidden states (after the output norm, before the
  // output matrix: what embeddings are pooled from) are wanted; Model::embeddings().
  std::span<const int32_t> embd_rows = {};
};

// Sizes the work buffers once, at load: nothing allocates on the per-token path.
struct ModelLimits {
  int32_t max_batch_tokens = 512;  // tokens per forward()
  int32_t max_logit_rows = 512;    // logits rows per forward()
  int32_t max_ctx = 4096;          // longest sequence (attention scratch)
  int n_threads = 1;               // most threads forward() may be given (per-thread scratch)
  int32_t max_embd_rows = 0;       // hidden-state rows per forward() (ForwardBatch::embd_rows)
  // Attention by kernels::flash_attention (an online softmax, llama.cpp's -fa numerics)
  // instead of ggml's non-flash numerics; needed for KV types other than f16 / f32.
  bool flash_attn = false;
  // Rotate q and k of every head by kernels::hadamard_rotate after RoPE, so the cache holds
  // rotated keys (q k^T is unchanged; a quantized K cache loses less). The cached keys can
  // then not be re-RoPEd: can_move_kv() is false.
  bool rotate_qk = false;
  // The weights of an mmapped file are always advised onto 2 MiB pages (MADV_HUGEPAGE);
  // the kernel maps them so where the page cache holds the file in 2 MiB folios, which it
  // does when the file was first read through such a mapping. A file already cached in
  // small folios (just written or downloaded) stays on 4 KiB pages. With this set, load
  // then drops that file's clean page cache and reads it again: one cold read, after which
  // every load of it is warm and on 2 MiB pages (decode streams the weights ~25% faster).
  bool refresh_page_cache_for_huge_pages = false;
  // Multi-head latent attention (deepseek2): a sequence's step of at least this many tokens
  // runs in the expanded form (per-head keys and values made from the cached latents), a
  // smaller one in the absorbed form (mla_block.cc). 0: the measured default
  // (kMlaExpandTokens); < 0: never (always absorbed). Both forms give the same attention up
  // to rounding, and each alone is batch invariant; a mix is not (a token's bits then
  // depend on the size of the step it came in).
  int32_t mla_expand_tokens = 0;
};

// Named debug taps: called with intermediate activations when set (tests, debugging,
// calibration). Every matrix multiplication's input is tapped ([n_rows][n_in], the layer's
// index), which is what lumen imatrix collects from:
//   attn_norm  -> attn_q, attn_k, attn_v     attn_out -> attn_output
//   ffn_norm   -> ffn_gate, ffn_up           ffn_act  -> ffn_down
// and in a mixture-of-experts layer (moe_block.cc):
//   ffn_norm   -> ffn_gate_inp (router), ffn_gate_shexp, ffn_up_shexp, ffn_gate_inp_shexp
//   ffn_act_shexp -> ffn_down_shexp
//   ffn_moe_in  (one tap per expert with rows) -> that expert of ffn_gate_exps, ffn_up_exps
//   ffn_moe_act (one tap per expert with rows) -> that expert of ffn_down_exps
//   ffn_moe_logits: once per layer and pass, whether or not an expert got rows
// and in a multi-head latent attention layer (mla_block.cc):
//   attn_norm  -> attn_q_a, attn_kv_a_mqa (or attn_q)
//   attn_q_a_norm -> attn_q_b                attn_kv_a_norm -> attn_kv_b (the normed latents)
// expert_idx is the expert of a per-expert tap, -1 for every other tap.
using TapFn = std::function<void(std::string_view name, int32_t layer_idx, int32_t expert_idx,
                                 std::span<const float> values)>;

class Model {
 public:
  Model(Model&&) noexcept;
  Model& operator=(Model&&) noexcept;
  ~Model();

  // Takes ownership of the file (the weights are views into it).
  static Result<Model> load(gguf::ModelFile file, const ModelLimits& limits);

  const HParams& hparams() const { return hp_; }
  const std::vector<LayerSpec>& layer_specs() const { return specs_; }  // [n_layer]
  const ModelWeights& weights() const { return weights_; }
  const gguf::ModelFile& file() const { return *file_; }
  const ModelLimits& limits() const { return limits_; }
  // The KV groups this model's layers store into; forward() takes one view per group.
  const KvLayout& kv_layout() const { return kv_layout_; }

  // Gives the matrices copies in the interleaved layout of k's kernels (weights.h,
  // InterleavePlan); forward() with the same table then reads only the copies. With a
  // cache_dir the copies come from a cache file there (interleaved_cache.h: mmapped, built
  // on first use); without one, or when the cache cannot be used (reason in the report),
  // they are packed into memory. The GGUF pages the copies were made from are unmapped
  // from this process (they stay in the page cache).
  struct InterleaveReport {
    size_t n_bytes = 0;            // bytes of the copies (0: k has no interleaved kernels)
    std::string cache_path;        // the cache file used, or empty (copies in memory)
    bool cache_built = false;      // the cache file was written by this call
    std::string cache_error;       // why the cache was not used, if it was asked for
    double cache_huge_fraction = 0;  // of the cache file mapped on 2 MiB pages
    bool cache_copied_to_memory = false;  // read into anonymous huge pages: under half was on
                                          // them, or the mapping read slow (the probe below)
    double cache_read_gbps = 0;   // the load's probe of the mapped cache (0: not probed)...
    double memory_read_gbps = 0;  // ...and of the same bytes in anonymous memory
  };
  // With ModelLimits::refresh_page_cache_for_huge_pages: the fraction of the GGUF weights'
  // whole 2 MiB pages that load left mapped on 2 MiB pages; -1 when not refreshed (or
  // nothing to refresh: not GGUF, weights under one 2 MiB page).
  double weights_huge_fraction() const { return weights_huge_fraction_; }

  // progress (may be null): told when copies are packed (`what`: the cache file being
  // written, or "" for memory), in bytes.
  InterleaveReport interleave_weights(const kernels::KernelTable& k, ThreadPool& pool,
                                      const std::string& cache_dir, Progress* progress = nullptr);

  // Runs the batch through all layers, writing each token's K/V into the cache, and
  // returns logits [batch.logit_rows.size()][n_vocab], valid until the next forward().
  // kv_groups: [kv_layout().n_groups()], group g's storage with n_slots(g) slots.
  std::span<const float> forward(const kernels::KernelTable& k, ThreadPool& pool,
                                 const ForwardBatch& batch, std::span<const KvStorageView> kv_groups);

  // The hidden-state rows the last forward() was asked for (ForwardBatch::embd_rows):
  // [embd_rows.size()][n_embd], output-normed, valid until the next forward().
  std::span<const float> embeddings() const;

  void set_tap(TapFn tap) { tap_ = std::move(tap); }

  // Context shift by re-RoPE (engine/context_shift.h). Whether moving cached rows to new
  // positions (kernels::kv_move) gives what the layers would have stored there: every KV
  // group is full attention (a sliding group has released rows the moved ones would need)
  // and the K rows are F16 or F32 (V is copied as it is), and the rows are not latent
  // attention's K-only rows. RoPE variants (NeoX, partial rotary, linear / llama3 /
  // longrope scaling) and NoPE layers all rotate linearly in the position, so all qualify.
  // Keys rotated by ModelLimits::rotate_qk do not.
  bool can_move_kv(DType k_dtype) const;
  // Copies the rows of positions src_pos0 .. src_pos0 + n - 1 to dst_pos0 .. of every layer
  // that stores K/V, from the src block tables to the dst ones ([n_groups] each), rotating
  // K by dst_pos0 - src_pos0 positions with the layer's RoPE.
  void move_kv(const kernels::KernelTable& k, std::span<const KvStorageView> kv_groups,
               std::span<const std::span<const int32_t>> src_tables,
               std::span<const std::span<const int32_t>> dst_tables, int64_t src_pos0, int64_t dst_pos0,
               int64_t n) const;

 private:
  Model();

  std::unique_ptr<gguf::ModelFile> file_;
  HParams hp_;
  std::vector<LayerSpec> specs_;
  KvLayout kv_layout_;
  ModelWeights weights_;
  HugeBuffer interleaved_memory_;  // the interleaved copies, when packed in memory
  MappedFile interleaved_file_;    // the interleaved copies, when from a cache file
  ModelLimits limits_;
  double weights_huge_fraction_ = -1;
  std::unique_ptr<Workspace> ws_;
  TapFn tap_;
};

}  // namespace lumen::model
