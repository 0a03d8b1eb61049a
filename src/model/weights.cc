#include "model/weights.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>
#include <utility>

#include "base/check.h"
#include "kernels/ops.h"
#include "kernels/type_table.h"
#include "base/fp16.h"

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
                   ", which lumen cannot multiply with (supported: " + kernels::matmul_type_names() + ")");
    return v;
  }

  // A 1-D f32 vector of n elements (or of alt_n, when given: a per-head norm); converted
  // from f16/bf16 if needed. nullptr + ok when optional and absent.
  Result<const float*> vector(const std::string& name, int64_t n, bool optional = false, int64_t alt_n = 0) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) {
      if (optional) return static_cast<const float*>(nullptr);
      return error("model: tensor '" + name + "' is missing");
    }
    const TensorView& v = t->view;
    if (alt_n > 0 && v.n_elements() == alt_n) n = alt_n;
    if (v.n_elements() != n || (v.ne[0] != n && alt_n == 0))
      return error("model: tensor '" + name + "' has shape " + v.shape_string() + ", expected " +
                   shape_str({n}) + (alt_n > 0 ? " or " + std::to_string(alt_n) + " elements" : ""));
    if (v.dtype != DType::kF32 && v.dtype != DType::kF16 && v.dtype != DType::kBF16)
      return error("model: tensor '" + name + "' has type " + std::string(dtype_name(v.dtype)) +
                   " (norms and biases must be f32, f16 or bf16)");
    // Copied even when f32: a few KiB each, and the file's pages around them (2 MiB each
    // when the page cache holds huge folios) then need not stay mapped.
    std::vector<float>& out = w_.owned_f32.emplace_back(n);
    if (v.dtype == DType::kF32) std::memcpy(out.data(), v.data, n * sizeof(float));
    else kernels::dequantize_row(v.dtype, v.data, out.data(), n);
    return static_cast<const float*>(out.data());
  }

  // The n_expert matrices [n_in] -> [n_out] of a 3-D expert tensor [n_in, n_out, n_expert]:
  // one 2-D view per expert, into the tensor.
  Result<std::vector<TensorView>> experts(const std::string& name, int64_t n_in, int64_t n_out, int64_t n_expert) {
    const gguf::TensorInfo* t = f_.find_tensor(name);
    if (!t) return error("model: tensor '" + name + "' is missing");
    const TensorView& v = t->view;
    if (v.n_dims != 3 || v.ne[0] != n_in || v.ne[1] != n_out || v.ne[2] != n_expert)
      return error("model: tensor '" + name + "' has shape " + v.shape_string() + ", expected " +
                   shape_str({n_in, n_out, n_expert}));
    if (!kernels::matmul_supports(v.dtype))
      return error("model: tensor '" + name + "' has type " + std::string(dtype_name(v.dtype)) +
                   ", which lumen cannot multiply with (supported: " + kernels::matmul_type_names() + ")");
    std::vector<TensorView> out;
    for (int64_t e = 0; e < n_expert; ++e) {
      TensorView m = rows(v, e * n_out, n_out);
      m.n_dims = 2;
      m.ne[2] = 1;
      out.push_back(m);
    }
    return out;
  }

  // Rows [row0, row0 + n_rows) of a matrix: a view into it (fused tensors).
  static TensorView rows(const TensorView& m, int64_t row0, int64_t n_rows) {
    TensorView v = m;
    v.data = m.data + row0 * m.row_stride_bytes();
    v.ne[1] = n_rows;
    v.n_bytes = n_rows * m.row_stride_bytes();
    return v;
  }

 private:
  const gguf::ModelFile& f_;
  ModelWeights& w_;
};

}  // namespace

