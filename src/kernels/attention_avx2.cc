// AVX2 K scores for flash attention (KernelTable::attn_key_scores_*, flash_attention.cc): a
// GemmFn tile with the keys of one cache block as rows and a GQA group's queries (times the
// tokens of a prefill tile) as columns. gemm_cols, made for a few weight rows against
// activation columns, unpacks a row once per 4 columns and ends every (row, column) pair
// in a horizontal sum; here each key is loaded and unpacked once for all the columns.
//
// q8_0 / q4_0 keys (queries as q8_0): eight keys at a time, their quants transposed per tile
// so that one vector holds the same 4 quants of the 8 keys (the layout of matmul_avx2.cc's
// interleaved groups, made here on the fly and shared by every column). maddubs against a
// broadcast query dword then advances all 8 keys and lane r of every accumulator is key r:
// no horizontal sums. Per block the exact int32 sum, then
//   score += (float)sumi * (d_k * d_q)      (a separate multiply and add)
// in block order: bit for bit the reference vec_dot (fp-contract is off in this file).
//
//   keys r0..r7, block b, quants e0..e31        tile.u[b][s], s = 0..7
//   r0: e0 e1 e2 e3 | e4 .. e7 | ... | e28..e31   lane r = r_r's quants 4s..4s+3
//   ...                                            (q4_0: 0..15; q8_0: |q|, signs apart)
//
// f16 keys (queries as f16): each key widened once into registers, 64 dims at a time, and
// dotted with every query in vec_dot_f16's order (kernels_avx2.cc dot_lanes: four
// accumulators over 32-dim groups, FMA, then its horizontal sum): bit for bit the AVX2
// vec_dot_f16.
//
// The P.V step of a group (attn_accum_group_f32): each V vector loaded once for up to 4
// heads, 8 FMA chains in flight; bit for bit attn_accum_f32 per head. The same loop over
// q8_0 / q4_0 V rows as the cache stores them (attn_values_q8_0 / _q4_0) forms each
// value in registers as the dequantizer does instead of reading a dequantized buffer.
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/kernel_table.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

constexpr int kTileKeys = 8;  // keys per tile: one lane each
constexpr int64_t kMaxBlocks = kAttnKeyScoresMaxDim / kQk;

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m256i bcast_i32(const void* p) {
  int32_t v;
  std::memcpy(&v, p, sizeof(v));
  return _mm256_set1_epi32(v);
}

// t[s] lane r = dword s of r[r]: an 8 x 8 transpose of int32.
[[gnu::always_inline]] inline void transpose8(const __m256i r[8], __m256i t[8]) {
  __m256i a[8], b[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm256_unpacklo_epi32(r[2 * i], r[2 * i + 1]);      // dwords 0,1 | 4,5 of rows 2i, 2i+1
    a[2 * i + 1] = _mm256_unpackhi_epi32(r[2 * i], r[2 * i + 1]);  // dwords 2,3 | 6,7
  }
  for (int i = 0; i < 2; ++i) {
    b[4 * i + 0] = _mm256_unpacklo_epi64(a[4 * i], a[4 * i + 2]);      // dword 0 | 4 of 4 rows
    b[4 * i + 1] = _mm256_unpackhi_epi64(a[4 * i], a[4 * i + 2]);      // dword 1 | 5
    b[4 * i + 2] = _mm256_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);  // dword 2 | 6
    b[4 * i + 3] = _mm256_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);  // dword 3 | 7
  }
  for (int s = 0; s < 4; ++s) {
    t[s] = _mm256_permute2x128_si256(b[s], b[4 + s], 0x20);
    t[s + 4] = _mm256_permute2x128_si256(b[s], b[4 + s], 0x31);
  }
}

// ---- q8_0 / q4_0 keys -------------------------------------------------------------------

template <typename Block>
struct KeyTile {
  static constexpr bool kSigned = std::is_same_v<Block, BlockQ8_0>;
  __m256i u[kMaxBlocks][8];                  // unsigned operands (q4_0: q; q8_0: |q|)
  __m256i sgn[kSigned ? kMaxBlocks : 1][8];  // q8_0: the quants whose signs the query takes
  __m256 d[kMaxBlocks];                      // the 8 keys' scales per block
};

