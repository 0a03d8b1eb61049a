#include "model/weights.h"

#include <string>

#include "kernels/ops.h"

namespace lumen::model {
namespace {

std::string shape_str(std::initializer_list<int64_t> dims) {
  std::string s = "[";
  bool first = true;
  for (int64_t d : dims) {
    if (!first) s += ", ";
    s += std::to_string(d);
    first = false;
  }
  return s + "]";
}

class Binder {
 public:
  Binder(const gguf::ModelFile& f, ModelWeights& w) : f_(f), w_(w) {}

  Result<TensorView> matrix(const std::string& name, int64_t n_in, int64_t n_out) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) return error("model: tensor '" + name + "' is missing");
    const TensorView& v = t->view;
    if (v.n_dims != 2 || v.ne[0] != n_in || v.ne[1] != n_out)
      return error("model: tensor '" + name + "' has shape " + v.shape_string() + ", expected " +
                   shape_str({n_in, n_out}));
    if (!kernels::matmul_supports(v.dtype))
      return error("model: tensor '" + name + "' has type " + std::string(dtype_name(v.dtype)) +
                   ", which lumen cannot multiply with (supported: f32, f16, bf16, q8_0, q4_0, q4_K, q6_K)");
    return v;
  }

  // A 1-D f32 vector; converted from f16/bf16 if needed. nullptr + ok when optional and absent.
  Result<const float*> vector(const std::string& name, int64_t n, bool optional = false) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (optional) return static_cast<const float*>(nullptr);
      return error("model: tensor '" + name + "' is missing");
    }
    const TensorView& v = t->view;
    if (v.n_elements() != n || v.ne[0] != n)
      return error("model: tensor '" + name + "' has shape " + v.shape_string() + ", expected " +
                   shape_str({n}));
    if (v.dtype == DType::kF32) return reinterpret_cast<const float*>(v.data);
    if (v.dtype != DType::kF16 && v.dtype != DType::kBF16)
      return error("model: tensor '" + name + "' has type " + std::string(dtype_name(v.dtype)) +
                   " (norms and biases must be f32, f16 or bf16)");
    std::vector<float>& out = w_.owned_f32.emplace_back(n);
    kernels::dequantize_row(v.dtype, v.data, out.data(), n);
    return static_cast<const float*>(out.data());
  }

 private:
  const gguf::ModelFile& f_;
  ModelWeights& w_;
};

}  // namespace

Result<ModelWeights> bind_weights(const gguf::ModelFile& f, const HParams& hp) {
  ModelWeights w;
  Binder b(f, w);
  w.owned_f32.reserve(4 * hp.n_layer + 4);  // pointers into these vectors must stay valid
  {
    const gguf::TensorInfo* t = f.find_tensor("token_embd.weight");
    if (!t) return error("model: tensor 'token_embd.weight' is missing");
    if (t->view.dtype != DType::kF32 && t->view.dtype != DType::kF16 &&
        t->view.dtype != DType::kBF16 && !kernels::matmul_supports(t->view.dtype))
      return error("model: tensor 'token_embd.weight' has unsupported type " +
                   std::string(dtype_name(t->view.dtype)));
    w.tok_embd = t->view;
  }
  const int64_t e = hp.n_embd, q = hp.n_q_dim(), kv = hp.n_kv_dim();
  w.layers.resize(hp.n_layer);
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    LayerWeights& l = w.layers[il];
    LUMEN_ASSIGN_OR_RETURN(l.attn_norm, b.vector(p + "attn_norm.weight", e));
    LUMEN_ASSIGN_OR_RETURN(l.wq, b.matrix(p + "attn_q.weight", e, q));
    LUMEN_ASSIGN_OR_RETURN(l.wk, b.matrix(p + "attn_k.weight", e, kv));
    LUMEN_ASSIGN_OR_RETURN(l.wv, b.matrix(p + "attn_v.weight", e, kv));
    const bool bias_optional = !hp.has_qkv_bias;
    LUMEN_ASSIGN_OR_RETURN(l.bq, b.vector(p + "attn_q.bias", q, bias_optional));
    LUMEN_ASSIGN_OR_RETURN(l.bk, b.vector(p + "attn_k.bias", kv, bias_optional));
    LUMEN_ASSIGN_OR_RETURN(l.bv, b.vector(p + "attn_v.bias", kv, bias_optional));
    LUMEN_ASSIGN_OR_RETURN(l.wo, b.matrix(p + "attn_output.weight", q, e));
    LUMEN_ASSIGN_OR_RETURN(l.ffn_norm, b.vector(p + "ffn_norm.weight", e));
    LUMEN_ASSIGN_OR_RETURN(l.w_gate, b.matrix(p + "ffn_gate.weight", e, hp.n_ff));
    LUMEN_ASSIGN_OR_RETURN(l.w_up, b.matrix(p + "ffn_up.weight", e, hp.n_ff));
    LUMEN_ASSIGN_OR_RETURN(l.w_down, b.matrix(p + "ffn_down.weight", hp.n_ff, e));
  }
  LUMEN_ASSIGN_OR_RETURN(w.output_norm, b.vector("output_norm.weight", e));
  if (hp.tied_output) {
    if (!kernels::matmul_supports(w.tok_embd.dtype))
      return error("model: tied output uses token_embd.weight of type " +
                   std::string(dtype_name(w.tok_embd.dtype)) + ", which lumen cannot multiply with");
    w.output = w.tok_embd;
  } else {
    LUMEN_ASSIGN_OR_RETURN(w.output, b.matrix("output.weight", e, hp.n_vocab));
  }
  // RoPE frequency factors: stored by llama.cpp's converter as rope_freqs.weight for
  // Llama 3.1+; computed from the scaling metadata otherwise.
  if (const gguf::TensorInfo* t = f.find_tensor("rope_freqs.weight")) {
    if (t->view.dtype != DType::kF32 || t->view.n_elements() != hp.head_dim / 2)
      return error("model: tensor 'rope_freqs.weight' must be f32 with " +
                   std::to_string(hp.head_dim / 2) + " elements, got " + t->view.shape_string());
    const float* p = reinterpret_cast<const float*>(t->view.data);
    w.rope_freq_factors.assign(p, p + hp.head_dim / 2);
  } else if (hp.rope_scaling_type == "llama3") {
    w.rope_freq_factors = llama3_rope_freq_factors(hp);
  }
  return w;
}

uint64_t weight_bytes_per_token(const ModelWeights& w, const HParams& hp) {
  uint64_t n = 0;
  for (const LayerWeights& l : w.layers)
    n += l.wq.n_bytes + l.wk.n_bytes + l.wv.n_bytes + l.wo.n_bytes + l.w_gate.n_bytes +
         l.w_up.n_bytes + l.w_down.n_bytes;
  n += w.output.n_bytes + w.tok_embd.row_stride_bytes();
  return n;
}

}  // namespace lumen::model