namespace {

// The attention weights of layer il: separate q/k/v, or one fused attn_qkv split by rows.
Status bind_attention(Binder& b, const gguf::ModelFile& f, const HParams& hp, const LayerSpec& spec,
                      const std::string& p, LayerWeights& l) {
  const int64_t e = hp.n_embd, q = hp.n_q_dim(), kv = hp.n_kv_dim();
  const bool own_kv = spec.kv_source_layer < 0;
  if (f.find_tensor(p + "attn_qkv.weight")) {
    if (!own_kv) return error("model: tensor '" + p + "attn_qkv.weight' of a layer that reads another layer's KV");
    LUMEN_ASSIGN_OR_RETURN(TensorView qkv, b.matrix(p + "attn_qkv.weight", e, q + 2 * kv));
    l.wq = Binder::rows(qkv, 0, q);
    l.wk = Binder::rows(qkv, q, kv);
    l.wv = Binder::rows(qkv, q + kv, kv);
  } else {
    LUMEN_ASSIGN_OR_RETURN(l.wq, b.matrix(p + "attn_q.weight", e, q));
    if (own_kv) {
      LUMEN_ASSIGN_OR_RETURN(l.wk, b.matrix(p + "attn_k.weight", e, kv));
      LUMEN_ASSIGN_OR_RETURN(l.wv, b.matrix(p + "attn_v.weight", e, kv));
    }
  }
  const bool bias_optional = !hp.has_qkv_bias;
  LUMEN_ASSIGN_OR_RETURN(l.bq, b.vector(p + "attn_q.bias", q, bias_optional));
  if (own_kv) {
    LUMEN_ASSIGN_OR_RETURN(l.bk, b.vector(p + "attn_k.bias", kv, bias_optional));
    LUMEN_ASSIGN_OR_RETURN(l.bv, b.vector(p + "attn_v.bias", kv, bias_optional));
  }
  if (spec.qk_norm && spec.qk_norm_whole) {
    LUMEN_ASSIGN_OR_RETURN(l.q_norm, b.vector(p + "attn_q_norm.weight", q));
    if (own_kv) {
      LUMEN_ASSIGN_OR_RETURN(l.k_norm, b.vector(p + "attn_k_norm.weight", kv));
    }
  } else if (spec.qk_norm) {
    LUMEN_ASSIGN_OR_RETURN(l.q_norm, b.vector(p + "attn_q_norm.weight", hp.head_dim, false, q));
    l.qk_norm_per_head = f.find_tensor(p + "attn_q_norm.weight")->view.n_elements() == q && hp.n_head > 1;
    if (own_kv) {
      LUMEN_ASSIGN_OR_RETURN(l.k_norm, b.vector(p + "attn_k_norm.weight", l.qk_norm_per_head ? kv : hp.head_dim));
    }
  }
  LUMEN_ASSIGN_OR_RETURN(l.wo, b.matrix(p + "attn_output.weight", q, e));
  LUMEN_ASSIGN_OR_RETURN(l.bo, b.vector(p + "attn_output.bias", e, true));
  return Status();
}

// The MLP weights: gate (separate, or the first half of a fused ffn_up), up, down, biases.
Status bind_mlp(Binder& b, const gguf::ModelFile& f, const HParams& hp, const LayerSpec& spec, const std::string& p,
                LayerWeights& l) {
  const int64_t e = hp.n_embd, ff = hp.n_ff;
  if (spec.mlp == MlpKind::kGelu) {
    LUMEN_ASSIGN_OR_RETURN(l.w_up, b.matrix(p + "ffn_up.weight", e, ff));
  } else if (f.find_tensor(p + "ffn_gate.weight") == nullptr && f.find_tensor(p + "ffn_up.weight") != nullptr &&
             f.find_tensor(p + "ffn_up.weight")->view.ne[1] == 2 * ff) {
    // Phi-3: ffn_up holds [gate; up] (ggml's swiglu: silu of the first half times the second).
    LUMEN_ASSIGN_OR_RETURN(TensorView gate_up, b.matrix(p + "ffn_up.weight", e, 2 * ff));
    l.w_gate = Binder::rows(gate_up, 0, ff);
    l.w_up = Binder::rows(gate_up, ff, ff);
  } else {
    LUMEN_ASSIGN_OR_RETURN(l.w_gate, b.matrix(p + "ffn_gate.weight", e, ff));
    LUMEN_ASSIGN_OR_RETURN(l.w_up, b.matrix(p + "ffn_up.weight", e, ff));
  }
  LUMEN_ASSIGN_OR_RETURN(l.w_down, b.matrix(p + "ffn_down.weight", ff, e));
  const bool biases = hp.arch == Arch::kStarcoder2;  // required there, optional elsewhere
  LUMEN_ASSIGN_OR_RETURN(l.b_up, b.vector(p + "ffn_up.bias", ff, !biases));
  LUMEN_ASSIGN_OR_RETURN(l.b_down, b.vector(p + "ffn_down.bias", e, !biases));
  return Status();
}

// w_uk[h] (LayerWeights): head h's k_nope rows of wkv_b, transposed into a [L][nope]
// matrix of its own, f32 when wkv_b is f32 (the test files) and f16 otherwise.
Status make_absorbed_uk(const HParams& hp, const std::string& p, LayerWeights& l, ModelWeights& w) {
  const int64_t H = hp.n_head, L = hp.n_lora_kv, nope = hp.qk_nope_dim(), stride = nope + hp.head_dim_v;
  if (!kernels::can_dequantize(l.wkv_b.dtype))
    return error("model: tensor '" + p + "attn_kv_b.weight' has type " + std::string(dtype_name(l.wkv_b.dtype)) +
                 ", which lumen cannot read");
  const DType dt = l.wkv_b.dtype == DType::kF32 ? DType::kF32 : DType::kF16;
  const size_t head_bytes = row_bytes(dt, nope) * L;
  std::vector<std::byte>& buf = w.owned_matrices.emplace_back(head_bytes * H);
  std::vector<float> row(L);
  for (int64_t h = 0; h < H; ++h) {
    std::byte* dst = buf.data() + h * head_bytes;
    for (int64_t d = 0; d < nope; ++d) {
      kernels::dequantize_row(l.wkv_b.dtype, l.wkv_b.row(h * stride + d), row.data(), L);
      for (int64_t c = 0; c < L; ++c) {
        if (dt == DType::kF32) reinterpret_cast<float*>(dst)[c * nope + d] = row[c];
        else reinterpret_cast<uint16_t*>(dst)[c * nope + d] = f32_to_fp16(row[c]);
      }
    }
    TensorView v;
    v.dtype = dt;
    v.n_dims = 2;
    v.ne[0] = nope;
    v.ne[1] = L;
    v.data = dst;
    v.n_bytes = head_bytes;
    l.w_uk.push_back(v);
    l.w_uv.push_back(Binder::rows(l.wkv_b, h * stride + nope, hp.head_dim_v));
  }
  return Status();
}

// Multi-head latent attention (deepseek2): q (one matrix, or the bottleneck a -> norm -> b),
// the latent and rope-key projection with the latent's norm, wkv_b and its absorbed forms,
// the output.
Status bind_mla(Binder& b, const HParams& hp, const std::string& p, LayerWeights& l, ModelWeights& w) {
  const int64_t e = hp.n_embd, q = hp.n_q_dim(), L = hp.n_lora_kv;
  if (hp.n_lora_q > 0) {
    LUMEN_ASSIGN_OR_RETURN(l.wq_a, b.matrix(p + "attn_q_a.weight", e, hp.n_lora_q));
    LUMEN_ASSIGN_OR_RETURN(l.q_a_norm, b.vector(p + "attn_q_a_norm.weight", hp.n_lora_q));
    LUMEN_ASSIGN_OR_RETURN(l.wq_b, b.matrix(p + "attn_q_b.weight", hp.n_lora_q, q));
  } else {
    LUMEN_ASSIGN_OR_RETURN(l.wq, b.matrix(p + "attn_q.weight", e, q));
  }
  LUMEN_ASSIGN_OR_RETURN(l.wkv_a, b.matrix(p + "attn_kv_a_mqa.weight", e, L + hp.rope_dims));
  LUMEN_ASSIGN_OR_RETURN(l.kv_a_norm, b.vector(p + "attn_kv_a_norm.weight", L));
  LUMEN_ASSIGN_OR_RETURN(l.wkv_b,
                         b.matrix(p + "attn_kv_b.weight", L, int64_t{hp.n_head} * (hp.qk_nope_dim() + hp.head_dim_v)));
  LUMEN_TRY(make_absorbed_uk(hp, p, l, w));
  LUMEN_ASSIGN_OR_RETURN(l.wo, b.matrix(p + "attn_output.weight", int64_t{hp.n_head} * hp.head_dim_v, e));
  return Status();
}

// The MoE weights: router, experts (views into the 3-D tensors), shared expert.
Status bind_moe(Binder& b, const HParams& hp, const LayerSpec& spec, const std::string& p, LayerWeights& l) {
  const int64_t e = hp.n_embd, ff = hp.n_ff_exp, n = hp.n_expert;
  LUMEN_ASSIGN_OR_RETURN(l.ffn_gate_inp, b.matrix(p + "ffn_gate_inp.weight", e, n));
  LUMEN_ASSIGN_OR_RETURN(l.w_gate_exp, b.experts(p + "ffn_gate_exps.weight", e, ff, n));
  LUMEN_ASSIGN_OR_RETURN(l.w_up_exp, b.experts(p + "ffn_up_exps.weight", e, ff, n));
  LUMEN_ASSIGN_OR_RETURN(l.w_down_exp, b.experts(p + "ffn_down_exps.weight", ff, e, n));
  LUMEN_ASSIGN_OR_RETURN(l.exp_probs_b, b.vector(p + "exp_probs_b.bias", n, true));
  if (spec.shared_expert) {
    const int64_t fs = hp.n_ff_shexp;
    const bool gated = hp.arch != Arch::kDeepseek2;
    LUMEN_ASSIGN_OR_RETURN(l.gate_inp_shexp, b.vector(p + "ffn_gate_inp_shexp.weight", e, !gated));
    LUMEN_ASSIGN_OR_RETURN(l.w_gate_shexp, b.matrix(p + "ffn_gate_shexp.weight", e, fs));
    LUMEN_ASSIGN_OR_RETURN(l.w_up_shexp, b.matrix(p + "ffn_up_shexp.weight", e, fs));
    LUMEN_ASSIGN_OR_RETURN(l.w_down_shexp, b.matrix(p + "ffn_down_shexp.weight", fs, e));
  }
  return Status();
}

// RoPE frequency factors: rope_freqs.weight (llama.cpp's converter writes it for Llama
// 3.1+), computed from llama3 scaling metadata, or Phi-3's long / short factors.
Status bind_rope_factors(const gguf::ModelFile& f, const HParams& hp, int64_t n_ctx, ModelWeights& w) {
  const int64_t n = hp.rope_dims / 2;
  const char* name = "rope_freqs.weight";
  if (hp.arch == Arch::kPhi3 && f.find_tensor("rope_factors_long.weight") != nullptr)
    name = n_ctx > hp.rope_original_ctx ? "rope_factors_long.weight" : "rope_factors_short.weight";
  if (const gguf::TensorInfo* t = f.find_tensor(name)) {
    if (t->view.dtype != DType::kF32 || t->view.n_elements() != n)
      return error("model: tensor '" + std::string(name) + "' must be f32 with " + std::to_string(n) +
                   " elements, got " + std::string(dtype_name(t->view.dtype)) + " " + t->view.shape_string());
    const float* p = reinterpret_cast<const float*>(t->view.data);
    for (int64_t i = 0; i < n; ++i)
      if (!(p[i] > 0) || !std::isfinite(p[i]))
        return error("model: tensor '" + std::string(name) + "' has a factor that is not positive and finite");
    w.rope_freq_factors.assign(p, p + n);
  } else if (std::string_view(name) != "rope_freqs.weight") {
    return error("model: tensor '" + std::string(name) + "' is missing (the file has rope_factors_long)");
  } else if (hp.rope_scaling_type == "llama3") {
    w.rope_freq_factors = llama3_rope_freq_factors(hp);
  }
  return Status();
}

}  // namespace

