// StableLM (1.6B / 3B / 12B) and StarCoder2: the GPT-NeoX lineage, with LayerNorm.
//
// per layer:
//   xn   = layernorm(x) * attn_norm + attn_norm_b                     [T][n_embd]
//   q, k, v = xn Wq^T + bq, xn Wk^T + bk, xn Wv^T + bv                (biases where present)
//            StableLM 2 12B: q, k = layernorm of each head * its own weight row
//   q, k = rope(q), rope(k)                 NeoX pairs over the first n_rot dims of a head
//                                           only (StableLM: 25%); the rest pass through
//   a    = softmax(q k^T / sqrt(head_dim), causal) v Wo^T (+ bo)
//   StableLM (sequential):  x += a;  xn = layernorm(x) * ffn_norm + ffn_norm_b
//                           x += (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T
//   StableLM (parallel, no ffn_norm in the file):
//                           x += a + (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T   with the
//                           attention's xn
//   StarCoder2:             x += a;  xn = layernorm(x) * ffn_norm + ffn_norm_b
//                           x += gelu(xn Wup^T + b_up) Wdown^T + b_down      plain GELU MLP
// logits = (layernorm(x) * output_norm + output_norm_b) Wout^T
#include "model/blocks.h"

namespace lumen::model {

std::span<const float> forward_stablelm(Pass& p) {
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, E = p.hp.n_embd;
  embed_tokens(p);  // x = token_embd[ids]
  for (int32_t il = 0; il < p.hp.n_layer; ++il) {
    const LayerSpec& s = p.specs[il];
    const LayerWeights& l = p.w.layers[il];
    norm(p, NormKind::kLayer, ws.x.data(), l.attn_norm, l.attn_norm_b, T, ws.xn.data());
    p.tap("attn_norm", il, ws.xn.data(), T * E);
    attention_block(p, il, ws.xn.data(), ws.y.data());
    if (s.parallel_mlp) {
      // Both branches read the attention's normed input; ggml adds a to x, then the MLP.
      mlp_block(p, il, ws.xn.data(), ws.y2.data());
      kernels::add_in_place(p.k, ws.x.data(), ws.y.data(), T * E);
      kernels::add_in_place(p.k, ws.x.data(), ws.y2.data(), T * E);
    } else {
      warm_mlp_input(p, il);  // during the add and norm
      kernels::add_in_place(p.k, ws.x.data(), ws.y.data(), T * E);  // residual
      norm(p, NormKind::kLayer, ws.x.data(), l.ffn_norm, l.ffn_norm_b, T, ws.xn.data());
      mlp_block(p, il, ws.xn.data(), ws.y.data());
      kernels::add_in_place(p.k, ws.x.data(), ws.y.data(), T * E);  // residual
    }
    if (il + 1 < p.hp.n_layer) warm_attention_input(p, il + 1);  // during the next norm
    p.tap("layer_out", il, ws.x.data(), T * E);
  }
  return output_logits(p);
}

}  // namespace lumen::model
