// AVX-512 VNNI matmul kernels for the quantized weight types (q8_0, q4_0, q5_0, q4_1, q5_1,
// iq4_nl, q4_K, q6_K, and q5_K's panels; the 256-element i-quants use its panels from
// kernels_iq_avx512.cc).
// Compiled with the AVX-512 flags (cmake/lumen.cmake); only reached through the table when
// cpu_features().has_avx512_vnni(). Internal linkage only (see quant_blocks.h).
//
// Two shapes of work, one arithmetic:
//
//   decode (gemm tiles, few activation rows)   16 weight rows at a time, streamed from the
//       mmapped file in their GGUF layout. Each row's exact integer block dot is formed in
//       vector lanes, then the 16 rows are reduced together so that lane r holds row r.
//   prefill (panel gemm, many activation rows) 16 weight rows repacked into a panel whose
//       vectors hold 4 consecutive elements of each of the 16 rows; one vpdpbusd with a
//       broadcast activation dword then advances all 16 rows at once (64 MACs).
//
// Either way lane r of a 16-lane f32 accumulator is row r, and it is updated once per block
// in block order with exactly the scalar reference's operations:
//
//   q8_0 / q4_0:  sumf += (float)sumi * (d_w * d_x)
//   q4_1, q5_1:   acc += (d_w * d_x) * (float)sumi;  acc_m += m_w * s_x;  result acc + acc_m
//                 (activations in q8_1: s_x = fp16(d_x * sum(q_x)), stored in the block)
//   q4_K, q5_K:   acc += (d_x * d_w) * (float)sumi;  acc_m += (-d_x * dmin_w) * (float)summ;
//                 result acc + acc_m
//   q6_K:         acc += (d_x * d_w) * (float)sumi
//
// with every sumi / summ an exact int32. So this table's vec_dot, gemm and panel gemm agree
// with the scalar reference bit for bit (no FMA: the reference rounds the product).
//
// vpdpbusd multiplies unsigned by signed bytes. Weights go in unsigned with an offset
// (q4_0: q in 0..15, w = q - 8; q5_0: q in 0..31, w = q - 16; q8_0: u = q ^ 0x80, w = u - 128;
// iq4_nl: u = value + 128, w = u - 128; q6_K: q in 0..63, w = q - 32), activations signed;
// the offset times the activation sum is folded in as an integer correction (initial
// accumulator value), so every block sum stays exact. q4_1 / q5_1 quants are unsigned
// already (q in 0..15 / 0..31, w = d * q + m): their sums start at 0, and the min is the
// float term m_w * s_x above.
#include "kernels/matmul_avx512_common.h"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

#include "kernels/isa_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

constexpr int kMaxDecodeCols = 4;