Result<ModelWeights> bind_weights(const gguf::ModelFile& f, const HParams& hp, const std::vector<LayerSpec>& specs,
                                  int64_t n_ctx) {
  LUMEN_CHECK(static_cast<int32_t>(specs.size()) == hp.n_layer);
  ModelWeights w;
  Binder b(f, w);
  w.owned_f32.reserve(24 * hp.n_layer + 8);  // pointers into these vectors must stay valid
  {
    const gguf::TensorInfo* t = f.find_tensor("token_embd.weight");
    if (!t) return error("model: tensor 'token_embd.weight' is missing");
    if (!kernels::can_dequantize(t->view.dtype))
      return error("model: tensor 'token_embd.weight' has type " + std::string(dtype_name(t->view.dtype)) +
                   ", which lumen cannot read (supported: " + kernels::type_names(&kernels::row_can_dequantize) +
                   ")");
    w.tok_embd = t->view;
  }
  const int64_t e = hp.n_embd;
  w.layers.resize(hp.n_layer);
  for (int32_t il = 0; il < hp.n_layer; ++il) {
    const std::string p = "blk." + std::to_string(il) + ".";
    const LayerSpec& spec = specs[il];
    LayerWeights& l = w.layers[il];
    const bool layer_norm = spec.norm == NormKind::kLayer;
    LUMEN_ASSIGN_OR_RETURN(l.attn_norm, b.vector(p + "attn_norm.weight", e));
    LUMEN_ASSIGN_OR_RETURN(l.attn_norm_b, b.vector(p + "attn_norm.bias", e, !layer_norm));
    if (spec.mla) {
      LUMEN_TRY(bind_mla(b, hp, p, l, w));
    } else {
      LUMEN_TRY(bind_attention(b, f, hp, spec, p, l));
    }
    if (spec.post_attn_norm) {
      LUMEN_ASSIGN_OR_RETURN(l.attn_post_norm, b.vector(p + "post_attention_norm.weight", e));
    }
    if (!spec.parallel_mlp) {
      LUMEN_ASSIGN_OR_RETURN(l.ffn_norm, b.vector(p + "ffn_norm.weight", e));
      LUMEN_ASSIGN_OR_RETURN(l.ffn_norm_b, b.vector(p + "ffn_norm.bias", e, !layer_norm));
    }
    if (spec.moe) {
      LUMEN_TRY(bind_moe(b, hp, spec, p, l));
    } else {
      LUMEN_TRY(bind_mlp(b, f, hp, spec, p, l));
    }
    if (spec.post_ffn_norm) {
      LUMEN_ASSIGN_OR_RETURN(l.ffn_post_norm, b.vector(p + "post_ffw_norm.weight", e));
    }
  }
  const bool layer_norm = !specs.empty() && specs[0].norm == NormKind::kLayer;
  LUMEN_ASSIGN_OR_RETURN(w.output_norm, b.vector("output_norm.weight", e));
  LUMEN_ASSIGN_OR_RETURN(w.output_norm_b, b.vector("output_norm.bias", e, !layer_norm));
  if (hp.tied_output) {
    if (!kernels::matmul_supports(w.tok_embd.dtype))
      return error("model: tied output uses token_embd.weight of type " +
                   std::string(dtype_name(w.tok_embd.dtype)) + ", which lumen cannot multiply with (supported: " +
                   kernels::matmul_type_names() + ")");
    w.output = w.tok_embd;
  } else {
    LUMEN_ASSIGN_OR_RETURN(w.output, b.matrix("output.weight", e, hp.n_vocab));
  }
  LUMEN_ASSIGN_OR_RETURN(w.output_b, b.vector("output.bias", hp.n_vocab, true));
  LUMEN_TRY(bind_rope_factors(f, hp, n_ctx, w));
  LUMEN_CHECK(w.owned_f32.size() <= w.owned_f32.capacity());
  return w;
}

