// AVX-512 K scores for flash attention over an f16 cache (at the end of the file) and, with
// VNNI, over a q8_0 / q4_0 cache
// (KernelTable::attn_key_scores_q8_0 / _q4_0, flash_attention.cc): a GemmFn tile with the
// keys of one cache block as rows and a GQA group's queries (times the tokens of a prefill
// tile) as q8_0 columns. The AVX2 tile (attention_avx2.cc) holds 8 keys a tile and, having
// no unsigned x signed byte product but maddubs, spends a sign operation on every query
// broadcast (q8_0) or an int16 accumulator per query (q4_0). Here 16 keys a tile, one zmm
// lane each, and vpdpbusd: 4 products of a key and a query per lane and instruction.
//
// The operands of vpdpbusd are unsigned x signed bytes, so the keys stay signed (q8_0 its
// quants, q4_0 its nibbles - 8) and the queries are offset to unsigned, u = x + 128:
//   sum_i u_i k_i = sum_i x_i k_i + 128 sum_i k_i
// and the second term, per key and block, comes from the transposed key tile itself (one
// vpdpbusd of a ones vector per key dword, shared by every query). Per block the exact int32
// sum, then
//   score += (float)sumi * (d_k * d_q)      (a separate multiply and add)
// in block order: bit for bit the reference vec_dot, as the AVX2 tile (fp-contract is off
// in this file).
//
// The tile's transpose: zmm z[j] holds the block of key j (low 256 bits) and key j + 4 (high
// 256 bits) for j < 4, keys 8 + j and 12 + j for z[4 + j]; the AVX2 8 x 8 dword transpose's
// in-lane unpacks then work on all four 128-bit lanes at once, and one vshufi64x2 per output
// gathers the four groups of 4 keys in key order:
//   t[s] lane r = dword s (quants 4s .. 4s + 3) of key r's block.
#pragma GCC optimize("fp-contract=off")
#include "kernels/matmul_avx512_common.h"  // first: its GCC 12 warning pragmas (bug 105593)

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "kernels/kernel_table.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

constexpr int kTileKeys = 16;  // keys per tile: one lane each
constexpr int64_t kMaxBlocks = kAttnKeyScoresMaxDim / kQk;
constexpr int64_t kSideCols = 32;  // queries offset to unsigned per pass over the keys
constexpr int kPassCols = 8;       // queries per pass over a key tile (registers: 2 per query)

// A block's 32 quants as signed bytes in element order.
__m256i key_quants(const BlockQ8_0& b) { return load256(b.qs); }
__m256i key_quants(const BlockQ4_0& b) {  // low nibbles are elements 0..15, high nibbles 16..31
  const __m128i lo = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qs));
  const __m256i q = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(lo, 4), lo), _mm256_set1_epi8(15));
  return _mm256_sub_epi8(q, _mm256_set1_epi8(8));
}

// t[s] lane r = dword s of key r, from z as the file comment lays it out.
[[gnu::always_inline]] inline void transpose16x8(const __m512i z[8], __m512i t[8]) {
  __m512i a[8], b[8];
  for (int i = 0; i < 4; ++i) {
    a[2 * i] = _mm512_unpacklo_epi32(z[2 * i], z[2 * i + 1]);
    a[2 * i + 1] = _mm512_unpackhi_epi32(z[2 * i], z[2 * i + 1]);
  }
  for (int i = 0; i < 2; ++i) {  // b[4i + s], each 128-bit lane: dword s (or s + 4) of 4 keys
    b[4 * i + 0] = _mm512_unpacklo_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 1] = _mm512_unpackhi_epi64(a[4 * i], a[4 * i + 2]);
    b[4 * i + 2] = _mm512_unpacklo_epi64(a[4 * i + 1], a[4 * i + 3]);
    b[4 * i + 3] = _mm512_unpackhi_epi64(a[4 * i + 1], a[4 * i + 3]);
  }
  // b[s] lanes: keys 0-3 dword s, 0-3 dword s + 4, 4-7 dword s, 4-7 dword s + 4; b[4 + s]
  // the same for keys 8-15.
  for (int s = 0; s < 4; ++s) {
    t[s] = _mm512_shuffle_i64x2(b[s], b[4 + s], 0x88);      // lanes 0, 2 of each
    t[s + 4] = _mm512_shuffle_i64x2(b[s], b[4 + s], 0xdd);  // lanes 1, 3 of each
  }
}

