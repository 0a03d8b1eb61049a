// Multi-head latent attention in the expanded form, for a sequence's long step (prefill).
// When and why it runs: mla_block.cc's header. Names as there: H heads, latent L, rope dims
// R, per head qk = nope + R query/key dims and v value dims.
//
// The cache keeps the latent rows [c | kr]; this step's rows are already stored. Keys are
// taken Nc = kMlaExpandKeys at a time (j0, j0 + Nc), so the work buffers are sized for one
// chunk of keys whatever the context:
//
//   c, kr  = cache rows j0 .. j0 + Nc - 1, read back as f32         [Nc][L], [Nc][R]
//   kv     = c wkv_b^T            (one matmul: all heads' k_nope and v)  [Nc][H][nope | v]
//   K_h    = [kv[:, h, :nope] | kr]    V_h = kv[:, h, nope:]             [H][Nc][qk], [H][Nc][v]
//
// then, for every task (head h, tile of kMlaExpandTileTokens query tokens), an online softmax
// step over the chunk's keys the tile's tokens may see (causal: token at pos sees keys <= pos):
//
//   s      = scale * q_h K_h^T                                       [tile][keys]
//   m'     = max(m, max_j s)     l' = l e^(m - m') + sum_j e^(s_j - m')
//   acc'   = acc e^(m - m') + sum_j e^(s_j - m') V_h(j)              acc = the token's ws.attn row
//
// and after the last chunk out = acc / l. The running (m, l) of each (token, head) are
// ws.mlx_max / ws.mlx_sum; acc accumulates in place in ws.attn, which Wo then reads as in
// the absorbed form. Scores and P.V are the attention kernels' group entries with the tile's
// tokens as the "heads" of the group (they share K_h and V_h), so every table runs them.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "base/check.h"
#include "kernels/kernel_table.h"
#include "model/blocks.h"