// The 16-bit (or 32-bit) value at byte `off` of each row of a group, lane r = row r.
// Scalar loads packed in general registers: they run on the integer pipes, beside the
// vector work. (vpgatherdd measured ~10-20 cycles per call on Zen 4 and masked
// single-element loads were slower still: either cost q4_0 decode over a quarter of its
// time.)
[[gnu::always_inline]] inline uint64_t ld16(const std::byte* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
[[gnu::always_inline]] inline uint64_t ld32(const std::byte* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
template <typename Rows>
[[gnu::always_inline]] inline __m256i load_row_halves(const Rows& g, size_t off) {
  uint64_t q[4];
  #pragma GCC unroll 4
  for (int c = 0; c < 4; ++c)
    q[c] = ld16(g.at(4 * c, off)) | ld16(g.at(4 * c + 1, off)) << 16 | ld16(g.at(4 * c + 2, off)) << 32 |
           ld16(g.at(4 * c + 3, off)) << 48;
  return _mm256_set_epi64x(static_cast<int64_t>(q[3]), static_cast<int64_t>(q[2]), static_cast<int64_t>(q[1]),
                           static_cast<int64_t>(q[0]));
}
template <typename Rows>
[[gnu::always_inline]] inline __m512i load_row_dwords(const Rows& g, size_t off) {
  uint64_t q[8];
  #pragma GCC unroll 8
  for (int c = 0; c < 8; ++c) q[c] = ld32(g.at(2 * c, off)) | ld32(g.at(2 * c + 1, off)) << 32;
  return _mm512_set_epi64(static_cast<int64_t>(q[7]), static_cast<int64_t>(q[6]), static_cast<int64_t>(q[5]),
                          static_cast<int64_t>(q[4]), static_cast<int64_t>(q[3]), static_cast<int64_t>(q[2]),
                          static_cast<int64_t>(q[1]), static_cast<int64_t>(q[0]));
}
// fp16 at byte `off` of each row, as f32.
template <typename Rows>
[[gnu::always_inline]] inline __m512 load_row_f16(const Rows& g, size_t off) {
  return _mm512_cvtph_ps(load_row_halves(g, off));
}

// ---- reductions: 16 rows' partial int32 lanes -> one lane per row -----------------------
//
// sum4: per 128-bit lane, [a0+a2, b0+b2, a1+a3, b1+b3]; sum4x2 of two such results: per
// 128-bit lane, [sum a, sum b, sum c, sum d] (a, b from t0; c, d from t1).
__m512i sum4(__m512i a, __m512i b) {
  return _mm512_add_epi32(_mm512_unpacklo_epi32(a, b), _mm512_unpackhi_epi32(a, b));
}
__m512i sum4x2(__m512i t0, __m512i t1) {
  return _mm512_add_epi32(_mm512_unpacklo_epi64(t0, t1), _mm512_unpackhi_epi64(t0, t1));
}

// v[j] holds two rows, A and B, 8 lanes each: v[j] for j < 4 has rows (j, j + 4), v[4 + j]
// rows (8 + j, 12 + j). kSplit false: A in 128-bit lanes 0-1 and B in 2-3; true: A in 0 and
// 2, B in 1 and 3 (the q4_0 nibble layout). Returns lane r = sum of row r's 8 lanes.
template <bool kSplit>
__m512i reduce_pairs(const __m512i v[8]) {
  const __m512i u0 = sum4x2(sum4(v[0], v[1]), sum4(v[2], v[3]));
  const __m512i u1 = sum4x2(sum4(v[4], v[5]), sum4(v[6], v[7]));
  // u: 128-bit lane L = [v0.L, v1.L, v2.L, v3.L] (each a lane's total).
  constexpr int kLo = kSplit ? _MM_SHUFFLE(1, 0, 1, 0) : _MM_SHUFFLE(2, 0, 2, 0);
  constexpr int kHi = kSplit ? _MM_SHUFFLE(3, 2, 3, 2) : _MM_SHUFFLE(3, 1, 3, 1);
  return _mm512_add_epi32(_mm512_shuffle_i32x4(u0, u1, kLo), _mm512_shuffle_i32x4(u0, u1, kHi));
}

// z[k] holds rows k, 4 + k, 8 + k, 12 + k in its four 128-bit lanes (4 lanes each).
__m512i reduce_quads(const __m512i z[4]) { return sum4x2(sum4(z[0], z[1]), sum4(z[2], z[3])); }

__m512i pair256(__m256i a, __m256i b) {
  return _mm512_inserti64x4(_mm512_castsi256_si512(a), b, 1);
}
__m512i quad128(__m128i a, __m128i b, __m128i c, __m128i d) {
  const __m256i lo = _mm256_inserti128_si256(_mm256_castsi128_si256(a), b, 1);
  const __m256i hi = _mm256_inserti128_si256(_mm256_castsi128_si256(c), d, 1);
  return pair256(lo, hi);
}

// Row r of a decode group: the pair slot it takes in reduce_pairs.
constexpr int kPairRowA[8] = {0, 1, 2, 3, 8, 9, 10, 11};
constexpr int kPairRowB[8] = {4, 5, 6, 7, 12, 13, 14, 15};

// The rows of a decode group, as the kernels address them: at(r, off) is byte `off` of
// row r. A full group of 16 rows is base + r * stride (a few registers and addressing
// modes: 16 separate row pointers do not fit the 15 usable general registers and were
// shuttled through vector registers on every block). A short group (the matrix's last,
// when n_out % 16 != 0) repeats its last row so that nothing past the matrix is read;
// the repeated lanes are computed and dropped.
//
// RowsStrided spells every row as base + index * {1, 2, 4, 8} from four bases (rows 0, 5,
// 10, 15) and two opaque index registers (stride, 3 * stride), so the compiler keeps six
// registers instead of materialising sixteen pointers.
struct RowsStrided {
  static constexpr bool kPrefetch = true;
  const std::byte* b[4];  // rows 0, 5, 10, 15
  size_t s, s3;           // stride, 3 * stride
  const std::byte* next;   // the next group's rows (contiguous: 16 * stride bytes)
  RowsStrided(const std::byte* base, size_t stride) {
    next = base + kRows * stride;
    s = stride;
    s3 = 3 * stride;
    asm("" : "+r"(s), "+r"(s3));  // keep them as index registers, not folded constants
    for (int k = 0; k < 4; ++k) b[k] = base + 5 * k * stride;
  }
  [[gnu::always_inline]] const std::byte* at(int r, size_t off) const {
    switch (r) {
      case 0: return b[0] + off;
      case 1: return b[0] + off + s;
      case 2: return b[0] + off + 2 * s;
      case 3: return b[0] + off + s3;
      case 4: return b[0] + off + 4 * s;
      case 5: return b[1] + off;
      case 6: return b[0] + off + 2 * s3;
      case 7: return b[1] + off + 2 * s;
      case 8: return b[0] + off + 8 * s;
      case 9: return b[1] + off + 4 * s;
      case 10: return b[2] + off;
      case 11: return b[2] + off + s;
      case 12: return b[0] + off + 4 * s3;
      case 13: return b[1] + off + 8 * s;
      case 14: return b[2] + off + 4 * s;
      default: return b[3] + off;
    }
  }
};
// Streaming from memory, 16 rows read side by side are 16 interleaved streams that the
// hardware prefetchers follow poorly (measured: a 76 MB lm_head streamed at ~5 GB/s per
// core). So while a group is computed, the next group's bytes (the same amount, contiguous)
// are prefetched linearly, `bytes` per block step: one group ahead. Into L1 when two groups
// fit there with room to spare, else into L2 (measured on Zen 4, 1 core: q4_0 896-wide rows
// (8 KiB groups) 14 GB/s with L1 prefetches vs 10 with L2; 2048-wide q4_K (18 KiB groups)
// 7 vs 13).
inline constexpr size_t kLine = 64;
inline constexpr size_t kMaxL1PrefetchGroupBytes = 12 * 1024;
template <typename Rows>
[[gnu::always_inline]] inline void prefetch_next(const Rows& g, int64_t ib, size_t bytes) {
  if constexpr (Rows::kPrefetch) {
    const std::byte* p = g.next + ib * bytes;
    if (g.s * kRows <= kMaxL1PrefetchGroupBytes) {
      for (size_t off = 0; off < bytes; off += kLine) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T0);
    } else {
      for (size_t off = 0; off < bytes; off += kLine) _mm_prefetch(reinterpret_cast<const char*>(p + off), _MM_HINT_T1);
    }
  }
}

struct RowsClamped {
  static constexpr bool kPrefetch = false;
  const std::byte* row[kRows];
  const std::byte* next = nullptr;
  [[gnu::always_inline]] const std::byte* at(int r, size_t off) const { return row[r] + off; }
};
RowsClamped rows_clamped(const std::byte* w, size_t w_stride, int64_t n_rows) {
  RowsClamped g;
  for (int r = 0; r < kRows; ++r) g.row[r] = w + (r < n_rows ? r : n_rows - 1) * w_stride;
  return g;
}

// ---- q8_0 / q4_0 decode ----------------------------------------------------------------

// A format: Block (the weight block), Act (the activation block: q8_0, or q8_1 for the
// types with a min), kSplit (the lane layout of unsigned_pair, see reduce_pairs), kMin
// (w = d * q + m with q unsigned: no offset, and the min term m_w * s_x per block) or
// kOffsetShift (w = u - (1 << kOffsetShift)).
struct Q8_0Fmt {
  using Block = BlockQ8_0;
  using Act = BlockQ8_0;
  static constexpr bool kSplit = false;
  static constexpr bool kMin = false;
  static constexpr int kOffsetShift = 7;  // w = u - 128
  // Rows A and B of one block as unsigned bytes: [A (32) | B (32)].
  static __m512i unsigned_pair(const Block& a, const Block& b) {
    return _mm512_xor_si512(pair256(load256(a.qs), load256(b.qs)), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  // The activation block laid out to meet unsigned_pair: [x | x].
  static __m512i act(const BlockQ8_0& x) { return _mm512_broadcast_i64x4(load256(x.qs)); }
};

struct Q4_0Fmt {
  using Block = BlockQ4_0;
  using Act = BlockQ8_0;
  static constexpr bool kSplit = true;
  static constexpr bool kMin = false;
  static constexpr int kOffsetShift = 3;  // w = q - 8
  // [A 0..15 | B 0..15 | A 16..31 | B 16..31] (low nibbles, then high nibbles); B: any
  // block with q4_0's qs (q4_1).
  template <typename B>
  static __m512i unsigned_pair(const B& a, const B& b) {
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(a.qs)), load128(b.qs), 1);
    return _mm512_and_si512(pair256(q, _mm256_srli_epi16(q, 4)), _mm512_set1_epi8(15));
  }
  // [x 0..15 | x 0..15 | x 16..31 | x 16..31] (X: q8_0 or q8_1).
  template <typename X>
  static __m512i act(const X& x) {
    const __m512i z = _mm512_castsi256_si512(load256(x.qs));
    return _mm512_shuffle_i64x2(z, z, _MM_SHUFFLE(1, 1, 0, 0));
  }
};

struct Q5_0Fmt {
  using Block = BlockQ5_0;
  using Act = BlockQ8_0;
  static constexpr bool kSplit = true;
  static constexpr bool kMin = false;
  static constexpr int kOffsetShift = 4;  // w = q - 16
  // Q4_0Fmt's layout with the fifth bits added: [A 0..15 | B 0..15 | A 16..31 | B 16..31];
  // B: any block with q5_0's qh and qs (q5_1).
  template <typename B>
  static __m512i unsigned_pair(const B& a, const B& b) {
    uint32_t ha, hb;
    std::memcpy(&ha, a.qh, 4);
    std::memcpy(&hb, b.qh, 4);
    const uint64_t bits = (ha & 0xffffu) | uint64_t{hb & 0xffffu} << 16 | uint64_t{ha >> 16} << 32 | uint64_t{hb >> 16} << 48;
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(a.qs)), load128(b.qs), 1);
    const __m512i nib = _mm512_and_si512(pair256(q, _mm256_srli_epi16(q, 4)), _mm512_set1_epi8(15));
    return _mm512_or_si512(nib, _mm512_maskz_mov_epi8(bits, _mm512_set1_epi8(16)));
  }
  static __m512i act(const BlockQ8_0& x) { return Q4_0Fmt::act(x); }
};