// Keys [0, n_keys) of the tile (rows w_stride apart; 1 <= n_keys <= 8, missing keys repeat
// key 0, their lanes are dropped) into tile.
template <typename Block>
void load_tile(const std::byte* w, size_t w_stride, int64_t n_keys, int64_t nb, KeyTile<Block>& tile) {
  const Block* rows[kTileKeys];
  for (int r = 0; r < kTileKeys; ++r) rows[r] = reinterpret_cast<const Block*>(w + (r < n_keys ? r : 0) * w_stride);
  const __m256i low4 = _mm256_set1_epi8(15);
  for (int64_t b = 0; b < nb; ++b) {
    __m256i q[kTileKeys];
    for (int r = 0; r < kTileKeys; ++r) {
      const Block& blk = rows[r][b];
      if constexpr (KeyTile<Block>::kSigned) {
        q[r] = load256(blk.qs);
      } else {  // element order: low nibbles are quants 0..15, high nibbles 16..31
        const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(blk.qs));
        q[r] = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(lo, 4), lo), low4);
      }
    }
    tile.d[b] = _mm256_cvtph_ps(_mm_setr_epi16(rows[0][b].d_f16, rows[1][b].d_f16, rows[2][b].d_f16, rows[3][b].d_f16,
                                               rows[4][b].d_f16, rows[5][b].d_f16, rows[6][b].d_f16, rows[7][b].d_f16));
    if constexpr (KeyTile<Block>::kSigned) {
      transpose8(q, tile.sgn[b]);
      for (int s = 0; s < 8; ++s) tile.u[b][s] = _mm256_abs_epi8(tile.sgn[b][s]);
    } else {
      transpose8(q, tile.u[b]);
    }
  }
}

// What the tiles need of a query besides its quants: per block its scale and (q4_0) 8 sum x.
struct QuerySide {
  float d[kMaxBlocks];
  int32_t sum8[kMaxBlocks];
};
constexpr int64_t kSideCols = 32;  // queries whose side is made per pass over the keys
constexpr int64_t kPassCols = 4;   // queries per pass over a key tile (registers: 2 per query)

// Written in place (a QuerySide returned by value was copied with wide loads right after
// its narrow stores: a store-forwarding stall per call, i.e. per cache block of keys).
// q8_0 keys need only the scales.
template <typename Block>
void query_side(const BlockQ8_0* bx, int64_t nb, QuerySide& side) {
  if constexpr (KeyTile<Block>::kSigned) {
    for (int64_t b = 0; b < nb; ++b) side.d[b] = _cvtsh_ss(bx[b].d_f16);
    return;
  }
  const __m256i eights = _mm256_set1_epi8(8), ones16 = _mm256_set1_epi16(1);
  for (int64_t b = 0; b < nb; ++b) {
    side.d[b] = _cvtsh_ss(bx[b].d_f16);
    const __m256i s = _mm256_madd_epi16(_mm256_maddubs_epi16(eights, load256(bx[b].qs)), ones16);
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4e));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xb1));
    side.sum8[b] = _mm_cvtsi128_si32(t);
  }
}

// The scores of the tile's 8 keys (lane r = key r) against NC queries: per block the exact
// int32 sums, then acc += (float)sumi * (d_k * d_q). Each transposed key vector is loaded
// once for the NC queries. q4_0: sum (q - 8) x = sum q x - 8 sum x; q x pairs are at most
// 2 * 15 * 128, so the 8 steps of a block stay within int16.
template <typename Block, int NC>
void tile_scores(const KeyTile<Block>& tile, int64_t nb, const BlockQ8_0* const* bx, const QuerySide* side,
                 __m256* out) {
  const __m256i ones16 = _mm256_set1_epi16(1);
  __m256 acc[NC];
  for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m256i sumi[NC];
    if constexpr (KeyTile<Block>::kSigned) {
      for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const __m256i u = tile.u[b][s], sg = tile.sgn[b][s];
        for (int c = 0; c < NC; ++c) {
          const __m256i xs = _mm256_sign_epi8(bcast_i32(bx[c][b].qs + 4 * s), sg);
          sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(_mm256_maddubs_epi16(u, xs), ones16));
        }
      }
    } else {
      __m256i acc16[NC];
      for (int c = 0; c < NC; ++c) acc16[c] = _mm256_setzero_si256();
      for (int s = 0; s < 8; ++s) {
        const __m256i u = tile.u[b][s];
        for (int c = 0; c < NC; ++c)
          acc16[c] = _mm256_add_epi16(acc16[c], _mm256_maddubs_epi16(u, bcast_i32(bx[c][b].qs + 4 * s)));
      }
      for (int c = 0; c < NC; ++c)
        sumi[c] = _mm256_sub_epi32(_mm256_madd_epi16(acc16[c], ones16), _mm256_set1_epi32(side[c].sum8[b]));
    }
    for (int c = 0; c < NC; ++c) {
      const __m256 d = _mm256_mul_ps(tile.d[b], _mm256_set1_ps(side[c].d[b]));
      acc[c] = _mm256_add_ps(acc[c], _mm256_mul_ps(_mm256_cvtepi32_ps(sumi[c]), d));
    }
  }
  for (int c = 0; c < NC; ++c) out[c] = acc[c];
}