struct KeyTile {
  __m512i k[kMaxBlocks][8];  // signed quants, transposed
  __m512i corr[kMaxBlocks];  // lane r: 128 * (sum of key r's quants in the block)
  __m512 d[kMaxBlocks];      // lane r: key r's scale
};

// Keys [0, n_keys) of the tile (rows w_stride apart; 1 <= n_keys <= 16; missing keys repeat
// key 0, their lanes are never stored) into tile.
template <typename Block>
void load_tile(const std::byte* w, size_t w_stride, int64_t n_keys, int64_t nb, KeyTile& tile) {
  alignas(64) int32_t off[kTileKeys];  // key r's row, as a byte offset from w
  for (int r = 0; r < kTileKeys; ++r) off[r] = static_cast<int32_t>((r < n_keys ? r : 0) * w_stride);
  const __m512i row_off = _mm512_load_si512(off);
  const __m512i ones = _mm512_set1_epi8(1);
  for (int64_t b = 0; b < nb; ++b) {
    const std::byte* wb = w + b * sizeof(Block);
    auto quants = [&](int r) { return key_quants(*reinterpret_cast<const Block*>(wb + off[r])); };
    __m512i z[8];
    for (int j = 0; j < 4; ++j) {
      z[j] = _mm512_inserti64x4(_mm512_castsi256_si512(quants(j)), quants(j + 4), 1);
      z[4 + j] = _mm512_inserti64x4(_mm512_castsi256_si512(quants(8 + j)), quants(12 + j), 1);
    }
    transpose16x8(z, tile.k[b]);
    __m512i sum = _mm512_setzero_si512();
    for (int s = 0; s < 8; ++s) sum = _mm512_dpbusd_epi32(sum, ones, tile.k[b][s]);
    tile.corr[b] = _mm512_slli_epi32(sum, 7);
    // The scales: a dword at the start of every key's block, d in its low half (a gather
    // instead of 16 narrow stores read back wide, which stalls store forwarding).
    const __m512i dd = _mm512_i32gather_epi32(row_off, wb, 1);
    tile.d[b] = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
  }
}

// The queries of a pass: quants offset to unsigned, [kSideCols][kAttnKeyScoresMaxDim], and
// scales [kSideCols][kMaxBlocks].
struct QuerySide {
  alignas(64) uint8_t u[kSideCols][kAttnKeyScoresMaxDim];
  float d[kSideCols][kMaxBlocks];
};

void query_side(const BlockQ8_0* bx, int64_t nb, uint8_t* u, float* d) {
  const __m256i offset = _mm256_set1_epi8(static_cast<char>(0x80));
  for (int64_t b = 0; b < nb; ++b) {
    _mm256_store_si256(reinterpret_cast<__m256i*>(u + b * kQk), _mm256_xor_si256(load256(bx[b].qs), offset));
    d[b] = _cvtsh_ss(bx[b].d_f16);
  }
}

// The scores of the tile's 16 keys (lane r = key r) against NC queries.
template <int NC>
void tile_scores(const KeyTile& tile, int64_t nb, const QuerySide& side, int64_t c0, __m512* out) {
  __m512 acc[NC];
  #pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t b = 0; b < nb; ++b) {
    __m512i sumi[NC];
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) sumi[c] = _mm512_setzero_si512();
    #pragma GCC unroll 8
    for (int s = 0; s < 8; ++s) {
      const __m512i k = tile.k[b][s];
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) sumi[c] = _mm512_dpbusd_epi32(sumi[c], bcast_i32(side.u[c0 + c] + b * kQk + 4 * s), k);
    }
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      const __m512 d = _mm512_mul_ps(tile.d[b], _mm512_set1_ps(side.d[c0 + c][b]));
      const __m512i exact = _mm512_sub_epi32(sumi[c], tile.corr[b]);
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_cvtepi32_ps(exact), d));
    }
  }
  #pragma GCC unroll 8
  for (int c = 0; c < NC; ++c) out[c] = acc[c];
}