// q4_1 / q5_1 (w = d * q + m): Base's quants (q4_0's, q5_0's), which are the unsigned
// values themselves, against q8_1 activations.
template <typename Base, typename B>
struct MinFmt {
  using Block = B;
  using Act = BlockQ8_1;
  static constexpr bool kSplit = Base::kSplit;
  static constexpr bool kMin = true;
  static __m512i unsigned_pair(const Block& a, const Block& b) { return Base::unsigned_pair(a, b); }
  static __m512i act(const Act& x) { return Q4_0Fmt::act(x); }
};
using Q4_1Fmt = MinFmt<Q4_0Fmt, BlockQ4_1>;
using Q5_1Fmt = MinFmt<Q5_0Fmt, BlockQ5_1>;

struct IQ4_NLFmt {
  using Block = BlockIQ4_NL;
  using Act = BlockQ8_0;
  static constexpr bool kSplit = true;
  static constexpr bool kMin = false;
  static constexpr int kOffsetShift = 7;  // u = value + 128
  // kIq4nlValues + 128 as unsigned bytes, in every 128-bit lane (a vpshufb table).
  static __m512i table() {
    return _mm512_xor_si512(_mm512_broadcast_i32x4(load128(kIq4nlValues)), _mm512_set1_epi8(static_cast<char>(0x80)));
  }
  // The codes in Q4_0Fmt's layout, each replaced by its value + 128.
  static __m512i unsigned_pair(const Block& a, const Block& b) {
    const __m256i q = _mm256_inserti128_si256(_mm256_castsi128_si256(load128(a.qs)), load128(b.qs), 1);
    const __m512i codes = _mm512_and_si512(pair256(q, _mm256_srli_epi16(q, 4)), _mm512_set1_epi8(15));
    return _mm512_shuffle_epi8(table(), codes);
  }
  static __m512i act(const BlockQ8_0& x) { return Q4_0Fmt::act(x); }
};

// y[c * y_stride + r] for the rows of `g` (mask: valid rows) and NC activation rows.
// Fmt::kMin (q4_1 / q5_1): the block sums start at 0 (no offset), and acc_m += m_w * s_x per
// block beside acc; the result is acc + acc_m, as the reference.
template <typename Fmt, int NC, typename Rows>
void decode_group_q8(int64_t nb, const Rows& g, __mmask16 mask, const std::byte* x, size_t xs,
                     float* y, int64_t y_stride) {
  using Block = typename Fmt::Block;
  using Act = typename Fmt::Act;
  [[maybe_unused]] const __m512i ones = _mm512_set1_epi8(1);
  __m512 acc[NC], acc_m[NC];
  #pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    prefetch_next(g, ib, kRows * sizeof(Block));
    __m512i u[8];
    #pragma GCC unroll 8
    for (int j = 0; j < 8; ++j) {
      const Block& a = *reinterpret_cast<const Block*>(g.at(kPairRowA[j], ib * sizeof(Block)));
      const Block& b = *reinterpret_cast<const Block*>(g.at(kPairRowB[j], ib * sizeof(Block)));
      u[j] = Fmt::unsigned_pair(a, b);
    }
    __m512 dw;
    [[maybe_unused]] __m512 mw;
    if constexpr (Fmt::kMin) {
      // d and m are the block's first two fp16: one dword per row.
      static_assert(offsetof(Block, d_f16) == 0 && offsetof(Block, m_f16) == 2);
      const __m512i dm = load_row_dwords(g, ib * sizeof(Block));
      dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dm));
      mw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dm, 16)));
    } else {
      dw = load_row_f16(g, ib * sizeof(Block) + offsetof(Block, d_f16));
    }
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) {
      const Act& bx = reinterpret_cast<const Act*>(x + c * xs)[ib];
      const __m512i xv = Fmt::act(bx);
      __m512i start = _mm512_setzero_si512();
      if constexpr (!Fmt::kMin) {
        // Per lane: -offset * (sum of the 4 activation bytes the lane multiplies).
        start = _mm512_sub_epi32(start, _mm512_slli_epi32(_mm512_dpbusd_epi32(_mm512_setzero_si512(), ones, xv),
                                                          Fmt::kOffsetShift));
      }
      __m512i s[8];
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) s[j] = _mm512_dpbusd_epi32(start, u[j], xv);
      const __m512 sumi = _mm512_cvtepi32_ps(reduce_pairs<Fmt::kSplit>(s));
      const __m512 d = _mm512_mul_ps(dw, _mm512_set1_ps(f16(bx.d_f16)));
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(sumi, d));
      if constexpr (Fmt::kMin) acc_m[c] = _mm512_add_ps(acc_m[c], _mm512_mul_ps(mw, _mm512_set1_ps(f16(bx.s_f16))));
    }
  }
  #pragma GCC unroll 4
  for (int c = 0; c < NC; ++c)
    _mm512_mask_storeu_ps(y + c * y_stride, mask, Fmt::kMin ? _mm512_add_ps(acc[c], acc_m[c]) : acc[c]);
}

