// AVX-512 attention group kernels: the query heads of a GQA group against a run of K (or
// V) rows in one pass, so each row is loaded once per group instead of once per head, and
// enough independent accumulators are in flight to keep both FMA pipes busy (the single-
// head kernels are bound by FMA latency: one dependency chain per key or per dim).
//
// Bit for bit the AVX2 single-head kernels (kernels_avx2.cc), which the AVX-512 table
// otherwise uses: per key, 8 lanes over dims i = lane (mod 8) accumulated by FMA in dim
// order, then the same horizontal-add tree, then * scale; per (head, dim), P.V accumulated
// by FMA in key order. Only the grouping of independent operations changes. The 32
// vector registers of AVX-512 hold the 4 keys x 4 heads score tile and the 8 heads x 32 dims
// P.V tile; the ymm-width score arithmetic is kept on purpose (it is what defines the lane
// order), P.V uses zmm (per-lane arithmetic, width-independent).
//
// Compiled with the AVX-512 flags; only reached when cpu_features().has_avx512_vnni().
#pragma GCC optimize("fp-contract=off")  // only the explicit FMAs below are fused
// GCC 12 bug 105593 (see matmul_avx512_common.h): _mm512_cvtph_ps reads as uninitialised use.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <cstddef>
#include <cstdint>

#include "kernels/kernel_table.h"

namespace lumen::kernels {
namespace {

// K / V rows as stored: f32, or f16 widened in registers (exactly, so both give the same
// bits; the f16 forms spare the caller a conversion pass over the cache).
__m256 load8(const float* p) { return _mm256_loadu_ps(p); }
__m256 load8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
__m512 load16(const float* p) { return _mm512_loadu_ps(p); }
__m512 load16(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }

// The AVX2 kernels' horizontal tree: four keys' 8-lane sums side by side.
__m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

// NH heads x 4 keys starting at key s (keys past n repeat key 0; their results are dropped).
template <int NH, typename T>
void scores_tile(const T* k, int64_t s, int64_t n, const float* q, int32_t hd, float scale, float* scores,
                 size_t s_stride) {
  const T* kr[4];
  for (int j = 0; j < 4; ++j) kr[j] = k + (s + j < n ? s + j : 0) * hd;
  __m256 acc[NH][4];
  #pragma GCC unroll 8
  for (int h = 0; h < NH; ++h)
    #pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) acc[h][j] = _mm256_setzero_ps();
  for (int32_t i = 0; i < hd; i += 8) {
    __m256 kv[4];
    #pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) kv[j] = load8(kr[j] + i);
    #pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const __m256 qv = _mm256_loadu_ps(q + static_cast<int64_t>(h) * hd + i);
      #pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[h][j] = _mm256_fmadd_ps(kv[j], qv, acc[h][j]);
    }
  }
  #pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    alignas(16) float out[4];
    _mm_store_ps(out, _mm_mul_ps(reduce4(acc[h][0], acc[h][1], acc[h][2], acc[h][3]), _mm_set1_ps(scale)));
    float* sc = scores + h * s_stride + s;
    for (int j = 0; j < 4 && s + j < n; ++j) sc[j] = out[j];
  }
}

template <int NH, typename T>
void scores_heads(const T* k, int64_t n, const float* q, int32_t hd, float scale, float* scores,
                  size_t s_stride) {
  for (int64_t s = 0; s < n; s += 4) scores_tile<NH>(k, s, n, q, hd, scale, scores, s_stride);
}

constexpr int kScoreHeads = 4;

// Precondition (kernel_table.h): hd % 32 == 0.
template <typename T>
void attn_scores_group(const T* k, int64_t n, const float* q, int32_t n_heads, int32_t hd, float scale,
                       float* scores, size_t s_stride) {
  int32_t h = 0;
  for (; h + kScoreHeads <= n_heads; h += kScoreHeads)
    scores_heads<kScoreHeads>(k, n, q + static_cast<int64_t>(h) * hd, hd, scale, scores + h * s_stride, s_stride);
  const float* qh = q + static_cast<int64_t>(h) * hd;
  float* sh = scores + h * s_stride;
  switch (n_heads - h) {
    case 3: scores_heads<3>(k, n, qh, hd, scale, sh, s_stride); break;
    case 2: scores_heads<2>(k, n, qh, hd, scale, sh, s_stride); break;
    case 1: scores_heads<1>(k, n, qh, hd, scale, sh, s_stride); break;
    default: break;
  }
}

// acc[h][i0 .. i0+31] += sum_s p[h][s] v[s][i0 ..] for NH heads.
template <int NH, typename T>
void accum_tile(const float* p, size_t p_stride, const T* v, int64_t n, int32_t hd, int32_t i0, float* acc,
                size_t a_stride) {
  __m512 a[NH][2];
  #pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    a[h][0] = _mm512_loadu_ps(acc + h * a_stride + i0);
    a[h][1] = _mm512_loadu_ps(acc + h * a_stride + i0 + 16);
  }
  const T* vs = v + i0;
  for (int64_t s = 0; s < n; ++s, vs += hd) {
    const __m512 v0 = load16(vs), v1 = load16(vs + 16);
    #pragma GCC unroll 8
    for (int h = 0; h < NH; ++h) {
      const __m512 ps = _mm512_set1_ps(p[h * p_stride + s]);
      a[h][0] = _mm512_fmadd_ps(ps, v0, a[h][0]);
      a[h][1] = _mm512_fmadd_ps(ps, v1, a[h][1]);
    }
  }
  #pragma GCC unroll 8
  for (int h = 0; h < NH; ++h) {
    _mm512_storeu_ps(acc + h * a_stride + i0, a[h][0]);
    _mm512_storeu_ps(acc + h * a_stride + i0 + 16, a[h][1]);
  }
}

constexpr int kAccumHeads = 8;

// Precondition (kernel_table.h): hd % 32 == 0.
template <typename T>
void attn_accum_group(const float* p, size_t p_stride, const T* v, int64_t n, int32_t n_heads, int32_t hd,
                      float* acc, size_t a_stride) {
  for (int32_t i0 = 0; i0 < hd; i0 += 32) {
    for (int32_t h = 0; h < n_heads; h += kAccumHeads) {
      const float* ph = p + h * p_stride;
      float* ah = acc + h * a_stride;
      switch (n_heads - h < kAccumHeads ? n_heads - h : kAccumHeads) {
        case 8: accum_tile<8>(ph, p_stride, v, n, hd, i0, ah, a_stride); break;
        case 7: accum_tile<7>(ph, p_stride, v, n, hd, i0, ah, a_stride); break;
        case 6: accum_tile<6>(ph, p_stride, v, n, hd, i0, ah, a_stride); break;
        case 5: accum_tile<5>(ph, p_stride, v, n, hd, i0, ah, a_stride); break;
        case 4: accum_tile<4>(ph, p_stride, v, n, hd, i0, ah, a_stride); break;
        case 3: accum_tile<3>(ph, p_stride, v, n, hd, i0, ah, a_stride); break;
        case 2: accum_tile<2>(ph, p_stride, v, n, hd, i0, ah, a_stride); break;
        default: accum_tile<1>(ph, p_stride, v, n, hd, i0, ah, a_stride); break;
      }
    }
  }
}

}  // namespace

void override_attention_avx512(KernelTable& t) {
  t.attn_scores_group_f32 = &attn_scores_group<float>;
  t.attn_accum_group_f32 = &attn_accum_group<float>;
  t.attn_scores_group_f16 = &attn_scores_group<uint16_t>;
  t.attn_accum_group_f16 = &attn_accum_group<uint16_t>;
}

}  // namespace lumen::kernels