template <typename Block>
void key_scores_q(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, const std::byte* x,
                  size_t x_stride, int64_t n_cols, float* y, int64_t y_stride) {
  const int64_t nb = n / kQk;
  KeyTile tile;
  QuerySide side;
  for (int64_t c0 = 0; c0 < n_cols; c0 += kSideCols) {
    const int64_t nc = std::min(kSideCols, n_cols - c0);
    for (int64_t c = 0; c < nc; ++c)
      query_side(reinterpret_cast<const BlockQ8_0*>(x + (c0 + c) * x_stride), nb, side.u[c], side.d[c]);
    for (int64_t r0 = 0; r0 < n_rows; r0 += kTileKeys) {
      const int64_t n_keys = std::min<int64_t>(kTileKeys, n_rows - r0);
      const __mmask16 mask = static_cast<__mmask16>((1u << n_keys) - 1);
      load_tile<Block>(w + r0 * w_stride, w_stride, n_keys, nb, tile);
      // The queries in passes of at most kPassCols, as equal as can be (9 = 5 + 4).
      const int64_t n_passes = (nc + kPassCols - 1) / kPassCols;
      for (int64_t pass = 0; pass < n_passes; ++pass) {
        const int64_t c = nc * pass / n_passes;
        const int n_pass = static_cast<int>(nc * (pass + 1) / n_passes - c);
        __m512 out[kPassCols];
        switch (n_pass) {
          case 1: tile_scores<1>(tile, nb, side, c, out); break;
          case 2: tile_scores<2>(tile, nb, side, c, out); break;
          case 3: tile_scores<3>(tile, nb, side, c, out); break;
          case 4: tile_scores<4>(tile, nb, side, c, out); break;
          case 5: tile_scores<5>(tile, nb, side, c, out); break;
          case 6: tile_scores<6>(tile, nb, side, c, out); break;
          case 7: tile_scores<7>(tile, nb, side, c, out); break;
          default: tile_scores<8>(tile, nb, side, c, out); break;
        }
        for (int j = 0; j < n_pass; ++j) _mm512_mask_storeu_ps(y + (c0 + c + j) * y_stride + r0, mask, out[j]);
      }
    }
  }
}

// ---- f16 keys ------------------------------------------------------------------------------
//
// The tile must give the f16 vec_dot of the AVX-512 table, which is the AVX2 table's
// (kernels_avx2.cc dot_f16 / dot_lanes / hsum) bit for bit: per key four 8-lane f32
// accumulators a0..a3, the dot's 8-element vector v FMA'd into a(v % 4) in order of v, then
//   f = (a0 + a1) + (a2 + a3),  s_j = f_j + f_(j+4),  score = ((s0 + s2) + (s1 + s3)) + 0.0f.
// The AVX2 tile (attention_avx2.cc key_scores_f16) runs those chains key by key in 8-lane
// registers and reloads every query vector for every key; here a zmm holds the same 8-lane
// vector of two keys (low half key 2p, high half key 2p + 1) against the query vector in
// both halves, so each lane runs exactly the AVX2 chain, two keys per instruction, and the
// horizontal sums of 8 keys come out of 4 registers with cross-key shuffles.
constexpr int kF16TileKeys = 8;             // 4 pairs
constexpr int64_t kF16Cols = 8;             // queries widened per pass
constexpr int kF16SliceVecs = 8;            // 8-lane vectors of a key slice held in registers (64 dims)
constexpr int64_t kF16MaxVecs = kAttnKeyScoresMaxDim / 8;

// The 8 scores of 4 pair registers (F[p]: key 2p low, 2p + 1 high), lane r = key r, with
// dot_lanes' reduction (see above).
[[gnu::always_inline]] inline __m256 pair_sums8(const __m512* f) {
  auto reduce = [](__m512 a, __m512 b) {  // keys 2i, 2i + 1 of a, and of b, one per 128-bit lane
    const __m512 x = _mm512_add_ps(_mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm512_shuffle_f32x4(a, b, _MM_SHUFFLE(3, 1, 3, 1)));  // s0..s3
    const __m512 y = _mm512_add_ps(x, _mm512_permute_ps(x, _MM_SHUFFLE(1, 0, 3, 2)));     // s0 + s2, s1 + s3
    return _mm512_add_ps(y, _mm512_movehdup_ps(y));                                         // lane 4k: the sum
  };
  const __m512 z02 = reduce(f[0], f[2]);  // keys 0, 1, 4, 5 at lanes 0, 4, 8, 12
  const __m512 z13 = reduce(f[1], f[3]);  // keys 2, 3, 6, 7
  const __m512i order = _mm512_setr_epi32(0, 4, 16, 20, 8, 12, 24, 28, 0, 0, 0, 0, 0, 0, 0, 0);
  return _mm256_add_ps(_mm512_castps512_ps256(_mm512_permutex2var_ps(z02, order, z13)), _mm256_setzero_ps());
}

