// Weight binding: GGUF tensor names -> typed, shape-checked views. Large matrices stay
// zero-copy views into the model file's mapping; small vectors (norms, biases) are
// copied to f32 once at load.
#pragma once

#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/model_file.h"
#include "kernels/kernel_table.h"
#include "model/hparams.h"
#include "tensor/tensor_view.h"

namespace lumen::model {

struct LayerWeights {
  const float* attn_norm = nullptr;  // [n_embd]
  TensorView wq;                     // [n_embd] -> [n_head * head_dim]
  TensorView wk;                     // [n_embd] -> [n_kv_head * head_dim]
  TensorView wv;                     // [n_embd] -> [n_kv_head * head_dim]
  const float* bq = nullptr;         // [n_head * head_dim] (qwen2)
  const float* bk = nullptr;         // [n_kv_head * head_dim] (qwen2)
  const float* bv = nullptr;         // [n_kv_head * head_dim] (qwen2)
  TensorView wo;                     // [n_head * head_dim] -> [n_embd]
  const float* ffn_norm = nullptr;   // [n_embd]
  TensorView w_gate;                 // [n_embd] -> [n_ff]
  TensorView w_up;                   // [n_embd] -> [n_ff]
  TensorView w_down;                 // [n_ff] -> [n_embd]
};

struct ModelWeights {
  TensorView tok_embd;                 // [n_embd] x n_vocab rows
  std::vector<LayerWeights> layers;    // [n_layer]
  const float* output_norm = nullptr;  // [n_embd]
  TensorView output;                   // [n_embd] -> [n_vocab]; == tok_embd when tied
  std::vector<float> rope_freq_factors;  // [head_dim/2] or empty

  // f32 copies of the small tensors (kept alive here).
  std::vector<std::vector<float>> owned_f32;
};

Result<ModelWeights> bind_weights(const gguf::ModelFile& file, const HParams& hp);

// Every matrix the forward pass multiplies with, in forward order: each layer's q, k, v, o,
// gate, up, down, then the output.
std::vector<TensorView*> matrices(ModelWeights& w);
std::vector<const TensorView*> matrices(const ModelWeights& w);

// Interleaved copies of the matrices (kernel_table.h, InterleavedKernels): every matrix
// whose dtype has an interleaved path in a kernel table, laid out one after the other
// (64-byte aligned) in one buffer. The token embedding keeps only its rows (get_rows);
// when tied, the output matrix gets the copy.
struct InterleavePlan {
  struct Entry {
    TensorView* t;                              // the matrix (a view in ModelWeights)
    const kernels::InterleavedKernels* ik;
    size_t offset;                              // in the buffer
    size_t n_bytes;                             // ceil(rows / ik->rows) groups
  };
  std::vector<Entry> entries;
  size_t n_bytes = 0;                           // the whole buffer
};
InterleavePlan plan_interleave(ModelWeights& w, const kernels::KernelTable& k);
// Packs every entry into dst (plan.n_bytes), on the pool's threads. To keep the resident
// set small while a large model is copied, each packed chunk's whole pages can be unmapped
// right away (MADV_DONTNEED): `release_source` only where the views are a read-only file
// mapping, `release_dest` only where dst is a shared file mapping (never anonymous memory:
// that would drop the copy).
struct PackRelease {
  bool source = false;
  bool dest = false;
};
void pack_interleaved(const InterleavePlan& plan, std::byte* dst, ThreadPool& pool, PackRelease release = {});
// Unmaps the whole pages inside [p, p + n) from this process (MADV_DONTNEED). Only for
// file-backed mappings, whose pages stay in the page cache.
void release_pages(const std::byte* p, size_t n);
// Points the entries' views at their copies in `base` (a buffer packed by pack_interleaved).
void bind_interleaved(const InterleavePlan& plan, const std::byte* base);

// Bytes of weights read per generated token (every matrix once, in the layout the kernels
// read it, + one embedding row).
uint64_t weight_bytes_per_token(const ModelWeights& w, const HParams& hp);

}  // namespace lumen::model