// ---- q4_K / q6_K decode: per-row integer partials, reduced 16 rows at a time -----------

// The 8 scales and mins of a q4_K block, and its integer partials against one q8_K block:
//   sumi lanes: sum_s sc[s] * (q4 . q8 over sub-block s), spread over 8 int32 lanes
//   summ lanes: sum_s m[s] * (sum of q8 over sub-block s), over 4 int32 lanes
struct Q4_KRow {
  __m256i sumi;
  __m128i summ;
};

[[gnu::always_inline]] inline Q4_KRow q4_k_partials(const BlockQ4_K& b, const BlockQ8_K& x) {
  uint8_t sc[8], mn[8];
  unpack_q4_k_scales(b.scales, sc, mn);
  uint64_t sc8, mn8;
  std::memcpy(&sc8, sc, 8);
  std::memcpy(&mn8, mn, 8);
  // Each scale as a pair of int16 (sc, sc), one dword per sub-block, stored by scalar
  // stores so that vpdpwssd can take it as a broadcast memory operand (store-to-load
  // forwarding of the same size): no shuffle per sub-block.
  // 8 int16 scales in both 128-bit lanes; vpshufb broadcasts one of them per sub-block.
  const __m256i scw = _mm256_broadcastsi128_si256(_mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(sc8))));
  const __m256i m4 = _mm256_set1_epi8(15);
  __m256i acc = _mm256_setzero_si256();
  #pragma GCC unroll 4
  for (int c = 0; c < 4; ++c) {
    // Low nibbles: sub-block 2c (elements 64c ..), high nibbles: sub-block 2c + 1.
    const __m256i q = load256(b.qs + 32 * c);
    const __m256i lo = _mm256_and_si256(q, m4);
    const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
    const __m256i pl = _mm256_maddubs_epi16(lo, load256(x.qs + 64 * c));
    const __m256i ph = _mm256_maddubs_epi16(hi, load256(x.qs + 64 * c + 32));
    const __m256i sl = _mm256_shuffle_epi8(scw, _mm256_set1_epi16(static_cast<int16_t>(0x0100 * (4 * c + 1) + 4 * c)));
    const __m256i sh = _mm256_shuffle_epi8(scw, _mm256_set1_epi16(static_cast<int16_t>(0x0100 * (4 * c + 3) + 4 * c + 2)));
    acc = _mm256_dpwssd_epi32(acc, pl, sl);
    acc = _mm256_dpwssd_epi32(acc, ph, sh);
  }
  Q4_KRow out;
  out.sumi = acc;
  const __m128i mins = _mm_cvtepu8_epi16(_mm_cvtsi64_si128(static_cast<int64_t>(mn8)));
  const __m128i q8s = _mm_hadd_epi16(load128(x.bsums), load128(x.bsums + 8));
  out.summ = _mm_madd_epi16(mins, q8s);
  return out;
}

// sumi lanes of a q6_K block against one q8_K block: sum_s scales[s] * ((q6 - 32) . q8).
[[gnu::always_inline]] inline __m256i q6_k_partials(const BlockQ6_K& b, const BlockQ8_K& x) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i scales16 = _mm256_cvtepi8_epi16(load128(b.scales));
  __m256i sumi = _mm256_setzero_si256();
  #pragma GCC unroll 2
  for (int h = 0; h < 2; ++h) {
    const uint8_t* ql = b.ql + 64 * h;
    const __m256i l1 = load256(ql), l2 = load256(ql + 32), hb = load256(b.qh + 32 * h);
    // The scales of this half as int16: even sub-blocks in the low lane, odd in the high.
    const __m256i w = _mm256_cvtepi8_epi16(_mm_shuffle_epi8(
        load128(b.scales), _mm_setr_epi8(8 * h, 8 * h + 2, 8 * h + 4, 8 * h + 6, 0, 0, 0, 0,
                                         8 * h + 1, 8 * h + 3, 8 * h + 5, 8 * h + 7, 0, 0, 0, 0)));
    __m256i q[4];
    q[0] = _mm256_or_si256(_mm256_and_si256(l1, m4), _mm256_slli_epi16(_mm256_and_si256(hb, m2), 4));
    q[1] = _mm256_or_si256(_mm256_and_si256(l2, m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 2), m2), 4));
    q[2] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l1, 4), m4), _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 4), m2), 4));
    q[3] = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(l2, 4), m4), _mm256_and_si256(_mm256_srli_epi16(hb, 2), _mm256_set1_epi8(0x30)));
    #pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {

      // int16 lanes 0..7: scales[s], 8..15: scales[s + 1] (element k of each lane of w).
      const __m256i sv = _mm256_shuffle_epi8(w, _mm256_set1_epi16(static_cast<int16_t>(0x0100 * (2 * k + 1) + 2 * k)));
      const __m256i p = _mm256_maddubs_epi16(q[k], load256(x.qs + 128 * h + 32 * k));
      sumi = _mm256_dpwssd_epi32(sumi, sv, p);
    }
  }
  // The -32 offset: 32 * sum_s scales[s] * bsums[s].
  const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(x.bsums), scales16), 5);
  return _mm256_sub_epi32(sumi, offset);
}

