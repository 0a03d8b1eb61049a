// Weight binding: GGUF tensor names -> typed, shape-checked views. Large matrices stay
// zero-copy views into the model file's mapping; small vectors (norms, biases) are
// converted to f32 once at load when stored in another type.
#pragma once

#include <vector>

#include "base/status.h"
#include "gguf/model_file.h"
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

  // f32 copies of small tensors stored in another dtype (kept alive here).
  std::vector<std::vector<float>> owned_f32;
};

Result<ModelWeights> bind_weights(const gguf::ModelFile& file, const HParams& hp);

// Bytes of weights read per generated token (every matrix once + one embedding row).
uint64_t weight_bytes_per_token(const ModelWeights& w, const HParams& hp);

}  // namespace lumen::model