// One slice of SV vectors (from vector v0) of the pair (k0, k1) against queries [0, nc):
// the chains start at zero (first) or from acc, and end in f[c][p] (last) or acc.
template <int SV>
[[gnu::always_inline]] inline void pair_slice(const uint16_t* k0, const uint16_t* k1, int64_t v0, bool first,
                                              bool last, const __m512* qf, int64_t nv, int64_t nc,
                                              __m512 (*acc)[4], __m512 (*f)[4], int p) {
  __m512 kv[SV];
  #pragma GCC unroll 8
  for (int v = 0; v < SV; ++v)
    kv[v] = _mm512_cvtph_ps(
        _mm256_inserti128_si256(_mm256_castsi128_si256(load128(k0 + 8 * (v0 + v))), load128(k1 + 8 * (v0 + v)), 1));
  for (int64_t c = 0; c < nc; ++c) {
    __m512 a[4];
    #pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) a[j] = first ? _mm512_setzero_ps() : acc[c][j];
    #pragma GCC unroll 8
    for (int v = 0; v < SV; ++v)
      a[v % 4] = _mm512_fmadd_ps(kv[v], qf[c * nv + v0 + v], a[v % 4]);
    if (last) {
      f[c][p] = _mm512_add_ps(_mm512_add_ps(a[0], a[1]), _mm512_add_ps(a[2], a[3]));
    } else {
      #pragma GCC unroll 4
      for (int j = 0; j < 4; ++j) acc[c][j] = a[j];
    }
  }
}

void key_scores_f16(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, const std::byte* x,
                    size_t x_stride, int64_t n_cols, float* y, int64_t y_stride) {
  const int64_t nv = n / 8;  // n % 32 == 0 (kernel_table.h): nv % 4 == 0
  // Query c's vector v in both halves at qf[c * nv + v] (packed: rows kF16MaxVecs apart would
  // put every query's first vectors 4 KiB apart, in the same L1 sets).
  __m512 qf[kF16Cols * kF16MaxVecs];
  __m512 acc[kF16Cols][4];  // the chains, between slices (head dims over 64)
  __m512 f[kF16Cols][4];    // per query, the 4 pairs' combined accumulators
  for (int64_t c0 = 0; c0 < n_cols; c0 += kF16Cols) {
    const int64_t nc = std::min(kF16Cols, n_cols - c0);
    for (int64_t c = 0; c < nc; ++c) {  // widened once (exact)
      const auto* q16 = reinterpret_cast<const uint16_t*>(x + (c0 + c) * x_stride);
      for (int64_t v = 0; v < nv; ++v) qf[c * nv + v] = _mm512_cvtph_ps(_mm256_broadcastsi128_si256(load128(q16 + 8 * v)));
    }
    for (int64_t r0 = 0; r0 < n_rows; r0 += kF16TileKeys) {
      const int64_t n_keys = std::min<int64_t>(kF16TileKeys, n_rows - r0);
      for (int p = 0; p < kF16TileKeys / 2; ++p) {
        // Missing keys repeat the last one; their lanes are never stored.
        const auto* k0 = reinterpret_cast<const uint16_t*>(w + (r0 + std::min<int64_t>(2 * p, n_keys - 1)) * w_stride);
        const auto* k1 = reinterpret_cast<const uint16_t*>(w + (r0 + std::min<int64_t>(2 * p + 1, n_keys - 1)) * w_stride);
        for (int64_t v0 = 0; v0 < nv; v0 += kF16SliceVecs) {
          const bool first = v0 == 0, last = v0 + kF16SliceVecs >= nv;
          if (nv - v0 >= kF16SliceVecs) pair_slice<kF16SliceVecs>(k0, k1, v0, first, last, qf, nv, nc, acc, f, p);
          else pair_slice<4>(k0, k1, v0, first, last, qf, nv, nc, acc, f, p);  // the last 32 dims
        }
      }
      const __mmask8 mask = static_cast<__mmask8>((1u << n_keys) - 1);
      for (int64_t c = 0; c < nc; ++c) _mm256_mask_storeu_ps(y + (c0 + c) * y_stride + r0, mask, pair_sums8(f[c]));
    }
  }
}

}  // namespace

void override_attention_keys_avx512(KernelTable& t) {
  t.attn_key_scores_f16 = &key_scores_f16;
  t.attn_key_scores_q8_0 = &key_scores_q<BlockQ8_0>;
  t.attn_key_scores_q4_0 = &key_scores_q<BlockQ4_0>;
}

}  // namespace lumen::kernels