namespace lumen::model {
namespace {

constexpr int32_t kGroupDimMultiple = 32;  // head dims the attention group entries take (kernel_table.h)

// ws.mlx_lat / ws.mlx_kr = the latent rows [j0, j0 + n) of the cache as f32.
void read_latents(const Pass& p, const PagedKvView& view, int64_t j0, int64_t n) {
  Workspace& ws = p.ws;
  const int64_t L = p.hp.n_lora_kv, R = p.hp.rope_dims, row = p.hp.mla_row();
  float* buf = ws.mlx_kv.data();  // [n][L + R] staging (mlx_kv is rewritten by the matmul next)
  for (int64_t j = 0; j < n; ++j) {
    const std::byte* src = view.k_addr(j0 + j, 0);
    float* dst = buf + j * row;
    if (view.k_dtype == DType::kF16) p.k.f16_to_f32(reinterpret_cast<const uint16_t*>(src), dst, row);
    else kernels::dequantize_row(view.k_dtype, src, dst, row);
  }
  for (int64_t j = 0; j < n; ++j) {
    std::memcpy(ws.mlx_lat.data() + j * L, buf + j * row, L * sizeof(float));
    std::memcpy(ws.mlx_kr.data() + j * R, buf + j * row + L, R * sizeof(float));
  }
}

// K_h and V_h of the chunk's n keys from ws.mlx_kv and ws.mlx_kr, every head.
void split_heads(Pass& p, int64_t n) {
  Workspace& ws = p.ws;
  const int64_t H = p.hp.n_head, R = p.hp.rope_dims, qk = p.hp.head_dim, nope = p.hp.qk_nope_dim();
  const int64_t V = p.hp.head_dim_v, w = nope + V;
  p.pool.for_chunks(p.pool.threads_for(static_cast<double>(n) * H * (qk + V), 64 * 1024), H, [&](int64_t h, int) {
    float* k = ws.mlx_k.data() + h * kMlaExpandKeys * qk;
    float* v = ws.mlx_v.data() + h * kMlaExpandKeys * V;
    for (int64_t j = 0; j < n; ++j) {
      const float* src = ws.mlx_kv.data() + (j * H + h) * w;
      std::memcpy(k + j * qk, src, nope * sizeof(float));
      std::memcpy(k + j * qk + nope, ws.mlx_kr.data() + j * R, R * sizeof(float));
      std::memcpy(v + j * V, src + nope, V * sizeof(float));
    }
  });
}

// scores[i * s_stride + j] = scale * q[i] . k[j] for n_rows rows of q and n keys, both [.][hd].
void tile_scores(const kernels::KernelTable& k, const float* keys, int64_t n, const float* q, int32_t n_rows,
                 int32_t hd, float scale, float* scores, size_t s_stride) {
  if (hd % kGroupDimMultiple == 0) {
    k.attn_scores_group_f32(keys, n, q, n_rows, hd, scale, scores, s_stride);
    return;
  }
  for (int32_t i = 0; i < n_rows; ++i)
    k.attn_scores_f32(keys, n, q + static_cast<int64_t>(i) * hd, hd, scale, scores + i * s_stride);
}

// acc[i * a_stride ..] += sum_j p[i * p_stride + j] values[j] over n values of hd.
void tile_accumulate(const kernels::KernelTable& k, const float* p, size_t p_stride, const float* values, int64_t n,
                     int32_t n_rows, int32_t hd, float* acc, size_t a_stride) {
  if (hd % kGroupDimMultiple == 0) {
    k.attn_accum_group_f32(p, p_stride, values, n, n_rows, hd, acc, a_stride);
    return;
  }
  for (int32_t i = 0; i < n_rows; ++i) k.attn_accum_f32(p + i * p_stride, values, n, hd, acc + i * a_stride);
}

// One online-softmax step of head h for the seq's tokens [a, b) over the chunk's keys
// [j0, j0 + n) (see the file comment). buf: [kMlaExpandTileTokens][qk + Nc] of this thread.
void attend_tile(Pass& p, float scale, const ForwardSeq& seq, int64_t h, int64_t a, int64_t b, int64_t j0, int64_t n,
                 float* buf) {
  Workspace& ws = p.ws;
  const kernels::KernelTable& k = p.k;
  const int64_t H = p.hp.n_head, qk = p.hp.head_dim, V = p.hp.head_dim_v;
  const auto rows = static_cast<int32_t>(b - a);
  const int64_t t0 = seq.token_begin;
  // Keys of the chunk that some token of the tile sees: [0, u) counted from j0.
  const int64_t u = std::min(n, seq.pos0 + b - j0);
  LUMEN_DCHECK(u > 0);
  float* q = buf;
  float* sc = buf + kMlaExpandTileTokens * qk;
  for (int32_t i = 0; i < rows; ++i)
    std::memcpy(q + i * qk, ws.q.data() + ((t0 + a + i) * H + h) * qk, qk * sizeof(float));
  tile_scores(k, ws.mlx_k.data() + h * kMlaExpandKeys * qk, u, q, rows, static_cast<int32_t>(qk), scale, sc,
              kMlaExpandKeys);
  float* acc0 = ws.attn.data() + ((t0 + a) * H + h) * V;
  for (int32_t i = 0; i < rows; ++i) {
    float* s = sc + i * kMlaExpandKeys;
    const int64_t seen = std::clamp<int64_t>(seq.pos0 + a + i + 1 - j0, 0, u);  // this token's keys here
    std::fill(s + seen, s + u, 0.0f);
    if (seen == 0) continue;
    float& m = ws.mlx_max[(a + i) * H + h];
    float& l = ws.mlx_sum[(a + i) * H + h];
    const float m_new = std::max(m, k.row_max(s, seen));
    const auto l_chunk = static_cast<float>(k.exp_sum(s, seen, m_new));
    if (m != m_new && l > 0.0f) {  // rescale what the earlier chunks summed
      const float alpha = std::exp(m - m_new);
      float* acc = acc0 + static_cast<int64_t>(i) * H * V;
      for (int64_t d = 0; d < V; ++d) acc[d] *= alpha;
      l *= alpha;
    }
    m = m_new;
    l += l_chunk;
  }
  tile_accumulate(k, sc, kMlaExpandKeys, ws.mlx_v.data() + h * kMlaExpandKeys * V, u, rows, static_cast<int32_t>(V),
                  acc0, H * V);
}

}  // namespace

void mla_expanded_attention(Pass& p, int32_t il, const ForwardSeq& seq, const PagedKvView& view) {
  const HParams& hp = p.hp;
  const LayerSpec& s = p.specs[il];
  const LayerWeights& l = p.w.layers[il];
  Workspace& ws = p.ws;
  const int64_t H = hp.n_head, V = hp.head_dim_v, qk = hp.head_dim;
  const int64_t T = seq.n_tokens, n_keys = seq.pos0 + T;
  LUMEN_CHECK(!ws.mlx_kv.empty() && T <= static_cast<int64_t>(ws.mlx_max.size()) / H);
  LUMEN_DCHECK(s.window == 0 && s.attn_softcap == 0.0f);
  std::fill_n(ws.mlx_max.begin(), T * H, -std::numeric_limits<float>::infinity());
  std::fill_n(ws.mlx_sum.begin(), T * H, 0.0f);
  std::fill_n(ws.attn.begin() + seq.token_begin * H * V, T * H * V, 0.0f);
  const int64_t n_tiles = (T + kMlaExpandTileTokens - 1) / kMlaExpandTileTokens;
  const int64_t tile_floats = kMlaExpandTileTokens * (qk + kMlaExpandKeys);
  for (int64_t j0 = 0; j0 < n_keys; j0 += kMlaExpandKeys) {
    const int64_t n = std::min(kMlaExpandKeys, n_keys - j0);
    read_latents(p, view, j0, n);
    kernels::matmul(p.k, p.pool, l.wkv_b, ws.mlx_lat.data(), n, ws.mlx_kv.data(), ws.scratch.data());
    split_heads(p, n);
    // Tiles wholly before the chunk (their tokens see none of its keys) are skipped.
    const int64_t first_tile = std::max<int64_t>(0, j0 - seq.pos0) / kMlaExpandTileTokens;
    const int64_t n_live = n_tiles - first_tile;
    p.pool.for_chunks(p.pool.n_threads(), H * n_live, [&](int64_t task, int thread_idx) {
      const int64_t h = task / n_live, a = (first_tile + task % n_live) * kMlaExpandTileTokens;
      attend_tile(p, s.attn_scale, seq, h, a, std::min(T, a + kMlaExpandTileTokens), j0, n,
                  ws.mlx_tile.data() + thread_idx * tile_floats);
    });
  }
  for (int64_t i = 0; i < T * H; ++i) {  // out = acc / l (every token sees at least itself)
    float* acc = ws.attn.data() + (seq.token_begin * H + i) * V;
    const float inv = 1.0f / ws.mlx_sum[i];
    for (int64_t d = 0; d < V; ++d) acc[d] *= inv;
  }
}

}  // namespace lumen::model