template <typename Block>
void key_scores_q(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, const std::byte* x,
                  size_t x_stride, int64_t n_cols, float* y, int64_t y_stride) {
  const int64_t nb = n / kQk;
  KeyTile<Block> tile;
  QuerySide side[kSideCols];
  const BlockQ8_0* bx[kSideCols];
  for (int64_t c0 = 0; c0 < n_cols; c0 += kSideCols) {
    const int64_t nc = std::min(kSideCols, n_cols - c0);
    for (int64_t c = 0; c < nc; ++c) {
      bx[c] = reinterpret_cast<const BlockQ8_0*>(x + (c0 + c) * x_stride);
      query_side<Block>(bx[c], nb, side[c]);
    }
    for (int64_t r0 = 0; r0 < n_rows; r0 += kTileKeys) {
      const int64_t n_keys = std::min<int64_t>(kTileKeys, n_rows - r0);
      load_tile(w + r0 * w_stride, w_stride, n_keys, nb, tile);
      // The queries in passes of at most kPassCols, as equal as can be (7 = 4 + 3).
      const int64_t n_passes = (nc + kPassCols - 1) / kPassCols;
      for (int64_t pass = 0; pass < n_passes; ++pass) {
        const int64_t c = nc * pass / n_passes;
        const int n_pass = static_cast<int>(nc * (pass + 1) / n_passes - c);
        __m256 out[kPassCols];
        switch (n_pass) {
          case 1: tile_scores<Block, 1>(tile, nb, bx + c, side + c, out); break;
          case 2: tile_scores<Block, 2>(tile, nb, bx + c, side + c, out); break;
          case 3: tile_scores<Block, 3>(tile, nb, bx + c, side + c, out); break;
          default: tile_scores<Block, 4>(tile, nb, bx + c, side + c, out); break;
        }
        for (int j = 0; j < n_pass; ++j) {
          float* yc = y + (c0 + c + j) * y_stride + r0;
          if (n_keys == kTileKeys) {
            _mm256_storeu_ps(yc, out[j]);
          } else {
            alignas(32) float lanes[kTileKeys];
            _mm256_store_ps(lanes, out[j]);
            std::copy(lanes, lanes + n_keys, yc);
          }
        }
      }
    }
  }
}

// ---- f16 keys ---------------------------------------------------------------------------

constexpr int64_t kF16Cols = 8;  // queries widened per pass

// Lane r = hsum(f[r]) for 8 vectors, with kernels_avx2.cc's hsum's adds: lo + hi (4
// lanes s0..s3), then (s0 + s2) + (s1 + s3).
__m256 hsum8(const __m256* f) {
  __m256 z[4];  // lane 0: key i, lane 4: key i + 4
  for (int i = 0; i < 4; ++i) {
    const __m256 x = _mm256_add_ps(_mm256_permute2f128_ps(f[i], f[i + 4], 0x20),
                                   _mm256_permute2f128_ps(f[i], f[i + 4], 0x31));
    const __m256 y = _mm256_add_ps(x, _mm256_shuffle_ps(x, x, _MM_SHUFFLE(1, 0, 3, 2)));
    z[i] = _mm256_add_ps(y, _mm256_movehdup_ps(y));
  }
  const __m256 u01 = _mm256_unpacklo_ps(z[0], z[1]);  // keys 0, 1 | 4, 5 in lanes 0, 1
  const __m256 u23 = _mm256_unpacklo_ps(z[2], z[3]);  // keys 2, 3 | 6, 7
  return _mm256_shuffle_ps(u01, u23, _MM_SHUFFLE(1, 0, 1, 0));
}