namespace {

// View is TensorView or const TensorView, Weights ModelWeights with the same constness.
template <typename View, typename Weights>
std::vector<View*> matrices_of(Weights& w) {
  std::vector<View*> out;
  for (auto& l : w.layers) {
    for (View* t : {&l.wq, &l.wq_a, &l.wq_b, &l.wkv_a, &l.wk, &l.wv})
      if (t->data != nullptr) out.push_back(t);
    for (View& t : l.w_uv) out.push_back(&t);  // MLA: w_uk are copies (ModelWeights::owned_matrices)
    for (View* t : {&l.wo, &l.w_gate, &l.w_up, &l.w_down, &l.ffn_gate_inp})
      if (t->data != nullptr) out.push_back(t);
    for (size_t e = 0; e < l.w_gate_exp.size(); ++e)
      for (View* t : {&l.w_gate_exp[e], &l.w_up_exp[e], &l.w_down_exp[e]}) out.push_back(t);
    for (View* t : {&l.w_gate_shexp, &l.w_up_shexp, &l.w_down_shexp})
      if (t->data != nullptr) out.push_back(t);
  }
  out.push_back(&w.output);
  return out;
}

}  // namespace

std::vector<TensorView*> matrices(ModelWeights& w) { return matrices_of<TensorView>(w); }
std::vector<const TensorView*> matrices(const ModelWeights& w) { return matrices_of<const TensorView>(w); }