template <int NC, typename Rows>
void decode_group_q4_k(int64_t nb, const Rows& g, __mmask16 mask, const std::byte* x, size_t xs,
                       float* y, int64_t y_stride) {
  __m512 acc[NC], acc_m[NC];
  #pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    prefetch_next(g, ib, kRows * sizeof(BlockQ4_K));
    // d and dmin are the first two fp16 of the block.
    const __m512i dd = load_row_dwords(g, ib * sizeof(BlockQ4_K));
    const __m512 dw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(dd));
    const __m512 dminw = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(_mm512_srli_epi32(dd, 16)));
    #pragma GCC unroll 1
    for (int c = 0; c < NC; ++c) {
      const BlockQ8_K& bx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib];
      __m512i v[8];
      __m128i m[kRows];
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        const Q4_KRow a = q4_k_partials(*reinterpret_cast<const BlockQ4_K*>(g.at(kPairRowA[j], ib * sizeof(BlockQ4_K))), bx);
        const Q4_KRow b = q4_k_partials(*reinterpret_cast<const BlockQ4_K*>(g.at(kPairRowB[j], ib * sizeof(BlockQ4_K))), bx);
        v[j] = pair256(a.sumi, b.sumi);
        m[kPairRowA[j]] = a.summ;
        m[kPairRowB[j]] = b.summ;
      }
      __m512i z[4];
      #pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) z[k] = quad128(m[k], m[4 + k], m[8 + k], m[12 + k]);
      const __m512 sumi = _mm512_cvtepi32_ps(reduce_pairs<false>(v));
      const __m512 summ = _mm512_cvtepi32_ps(reduce_quads(z));
      const __m512 dx = _mm512_set1_ps(bx.d);
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(dx, dw), sumi));
      const __m512 ndx = _mm512_set1_ps(-bx.d);
      acc_m[c] = _mm512_add_ps(acc_m[c], _mm512_mul_ps(_mm512_mul_ps(ndx, dminw), summ));
    }
  }
  #pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(y + c * y_stride, mask, _mm512_add_ps(acc[c], acc_m[c]));
}

template <int NC, typename Rows>
void decode_group_q6_k(int64_t nb, const Rows& g, __mmask16 mask, const std::byte* x, size_t xs,
                       float* y, int64_t y_stride) {
  __m512 acc[NC];
  #pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    prefetch_next(g, ib, kRows * sizeof(BlockQ6_K));
    const __m512 dw = load_row_f16(g, ib * sizeof(BlockQ6_K) + offsetof(BlockQ6_K, d_f16));
    #pragma GCC unroll 1
    for (int c = 0; c < NC; ++c) {
      const BlockQ8_K& bx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib];
      __m512i v[8];
      #pragma GCC unroll 8
      for (int j = 0; j < 8; ++j) {
        v[j] = pair256(q6_k_partials(*reinterpret_cast<const BlockQ6_K*>(g.at(kPairRowA[j], ib * sizeof(BlockQ6_K))), bx),
                       q6_k_partials(*reinterpret_cast<const BlockQ6_K*>(g.at(kPairRowB[j], ib * sizeof(BlockQ6_K))), bx));
      }
      const __m512 sumi = _mm512_cvtepi32_ps(reduce_pairs<false>(v));
      acc[c] = _mm512_add_ps(acc[c], _mm512_mul_ps(_mm512_mul_ps(_mm512_set1_ps(bx.d), dw), sumi));
    }
  }
  #pragma GCC unroll 4
  for (int c = 0; c < NC; ++c) _mm512_mask_storeu_ps(y + c * y_stride, mask, acc[c]);
}

// The gemm tile entry (and vec_dot) from a group kernel: 16 rows x up to 4 columns at a time.
template <template <int> class Group, typename Rows>
void gemm_group_cols(int64_t nb, const Rows& g, __mmask16 mask, const std::byte* x, size_t x_stride,
                     int64_t n_cols, float* y, int64_t y_stride) {
  int64_t c0 = 0;
  for (; c0 + kMaxDecodeCols <= n_cols; c0 += kMaxDecodeCols)
    Group<kMaxDecodeCols>::run(nb, g, mask, x + c0 * x_stride, x_stride, y + c0 * y_stride, y_stride);
  const std::byte* xc = x + c0 * x_stride;
  float* yc = y + c0 * y_stride;
  switch (n_cols - c0) {
    case 3: Group<3>::run(nb, g, mask, xc, x_stride, yc, y_stride); break;
    case 2: Group<2>::run(nb, g, mask, xc, x_stride, yc, y_stride); break;
    case 1: Group<1>::run(nb, g, mask, xc, x_stride, yc, y_stride); break;
    default: break;
  }
}

template <template <int> class Group>
void gemm_groups(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, const std::byte* x,
                 size_t x_stride, int64_t n_cols, float* y, int64_t y_stride) {
  const int64_t nb = n / Group<1>::kBlock;
  int64_t r0 = 0;
  for (; r0 + kRows <= n_rows; r0 += kRows) {
    const RowsStrided g(w + r0 * w_stride, w_stride);
    gemm_group_cols<Group>(nb, g, static_cast<__mmask16>(0xffff), x, x_stride, n_cols, y + r0, y_stride);
  }
  if (r0 < n_rows) {
    const RowsClamped g = rows_clamped(w + r0 * w_stride, w_stride, n_rows - r0);
    gemm_group_cols<Group>(nb, g, row_mask(n_rows - r0), x, x_stride, n_cols, y + r0, y_stride);
  }
}

// The decode groups of the q8_0-style formats (decode_group_q8): GroupQ8<Fmt>::Cols.
template <typename Fmt>
struct GroupQ8 {
  template <int NC> struct Cols {
    static constexpr int64_t kBlock = kQk;
    template <typename Rows>
    static void run(int64_t nb, const Rows& g, __mmask16 m, const std::byte* x, size_t xs, float* y, int64_t ys) {
      decode_group_q8<Fmt, NC>(nb, g, m, x, xs, y, ys);
    }
  };
};
template <int NC> struct GroupQ4_K {
  static constexpr int64_t kBlock = kQkK;
  template <typename Rows>
  static void run(int64_t nb, const Rows& g, __mmask16 m, const std::byte* x, size_t xs, float* y, int64_t ys) {
    decode_group_q4_k<NC>(nb, g, m, x, xs, y, ys);
  }
};
template <int NC> struct GroupQ6_K {
  static constexpr int64_t kBlock = kQkK;
  template <typename Rows>
  static void run(int64_t nb, const Rows& g, __mmask16 m, const std::byte* x, size_t xs, float* y, int64_t ys) {
    decode_group_q6_k<NC>(nb, g, m, x, xs, y, ys);
  }
};