__m256 widen8(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }

// One key against nc queries qf[c] (f32, kAttnKeyScoresMaxDim apart), in dot_lanes' order:
// vector v of the key goes to accumulator v % 4, then f[c * 8] = (a0 + a1) + (a2 + a3).
// The key is widened 64 dims at a time into registers; acc carries the accumulators from
// one 64-dim slice to the next.
void f16_key(const uint16_t* k16, int64_t n, const float* qf, int64_t nc, __m256 (*acc)[4], __m256* f) {
  for (int64_t i0 = 0; i0 < n; i0 += 64) {
    const bool first = i0 == 0, last = i0 + 64 >= n;
    const int nv = n - i0 >= 64 ? 8 : 4;
    __m256 kv[8];
    for (int v = 0; v < nv; ++v) kv[v] = widen8(k16 + i0 + 8 * v);
    for (int64_t c = 0; c < nc; ++c) {
      const float* q = qf + c * kAttnKeyScoresMaxDim + i0;
      __m256 a[4];
      for (int j = 0; j < 4; ++j) a[j] = first ? _mm256_setzero_ps() : acc[c][j];
      for (int v = 0; v < 4; ++v) a[v] = _mm256_fmadd_ps(kv[v], _mm256_load_ps(q + 8 * v), a[v]);
      if (nv == 8)
        for (int v = 4; v < 8; ++v) a[v - 4] = _mm256_fmadd_ps(kv[v], _mm256_load_ps(q + 8 * v), a[v - 4]);
      if (last) {
        f[c * kTileKeys] = _mm256_add_ps(_mm256_add_ps(a[0], a[1]), _mm256_add_ps(a[2], a[3]));
      } else {
        for (int j = 0; j < 4; ++j) acc[c][j] = a[j];
      }
    }
  }
}

void key_scores_f16(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, const std::byte* x,
                    size_t x_stride, int64_t n_cols, float* y, int64_t y_stride) {
  alignas(32) float qf[kF16Cols * kAttnKeyScoresMaxDim];
  __m256 acc[kF16Cols][4];
  __m256 f[kF16Cols][kTileKeys];  // per query, the tile's keys' combined accumulators
  for (auto& fc : f)
    for (__m256& v : fc) v = _mm256_setzero_ps();
  for (int64_t c0 = 0; c0 < n_cols; c0 += kF16Cols) {
    const int64_t nc = std::min(kF16Cols, n_cols - c0);
    for (int64_t c = 0; c < nc; ++c) {  // widened once (exact)
      const auto* q16 = reinterpret_cast<const uint16_t*>(x + (c0 + c) * x_stride);
      for (int64_t i = 0; i < n; i += 8) _mm256_store_ps(qf + c * kAttnKeyScoresMaxDim + i, widen8(q16 + i));
    }
    for (int64_t r0 = 0; r0 < n_rows; r0 += kTileKeys) {
      const int64_t n_keys = std::min<int64_t>(kTileKeys, n_rows - r0);
      for (int64_t r = 0; r < n_keys; ++r)
        f16_key(reinterpret_cast<const uint16_t*>(w + (r0 + r) * w_stride), n, qf, nc, acc, &f[0][r]);
      for (int64_t c = 0; c < nc; ++c) {  // + 0.0f: dot_f16's (empty) scalar tail
        const __m256 scores = _mm256_add_ps(hsum8(f[c]), _mm256_setzero_ps());
        float* yc = y + (c0 + c) * y_stride + r0;
        if (n_keys == kTileKeys) {
          _mm256_storeu_ps(yc, scores);
        } else {
          alignas(32) float lanes[kTileKeys];
          _mm256_store_ps(lanes, scores);
          std::copy(lanes, lanes + n_keys, yc);
        }
      }
    }
  }
}