namespace {

size_t read_bytes(const TensorView& t) { return t.interleaved ? t.interleaved_n_bytes : t.n_bytes; }

}  // namespace

InterleavePlan plan_interleave(ModelWeights& w, const kernels::KernelTable& k) {
  InterleavePlan plan;
  constexpr size_t kAlign = 64;
  for (TensorView* t : matrices(w)) {
    const kernels::MatmulKernels* mk = kernels::find_matmul_kernels(k, t->dtype);
    if (mk == nullptr || mk->interleaved.layout == nullptr) continue;
    const kernels::InterleavedKernels& ik = mk->interleaved;
    const size_t n_groups = static_cast<size_t>((t->n_rows() + ik.rows - 1) / ik.rows);
    const size_t n_bytes = n_groups * ik.group_bytes(t->ne[0]);
    plan.entries.push_back({t, &ik, plan.n_bytes, n_bytes});
    plan.n_bytes += (n_bytes + kAlign - 1) / kAlign * kAlign;
  }
  return plan;
}

void release_pages(const std::byte* p, size_t n) {
  const uintptr_t page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto a = reinterpret_cast<uintptr_t>(p);
  const uintptr_t lo = (a + page - 1) & ~(page - 1), hi = (a + n) & ~(page - 1);
  if (hi > lo) madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
}