template <template <int> class Group>
float vec_dot_groups(int64_t n, const std::byte* w, const std::byte* x) {
  float out;
  gemm_groups<Group>(n, w, 0, 1, x, 0, 1, &out, 1);
  return out;
}

// ---- q8_0 / q4_0 / q5_0 / iq4_nl / q4_1 / q5_1 panels ---------------------------------
//
// Panel of 16 rows, per 32-element block ib (576 bytes; 640 with the mins):
//   [g = 0..7][r = 0..15] 4 bytes  unsigned quants of elements 4g .. 4g+3 of row r
//   [r = 0..15] f32                 the row's block scale d_w
//   [r = 0..15] f32                 q4_1 / q5_1 only: the row's block min m_w
// Side data per activation row and block: f32 d_x, int32 -offset * sum(q_x)
// (prepare_side_q8); q4_1 / q5_1: f32 d_x, f32 s_x (prepare_side_q8_1).
constexpr size_t kQ8PanelBlockBytes = 512 + 64;
constexpr size_t kQ8MinPanelBlockBytes = 512 + 64 + 64;

template <bool kMin>
size_t q8_panel_bytes(int64_t n) {
  return static_cast<size_t>(n / kQk) * (kMin ? kQ8MinPanelBlockBytes : kQ8PanelBlockBytes);
}

// The 4-bit (q4_0, q4_1) and 5-bit (q5_0, q5_1) quants of a block in element order, 0..15
// and 0..31.
__m256i unsigned_q4(const uint8_t* qs) {
  const __m128i q = load128(qs);
  return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
}
__m256i unsigned_q5(const uint8_t* qs, const uint8_t* qh) {
  uint32_t h;
  std::memcpy(&h, qh, 4);
  return _mm256_or_si256(unsigned_q4(qs), _mm256_maskz_mov_epi8(h, _mm256_set1_epi8(16)));
}
// A block's quants as unsigned bytes in element order: the nibble formats (with a fifth bit
// where the block has qh) here, q8_0 and iq4_nl below.
template <typename Fmt>
__m256i unsigned_block(const typename Fmt::Block& b) {
  if constexpr (requires { b.qh; }) {
    return unsigned_q5(b.qs, b.qh);
  } else {
    return unsigned_q4(b.qs);
  }
}
template <>
__m256i unsigned_block<Q8_0Fmt>(const BlockQ8_0& b) {
  return _mm256_xor_si256(load256(b.qs), _mm256_set1_epi8(static_cast<char>(0x80)));
}

template <>
__m256i unsigned_block<IQ4_NLFmt>(const BlockIQ4_NL& b) {
  const __m128i q = load128(b.qs);
  const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
  return _mm256_shuffle_epi8(_mm512_castsi512_si256(IQ4_NLFmt::table()), codes);
}

template <typename Fmt>
void pack_q8_panel(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* panel) {
  using Block = typename Fmt::Block;
  constexpr size_t kBlockBytes = Fmt::kMin ? kQ8MinPanelBlockBytes : kQ8PanelBlockBytes;
  const int64_t nb = n / kQk;
  const Block* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = reinterpret_cast<const Block*>(w + (r < n_rows ? r : n_rows - 1) * w_stride);
  for (int64_t ib = 0; ib < nb; ++ib) {
    prefetch_rows_ahead(rows, ib, nb);
    std::byte* pb = panel + ib * kBlockBytes;
    __m256i u[kRows];
    alignas(64) float d[kRows];
    [[maybe_unused]] alignas(64) float m[kRows];
    for (int r = 0; r < kRows; ++r) {
      u[r] = unsigned_block<Fmt>(rows[r][ib]);
      d[r] = f16(rows[r][ib].d_f16);
      if constexpr (Fmt::kMin) m[r] = f16(rows[r][ib].m_f16);
    }
    store_panel_group(u, pb);
    std::memcpy(pb + 512, d, sizeof(d));
    if constexpr (Fmt::kMin) std::memcpy(pb + 576, m, sizeof(m));
  }
}

// C activation rows against one panel. kMin (q4_1 / q5_1, q8_1 activations): the block sums
// start at 0 and the min term goes to acc_m (add_min_block); the result is acc + acc_m.
template <bool kMin, int C>
void panel_tile_q8(int64_t nb, const std::byte* panel, const std::byte* x, size_t xs,
                   const std::byte* side, size_t ss, __mmask16 mask, float* y, int64_t ys) {
  using Act = std::conditional_t<kMin, BlockQ8_1, BlockQ8_0>;
  constexpr size_t kBlockBytes = kMin ? kQ8MinPanelBlockBytes : kQ8PanelBlockBytes;
  __m512 acc[C], acc_m[C];
  #pragma GCC unroll 16
  for (int c = 0; c < C; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* pb = panel + ib * kBlockBytes;
    __m512i s[C];
    #pragma GCC unroll 16
    for (int c = 0; c < C; ++c) s[c] = kMin ? _mm512_setzero_si512() : bcast_i32(side + c * ss + ib * 8 + 4);
    const std::byte* xb = x + ib * sizeof(Act) + offsetof(Act, qs);
    #pragma GCC unroll 8
    for (int gi = 0; gi < 8; ++gi) {
      const __m512i wv = load512(pb + 64 * gi);
      #pragma GCC unroll 16
      for (int c = 0; c < C; ++c) s[c] = dpbusd_bcast(s[c], wv, xb + c * xs + 4 * gi);
    }
    add_q8_block<C>(acc, side + ib * 8, ss, _mm512_loadu_ps(reinterpret_cast<const float*>(pb + 512)), s);
    if constexpr (kMin)
      add_min_block<C>(acc_m, side + ib * 8, ss, _mm512_loadu_ps(reinterpret_cast<const float*>(pb + 576)));
  }
  store_cols<C>(acc, kMin ? acc_m : nullptr, mask, y, ys);
}