// ---- P.V of a GQA group ------------------------------------------------------------------

// V rows as attn_accum_group_f32 reads them: 16 dims [i, i + 16) of row s as two vectors.
struct RowsF32 {
  const float* v;
  int32_t hd;
  [[gnu::always_inline]] void load(int64_t s, int32_t i, __m256& v0, __m256& v1) const {
    v0 = _mm256_loadu_ps(v + s * hd + i);
    v1 = _mm256_loadu_ps(v + s * hd + i + 8);
  }
};

// q8_0 / q4_0 V rows as the cache stores them (rows v_stride bytes apart), each value formed
// in registers as the dequantizer forms it: one f32 product d * q (q exact as a float; d
// widened exactly by vcvtph2ps, like fp16_to_f32 up to a NaN's quiet bit, which the product
// sets either way). Dims [i, i + 16) are half a block: q8_0 quants 16 (i % 32) / 16 ..;
// q4_0 the low nibbles of the 16 bytes for the first half, the high ones for the second.
[[gnu::always_inline]] inline __m256 scale8(uint16_t d_f16) {
  return _mm256_broadcastss_ps(_mm_cvtph_ps(_mm_cvtsi32_si128(d_f16)));
}
__m128i load64(const void* p) { return _mm_loadl_epi64(static_cast<const __m128i*>(p)); }

struct RowsQ8_0 {
  const std::byte* v;
  size_t v_stride;
  [[gnu::always_inline]] void load(int64_t s, int32_t i, __m256& v0, __m256& v1) const {
    const auto* b = reinterpret_cast<const BlockQ8_0*>(v + s * v_stride) + i / kQk;
    const __m256 d = scale8(b->d_f16);
    const int8_t* q = b->qs + i % kQk;
    v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(q))), d);
    v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(load64(q + 8))), d);
  }
};

struct RowsQ4_0 {
  const std::byte* v;
  size_t v_stride;
  [[gnu::always_inline]] void load(int64_t s, int32_t i, __m256& v0, __m256& v1) const {
    const auto* b = reinterpret_cast<const BlockQ4_0*>(v + s * v_stride) + i / kQk;
    const __m256 d = scale8(b->d_f16);
    const int shift = i % kQk == 0 ? 0 : 4;  // low nibbles: elements 0-15; high: 16-31
    const __m256i low4 = _mm256_set1_epi32(15), eight = _mm256_set1_epi32(8);
    const __m256i q0 = _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu8_epi32(load64(b->qs)), shift), low4);
    const __m256i q1 = _mm256_and_si256(_mm256_srli_epi32(_mm256_cvtepu8_epi32(load64(b->qs + 8)), shift), low4);
    v0 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q0, eight)), d);
    v1 = _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_sub_epi32(q1, eight)), d);
  }
};

// f16 V rows as the cache stores them: dims [i, i + 16) widened exactly (vcvtph2ps, as
// f16_to_f32).
struct RowsF16 {
  const std::byte* v;
  size_t v_stride;
  [[gnu::always_inline]] void load(int64_t s, int32_t i, __m256& v0, __m256& v1) const {
    const auto* h = reinterpret_cast<const uint16_t*>(v + s * v_stride) + i;
    v0 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h)));
    v1 = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + 8)));
  }
};

// acc[h * a_stride + i] += sum_s p[h * p_stride + s] * v[s][i] for H heads, 16 dims at a
// time: each V vector is loaded (or formed) once for the H heads and 2H independent FMA
// chains hide the FMA latency (attn_accum_f32 has 4). Every element is the same chain of
// FMAs over s in increasing order as attn_accum_f32's, so the results are its bits, for
// any row source that gives the same values.
template <int H, typename Rows>
void accum_heads(const float* p, size_t p_stride, const Rows& v, int64_t n, int32_t hd, float* acc,
                 size_t a_stride) {
  for (int32_t i = 0; i < hd; i += 16) {
    __m256 a[H][2];
    for (int h = 0; h < H; ++h) {
      a[h][0] = _mm256_loadu_ps(acc + h * a_stride + i);
      a[h][1] = _mm256_loadu_ps(acc + h * a_stride + i + 8);
    }
    for (int64_t s = 0; s < n; ++s) {
      __m256 v0, v1;
      v.load(s, i, v0, v1);
      for (int h = 0; h < H; ++h) {
        const __m256 ps = _mm256_broadcast_ss(p + h * p_stride + s);
        a[h][0] = _mm256_fmadd_ps(ps, v0, a[h][0]);
        a[h][1] = _mm256_fmadd_ps(ps, v1, a[h][1]);
      }
    }
    for (int h = 0; h < H; ++h) {
      _mm256_storeu_ps(acc + h * a_stride + i, a[h][0]);
      _mm256_storeu_ps(acc + h * a_stride + i + 8, a[h][1]);
    }
  }
}