void pack_interleaved(const InterleavePlan& plan, std::byte* dst, ThreadPool& pool, PackRelease release,
                      Progress* progress) {
  // Chunks of up to kGroupsPerChunk groups of one matrix, claimed by the pool's threads.
  constexpr int64_t kGroupsPerChunk = 64;
  std::vector<std::pair<size_t, int64_t>> chunks;  // (entry, first group)
  for (size_t e = 0; e < plan.entries.size(); ++e) {
    const int64_t rows = plan.entries[e].ik->rows;
    const int64_t n_groups = (plan.entries[e].t->n_rows() + rows - 1) / rows;
    for (int64_t g = 0; g < n_groups; g += kGroupsPerChunk) chunks.emplace_back(e, g);
  }
  // Bytes of chunk c's output.
  auto chunk_bytes = [&](int64_t c) -> uint64_t {
    const InterleavePlan::Entry& e = plan.entries[chunks[c].first];
    const int64_t n_groups = (e.t->n_rows() + e.ik->rows - 1) / e.ik->rows;
    return static_cast<uint64_t>(std::min(kGroupsPerChunk, n_groups - chunks[c].second)) * e.ik->group_bytes(e.t->ne[0]);
  };
  auto pack_chunk = [&](int64_t c, int) {
    const InterleavePlan::Entry& e = plan.entries[chunks[c].first];
    const TensorView& t = *e.t;
    const int64_t rows = e.ik->rows, g0 = chunks[c].second;
    const int64_t r0 = g0 * rows, r1 = std::min(t.n_rows(), r0 + kGroupsPerChunk * rows);
    std::byte* out = dst + e.offset + g0 * e.ik->group_bytes(t.ne[0]);
    e.ik->pack(t.ne[0], t.row(r0), t.row_stride_bytes(), r1 - r0, out);
    if (release.source) release_pages(t.row(r0), (r1 - r0) * t.row_stride_bytes());
    if (release.dest) release_pages(out, ((r1 - r0 + rows - 1) / rows) * e.ik->group_bytes(t.ne[0]));
  };
  const int64_t n_chunks = static_cast<int64_t>(chunks.size());
  if (!progress) {
    pool.for_chunks(pool.n_threads(), n_chunks, pack_chunk);
    return;
  }
  // About 100 batches, the progress reported between them from this thread.
  const int64_t batch = std::max<int64_t>(1, n_chunks / 100);
  uint64_t done = 0;
  for (int64_t c0 = 0; c0 < n_chunks; c0 += batch) {
    const int64_t c1 = std::min(n_chunks, c0 + batch);
    pool.for_chunks(pool.n_threads(), c1 - c0, [&](int64_t c, int thread) { pack_chunk(c0 + c, thread); });
    for (int64_t c = c0; c < c1; ++c) done += chunk_bytes(c);
    progress->update(done, "");
  }
}

void bind_interleaved(const InterleavePlan& plan, const std::byte* base) {
  for (const InterleavePlan::Entry& e : plan.entries) {
    e.t->interleaved = base + e.offset;
    e.t->interleaved_layout = e.ik->layout;
    e.t->interleaved_n_bytes = e.n_bytes;
  }
}

uint64_t weight_bytes_per_token(const ModelWeights& w, const HParams& hp) {
  uint64_t n = w.tok_embd.row_stride_bytes();
  for (const TensorView* t : matrices(w)) n += read_bytes(*t);
  for (const LayerWeights& l : w.layers)
    for (const TensorView& t : l.w_uk) n += read_bytes(t);
  // A token reads n_expert_used of each MoE layer's experts (experts of a layer have equal
  // sizes): take the others out again.
  for (const LayerWeights& l : w.layers)
    for (size_t e = static_cast<size_t>(hp.n_expert_used); e < l.w_gate_exp.size(); ++e)
      n -= read_bytes(l.w_gate_exp[e]) + read_bytes(l.w_up_exp[e]) + read_bytes(l.w_down_exp[e]);
  return n;
}

}  // namespace lumen::model
