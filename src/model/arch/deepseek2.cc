// DeepSeek-V2 / V2-Lite / V3 (GGUF "deepseek2"): multi-head latent attention and a
// mixture of experts with shared experts.
//
// Per layer, for all T tokens of the batch at once:
//
//   xn   = rmsnorm(x) * attn_norm
//   x   += mla(xn)                     multi-head latent attention (mla_block.cc): the cache
//                                      holds one normed latent + one roped key per token;
//                                      RoPE with YaRN scaling, its magnitude correction in
//                                      the attention scale (mscale^2 / sqrt(head_dim))
//   xn   = rmsnorm(x) * ffn_norm
//   x   += mlp(xn)                     the first leading_dense_block_count layers: SwiGLU
//   x   += moe(xn) + shared(xn)        the others (moe_block.cc): router softmax (V2) or
//                                      sigmoid (V3, + a selection bias per expert), top-k,
//                                      weights renormalised if the file says, times
//                                      expert_weights_scale; shared experts without a gate
//
// then logits = rmsnorm(x[rows]) * output_norm  Wout^T.
#include "model/blocks.h"

namespace lumen::model {

std::span<const float> forward_deepseek2(Pass& p) {
  Workspace& ws = p.ws;
  const int64_t T = p.n_tokens, E = p.hp.n_embd;
  embed_tokens(p);
  for (int32_t il = 0; il < p.hp.n_layer; ++il) {
    const LayerWeights& l = p.w.layers[il];
    norm(p, NormKind::kRms, ws.x.data(), l.attn_norm, nullptr, T, ws.xn.data());
    p.tap("attn_norm", il, ws.xn.data(), T * E);
    mla_attention_block(p, il, ws.xn.data(), ws.y.data());
    kernels::add_in_place(p.k, ws.x.data(), ws.y.data(), T * E);

    norm(p, NormKind::kRms, ws.x.data(), l.ffn_norm, nullptr, T, ws.xn.data());
    if (p.specs[il].moe) moe_mlp(p, il, ws.xn.data(), ws.y.data());
    else mlp_block(p, il, ws.xn.data(), ws.y.data());
    kernels::add_in_place(p.k, ws.x.data(), ws.y.data(), T * E);
    p.tap("layer_out", il, ws.x.data(), T * E);
  }
  return output_logits(p);
}

}  // namespace lumen::model