// The heads in parts of at most 4, as equal as can be (7 = 4 + 3).
template <typename Rows>
void accum_group(const float* p, size_t p_stride, const Rows& v, int64_t n, int32_t n_heads, int32_t hd,
                 float* acc, size_t a_stride) {
  constexpr int kMaxHeads = 4;
  const int32_t n_parts = (n_heads + kMaxHeads - 1) / kMaxHeads;
  for (int32_t part = 0; part < n_parts; ++part) {
    const int32_t h0 = n_heads * part / n_parts, h1 = n_heads * (part + 1) / n_parts;
    const float* ph = p + h0 * p_stride;
    float* ah = acc + h0 * a_stride;
    switch (h1 - h0) {
      case 1: accum_heads<1>(ph, p_stride, v, n, hd, ah, a_stride); break;
      case 2: accum_heads<2>(ph, p_stride, v, n, hd, ah, a_stride); break;
      case 3: accum_heads<3>(ph, p_stride, v, n, hd, ah, a_stride); break;
      default: accum_heads<4>(ph, p_stride, v, n, hd, ah, a_stride); break;
    }
  }
}

// KernelTable::attn_accum_group_f32 (head_dim % 32 == 0).
void accum_group_f32(const float* p, size_t p_stride, const float* v, int64_t n, int32_t n_heads, int32_t hd,
                     float* acc, size_t a_stride) {
  accum_group(p, p_stride, RowsF32{v, hd}, n, n_heads, hd, acc, a_stride);
}

// KernelTable::attn_values_q8_0 / _q4_0 / _f16: bit for bit dequantize_q8_0 / _q4_0
// (kernels_avx2.cc, the scalar dequantizers' bits) or f16_to_f32, and then accum_group_f32.
template <typename Rows>
void accum_group_q(const float* p, size_t p_stride, const std::byte* v, size_t v_stride, int64_t n,
                   int32_t n_heads, int32_t hd, float* acc, size_t a_stride) {
  accum_group(p, p_stride, Rows{v, v_stride}, n, n_heads, hd, acc, a_stride);
}

}  // namespace

void override_attention_avx2(KernelTable& t) {
  t.attn_accum_group_f32 = &accum_group_f32;
  // Only for the heads of one tile of accum_heads: forming the values again for a second tile
  // costs more than the dequantize pass saves (16 keys x 64 dims in L1 on Zen 4, against
  // dequantize + accum_group_f32, 3 runs: q8_0 1.2-1.4x at 1-4 heads, 0.9-1.07x at 5-8,
  // 0.7-0.8x at 28-56; q4_0 1.15-1.26x at 1 head, 1.0-1.2x at 4, 0.75-0.9x at 5-8).
  t.attn_values_q8_0 = {&accum_group_q<RowsQ8_0>, 4};
  t.attn_values_q4_0 = {&accum_group_q<RowsQ4_0>, 4};
  // f16 rows (widened, no multiply: each tile's values cost one vcvtph2ps per 8), same
  // measurement, best of 5: 1.6x at 1-2 heads, 1.4x at 4, 1.2x at 7-8, 1.01-1.09x at 12-16,
  // 1.04x at 28, 1.02x at 56: never behind, so for every row count a task has.
  t.attn_values_f16 = {&accum_group_q<RowsF16>, 1 << 20};
  t.attn_key_scores_f16 = &key_scores_f16;
  t.attn_key_scores_q8_0 = &key_scores_q<BlockQ8_0>;
  t.attn_key_scores_q4_0 = &key_scores_q<BlockQ4_0>;
}

}  // namespace lumen::kernels