// ---- q4_K panels -------------------------------------------------------------------------
//
// Per 256-element block ib (5248 bytes):
//   [s = 0..7][g = 0..7][r] 4 bytes  quants (q4_K 0..15, q5_K 0..31) of elements
//                                    32s + 4g .. +3                                4096
//   [s][r] int32                     scale sc[s]                                   512
//   [s][r] int32                     (m[s] << 16) | m[s]: two int16 for vpdpwssd   512
//   [r] f32 d_w, [r] f32 dmin_w                                                    128
constexpr size_t kQ4KPanelBlockBytes = 4096 + 512 + 512 + 128;

size_t q4_k_panel_bytes(int64_t n) { return static_cast<size_t>(n / kQkK) * kQ4KPanelBlockBytes; }

// q4_K (Block = BlockQ4_K) or q5_K (BlockQ5_K: the fifth bits added to the quants here, so
// the panel tiles are q4_K's).
template <typename Block>
void pack_q4_k_panel(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* panel) {
  const int64_t nb = n / kQkK;
  const __m256i m4 = _mm256_set1_epi8(15);
  const Block* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = reinterpret_cast<const Block*>(w + (r < n_rows ? r : n_rows - 1) * w_stride);
  for (int64_t ib = 0; ib < nb; ++ib) {
    prefetch_rows_ahead(rows, ib, nb);
    std::byte* pb = panel + ib * kQ4KPanelBlockBytes;
    for (int c = 0; c < 4; ++c) {
      __m256i lo[kRows], hi[kRows];
      for (int r = 0; r < kRows; ++r) {
        const __m256i q = load256(rows[r][ib].qs + 32 * c);
        lo[r] = _mm256_and_si256(q, m4);
        hi[r] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if constexpr (std::is_same_v<Block, BlockQ5_K>) {  // element 64c + l's fifth bit: bit 2c of qh[l]; 64c + 32 + l's: bit 2c + 1
          const __m256i qh = load256(rows[r][ib].qh), m16 = _mm256_set1_epi8(16);
          lo[r] = _mm256_mask_add_epi8(lo[r], _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(1 << (2 * c)))),
                                       lo[r], m16);
          hi[r] = _mm256_mask_add_epi8(hi[r], _mm256_test_epi8_mask(qh, _mm256_set1_epi8(static_cast<char>(2 << (2 * c)))),
                                       hi[r], m16);
        }
      }
      store_panel_group(lo, pb + (2 * c) * 512);
      store_panel_group(hi, pb + (2 * c + 1) * 512);
    }
    for (int r = 0; r < kRows; ++r) {
      const Block& b = rows[r][ib];
      uint8_t sc[8], mn[8];
      unpack_q4_k_scales(b.scales, sc, mn);
      for (int s = 0; s < 8; ++s) {
        const int32_t scv = sc[s];
        const int32_t mv = static_cast<int32_t>((static_cast<uint32_t>(mn[s]) << 16) | mn[s]);
        std::memcpy(pb + 4096 + s * 64 + r * 4, &scv, 4);
        std::memcpy(pb + 4608 + s * 64 + r * 4, &mv, 4);
      }
      const float d = f16(b.d_f16), dmin = f16(b.dmin_f16);
      std::memcpy(pb + 5120 + r * 4, &d, 4);
      std::memcpy(pb + 5184 + r * 4, &dmin, 4);
    }
  }
}

template <int C>
void panel_tile_q4_k(int64_t nb, const std::byte* panel, const std::byte* x, size_t xs,
                     const std::byte*, size_t, __mmask16 mask, float* y, int64_t ys) {
  __m512 acc[C], acc_m[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* pb = panel + ib * kQ4KPanelBlockBytes;
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    __m512i sumi[C];
    scaled_subblock_sums<C, 8, 8>(pb, xb, xs, sumi);
    __m512i summ[C];
    bsum_pair_dots<C>(pb + 4608, xb, xs, summ);
    add_k_block<C>(acc, xb, xs, 1.0f, _mm512_loadu_ps(reinterpret_cast<const float*>(pb + 5120)), sumi);
    add_k_block<C>(acc_m, xb, xs, -1.0f, _mm512_loadu_ps(reinterpret_cast<const float*>(pb + 5184)), summ);
  }
  store_cols<C>(acc, acc_m, mask, y, ys);
}

// ---- q6_K panels -------------------------------------------------------------------------
//
// The 16-element sub-block panel of matmul_avx512_common.h (kQ6KPanelBlockBytes), quants
// 0..63 (w = q - 32: offset shift 5).
size_t q6_k_panel_bytes(int64_t n) { return static_cast<size_t>(n / kQkK) * kQ6KPanelBlockBytes; }

// q6 values of quarter k (elements 128h + 32k .. +31) of half h of a q6_K block, 0..63.
__m256i q6_k_quarter(const BlockQ6_K& b, int h, int k) {
  const __m256i m4 = _mm256_set1_epi8(15);
  const __m256i m2 = _mm256_set1_epi8(3);
  const __m256i l = load256(b.ql + 64 * h + 32 * (k & 1));
  const __m256i lq = (k & 2) ? _mm256_and_si256(_mm256_srli_epi16(l, 4), m4) : _mm256_and_si256(l, m4);
  const __m256i hb = load256(b.qh + 32 * h);
  const __m256i hq = _mm256_and_si256(_mm256_srli_epi16(hb, 2 * k), m2);
  return _mm256_or_si256(lq, _mm256_slli_epi16(hq, 4));
}

