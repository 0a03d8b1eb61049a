// The Llama family: Llama 2/3, TinyLlama, SmolLM, Mistral, Qwen2, Qwen3, SmolLM3, Phi-3, and
// the mixtures of experts built the same way: Mixtral (llama with experts), Qwen2-MoE,
// Qwen3-MoE, OLMoE.
//
// Per layer, for all T tokens of the batch at once (each weight matrix read once per
// layer for the whole batch):
//
//   xn   = rmsnorm(x) * attn_norm                        [T][n_embd]
//   q    = xn Wq^T (+ bq)    k = xn Wk^T (+ bk)    v = xn Wv^T (+ bv)
//                            Qwen2: the biases; Qwen3: rmsnorm of each head of q and k;
//                            Phi-3: Wq, Wk, Wv are row ranges of one attn_qkv matrix
//   q, k = rope(q, pos), rope(k, pos)                    rotate pairs by pos * theta_i
//                            (SmolLM3: every 4th layer has no RoPE; Phi-3 long context:
//                            theta_i divided by per-dim factors, cos/sin * attn_factor)
//   cache[pos] = k, v                                    (paged; F16 by default)
//   a    = softmax(q k^T / sqrt(head_dim), causal) v     per sequence, GQA head mapping;
//                            Mistral, Phi-3: only the last `window` keys (sliding window)
//   x   += a Wo^T (+ bo)                                 residual
//   xn   = rmsnorm(x) * ffn_norm
//   x   += (silu(xn Wgate^T) * (xn Wup^T)) Wdown^T       SwiGLU MLP, residual
//                            Phi-3: Wgate, Wup are the two halves of one ffn_up matrix
//                            MoE: x += moe(xn) instead (moe_block.cc): router softmax,
//                            top-k SwiGLU experts summed by their router weights
//                            (Mixtral, Qwen3-MoE: the k weights renormalised to sum 1),
//                            Qwen2-MoE + a shared expert scaled by sigmoid(xn . w)
//                            OLMoE's q/k norm: over each token's whole q (k), not per head
//
// then logits = rmsnorm(x[rows]) * output_norm  Wout^T (+ b), only for the requested rows.
// The differences between the members are all in their LayerSpecs and weights, read at
// load; this file is the composition they share.
#include "model/blocks.h"

namespace lumen::model {

std::span<const float> forward_llama(Pass& p) {
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, E = p.hp.n_embd;
  embed_tokens(p);  // x = token_embd[ids]
  for (int32_t il = 0; il < p.hp.n_layer; ++il) {
    const LayerWeights& l = p.w.layers[il];
    norm(p, NormKind::kRms, ws.x.data(), l.attn_norm, l.attn_norm_b, T, ws.xn.data());
    p.tap("attn_norm", il, ws.xn.data(), T * E);
    attention_block(p, il, ws.xn.data(), ws.y.data());
    warm_mlp_input(p, il);  // during the add and norm
    kernels::add_in_place(p.k, ws.x.data(), ws.y.data(), T * E);  // residual

    norm(p, NormKind::kRms, ws.x.data(), l.ffn_norm, l.ffn_norm_b, T, ws.xn.data());
    if (p.specs[il].moe) moe_mlp(p, il, ws.xn.data(), ws.y.data());
    else mlp_block(p, il, ws.xn.data(), ws.y.data());
    if (il + 1 < p.hp.n_layer) warm_attention_input(p, il + 1);
    kernels::add_in_place(p.k, ws.x.data(), ws.y.data(), T * E);  // residual
    p.tap("layer_out", il, ws.x.data(), T * E);
  }
  return output_logits(p);
}

}  // namespace lumen::model
