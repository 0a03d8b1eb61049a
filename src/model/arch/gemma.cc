// Gemma, Gemma 2 and Gemma 3 (text).
//
//   x    = token_embd[ids] * sqrt(n_embd)                         [T][n_embd]
// per layer:
//   xn   = rmsnorm(x) * attn_norm           (norm weights are stored as 1 + w)
//   q, k, v = xn Wq^T, xn Wk^T, xn Wv^T
//            Gemma 3: q, k = rmsnorm of each head * attn_q_norm / attn_k_norm
//   q, k = rope(q), rope(k)                 NeoX pairs; Gemma 3 local layers: base 10000,
//                                           global layers: the file's base and scaling
//   q   *= 1/sqrt(head_dim)                 (1/sqrt(n_embd / n_head) for the 27B models)
//   s    = q k^T                            Gemma 2: s = 50 tanh(s / 50)
//   a    = softmax(s, causal) v             Gemma 2: even layers see only the last 4096
//                                           (window) keys; Gemma 3: five of every six
//   a    = a Wo^T
//            Gemma 2/3: a = rmsnorm(a) * post_attention_norm
//   x   += a
//   xn   = rmsnorm(x) * ffn_norm
//   m    = (gelu(xn Wgate^T) * (xn Wup^T)) Wdown^T                GELU (tanh) gated MLP
//            Gemma 2/3: m = rmsnorm(m) * post_ffw_norm
//   x   += m
// logits = rmsnorm(x) * output_norm  token_embd^T (tied)
//            Gemma 2: logits = 30 tanh(logits / 30)
#include "model/blocks.h"

namespace lumen::model {

std::span<const float> forward_gemma(Pass& p) {
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, E = p.hp.n_embd;
  embed_tokens(p);  // x = token_embd[ids] * sqrt(n_embd)
  for (int32_t il = 0; il < p.hp.n_layer; ++il) {
    const LayerSpec& s = p.specs[il];
    const LayerWeights& l = p.w.layers[il];
    norm(p, NormKind::kRms, ws.x.data(), l.attn_norm, nullptr, T, ws.xn.data());
    p.tap("attn_norm", il, ws.xn.data(), T * E);
    attention_block(p, il, ws.xn.data(), ws.y.data());
    warm_mlp_input(p, il);  // during the norms and the add
    if (s.post_attn_norm) norm(p, NormKind::kRms, ws.y.data(), l.attn_post_norm, nullptr, T, ws.y.data());
    kernels::add_in_place(p.k, ws.x.data(), ws.y.data(), T * E);  // residual

    norm(p, NormKind::kRms, ws.x.data(), l.ffn_norm, nullptr, T, ws.xn.data());
    mlp_block(p, il, ws.xn.data(), ws.y.data());
    if (s.post_ffn_norm) norm(p, NormKind::kRms, ws.y.data(), l.ffn_post_norm, nullptr, T, ws.y.data());
    if (il + 1 < p.hp.n_layer) warm_attention_input(p, il + 1);
    kernels::add_in_place(p.k, ws.x.data(), ws.y.data(), T * E);  // residual
    p.tap("layer_out", il, ws.x.data(), T * E);
  }
  return output_logits(p);  // with the final soft-capping of HParams
}

}  // namespace lumen::model