void pack_q6_k_panel(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* panel) {
  const int64_t nb = n / kQkK;
  const BlockQ6_K* rows[kRows];
  for (int r = 0; r < kRows; ++r) rows[r] = reinterpret_cast<const BlockQ6_K*>(w + (r < n_rows ? r : n_rows - 1) * w_stride);
  for (int64_t ib = 0; ib < nb; ++ib) {
    prefetch_rows_ahead(rows, ib, nb);
    std::byte* pb = panel + ib * kQ6KPanelBlockBytes;
    // Quarter k of half h = sub-blocks 8h + 2k, 8h + 2k + 1: each 16-element sub-block is 4
    // groups of 4, so the panel's [s][g] order is linear in the quarter's 8 dwords.
    for (int h = 0; h < 2; ++h) {
      for (int k = 0; k < 4; ++k) {
        __m256i u[kRows];
        for (int r = 0; r < kRows; ++r) u[r] = q6_k_quarter(rows[r][ib], h, k);
        store_panel_group(u, pb + (8 * h + 2 * k) * 256);
      }
    }
    for (int r = 0; r < kRows; ++r) {
      const BlockQ6_K& b = rows[r][ib];
      for (int s = 0; s < 16; ++s) {
        const int32_t scv = b.scales[s];
        std::memcpy(pb + 4096 + s * 64 + r * 4, &scv, 4);
      }
      for (int k = 0; k < 8; ++k) {
        const uint32_t pair = static_cast<uint16_t>(static_cast<int16_t>(b.scales[2 * k])) |
                              static_cast<uint32_t>(static_cast<uint16_t>(static_cast<int16_t>(b.scales[2 * k + 1]))) << 16;
        std::memcpy(pb + 5120 + k * 64 + r * 4, &pair, 4);
      }
      const float d = f16(b.d_f16);
      std::memcpy(pb + 5632 + r * 4, &d, 4);
    }
  }
}

// ---- panel gemm drivers ----------------------------------------------------------------

template <int C> struct TileQ8 {
  static void run(int64_t nb, const std::byte* p, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  __mmask16 m, float* y, int64_t ys) { panel_tile_q8<false, C>(nb, p, x, xs, s, ss, m, y, ys); }
};
template <int C> struct TileQ8Min {
  static void run(int64_t nb, const std::byte* p, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  __mmask16 m, float* y, int64_t ys) { panel_tile_q8<true, C>(nb, p, x, xs, s, ss, m, y, ys); }
};
template <int C> struct TileQ4_K {
  static void run(int64_t nb, const std::byte* p, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  __mmask16 m, float* y, int64_t ys) { panel_tile_q4_k<C>(nb, p, x, xs, s, ss, m, y, ys); }
};
template <int C> struct TileQ6_K {
  static void run(int64_t nb, const std::byte* p, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                  __mmask16 m, float* y, int64_t ys) { panel_tile_k16<C, 5>(nb, p, x, xs, s, ss, m, y, ys); }
};

void panel_gemm_q8(int64_t n, const std::byte* panel, int64_t n_rows, const std::byte* x, size_t xs,
                   const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
  TileSet<8, TileQ8>::run(n / kQk, panel, n_rows, x, xs, side, ss, n_cols, y, ys);
}
void panel_gemm_q8_min(int64_t n, const std::byte* panel, int64_t n_rows, const std::byte* x, size_t xs,
                       const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
  TileSet<8, TileQ8Min>::run(n / kQk, panel, n_rows, x, xs, side, ss, n_cols, y, ys);
}
void panel_gemm_q4_k(int64_t n, const std::byte* panel, int64_t n_rows, const std::byte* x, size_t xs,
                     const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
  TileSet<4, TileQ4_K>::run(n / kQkK, panel, n_rows, x, xs, side, ss, n_cols, y, ys);
}
void panel_gemm_q6_k(int64_t n, const std::byte* panel, int64_t n_rows, const std::byte* x, size_t xs,
                     const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
  TileSet<4, TileQ6_K>::run(n / kQkK, panel, n_rows, x, xs, side, ss, n_cols, y, ys);
}

size_t no_side_bytes(int64_t) { return 0; }

// Below this many activation rows the decode kernels win (packing is not amortised).
constexpr int32_t kPanelMinCols = 8;

// A q8_0-style format's entries: decode groups, and panels (kMin: q4_1 / q5_1's min term).
template <typename Fmt, auto kPrepareSide, bool kMin>
void set_q8_style(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_groups<GroupQ8<Fmt>::template Cols>;
  mk.gemm = &gemm_groups<GroupQ8<Fmt>::template Cols>;
  mk.panel = {kRows, kPanelMinCols, &q8_panel_bytes<kMin>, &q8_side_bytes, kPrepareSide, &pack_q8_panel<Fmt>,
              kMin ? &panel_gemm_q8_min : &panel_gemm_q8};
}

}  // namespace

// ---- the type table's AVX-512 entries (isa_kernels.h) ----------------------------------

void mm_q8_0_avx512(MatmulKernels& mk) { set_q8_style<Q8_0Fmt, &prepare_side_q8<7>, false>(mk); }
void mm_q4_0_avx512(MatmulKernels& mk) { set_q8_style<Q4_0Fmt, &prepare_side_q8<3>, false>(mk); }
void mm_q5_0_avx512(MatmulKernels& mk) { set_q8_style<Q5_0Fmt, &prepare_side_q8<4>, false>(mk); }
void mm_q4_1_avx512(MatmulKernels& mk) { set_q8_style<Q4_1Fmt, &prepare_side_q8_1, true>(mk); }
void mm_q5_1_avx512(MatmulKernels& mk) { set_q8_style<Q5_1Fmt, &prepare_side_q8_1, true>(mk); }
void mm_iq4_nl_avx512(MatmulKernels& mk) { set_q8_style<IQ4_NLFmt, &prepare_side_q8<7>, false>(mk); }
void mm_q4_k_avx512(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_groups<GroupQ4_K>;
  mk.gemm = &gemm_groups<GroupQ4_K>;
  mk.panel = {kRows, kPanelMinCols, &q4_k_panel_bytes, &no_side_bytes, nullptr, &pack_q4_k_panel<BlockQ4_K>,
              &panel_gemm_q4_k};
}
// q5_K: the panels only. Its decode (few columns) stays on the AVX2 table's file-layout
// groups and the AVX-512 q5_Kx16 interleaved tiles: AVX-512 file-layout decode groups were
// 0.7x the AVX2 ones at 3-7 columns (session 14).
void mm_q5_k_avx512(MatmulKernels& mk) {
  mk.panel = {kRows, kPanelMinCols, &q4_k_panel_bytes, &no_side_bytes, nullptr, &pack_q4_k_panel<BlockQ5_K>,
              &panel_gemm_q4_k};
}
void mm_q6_k_avx512(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_groups<GroupQ6_K>;
  mk.gemm = &gemm_groups<GroupQ6_K>;
  mk.panel = {kRows, kPanelMinCols, &q6_k_panel_bytes, &no_side_bytes, nullptr, &pack_q6_k_panel,
              &panel_gemm_q6_k};
}

}  // namespace lumen::kernels
