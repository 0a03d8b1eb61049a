// GGUF / GGML quantized block formats, byte-for-byte (a GGUF tensor of these types is an
// array of these structs, rows contiguous). fp16 fields are raw IEEE half bits.
//
// Everything in this header is a plain struct or a `static inline` helper on purpose: the
// per-ISA translation units (*_avx2.cc, *_avx512.cc) include it, and an `inline` function
// with external linkage compiled there could be merged by the linker with the baseline
// copy and then run AVX-512 code on a CPU without it. `static` keeps one copy per TU.
#pragma once

#include <cstdint>
#include <cstring>

namespace lumen::kernels {

inline constexpr int kQk = 32;    // elements per block of the "0" formats
inline constexpr int kQkK = 256;  // elements per super-block of the K formats

// q8_0: 32 weights per block; w[i] = d * qs[i]
struct BlockQ8_0 {
  uint16_t d_f16;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_0) == 34);

// q4_0: 32 weights per block; w[i] = d * (q[i] - 8), q[i] = i < 16 ? qs[i] & 15 : qs[i-16] >> 4
struct BlockQ4_0 {
  uint16_t d_f16;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_0) == 18);

// q4_1: 32 weights per block; w[i] = d * q[i] + m, q[i] 4-bit as in q4_0
struct BlockQ4_1 {
  uint16_t d_f16;
  uint16_t m_f16;
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ4_1) == 20);

// q5_0: 32 weights per block; w[i] = d * (q[i] - 16), q[i] = 4-bit nibble as in q4_0 |
// (bit i of the little-endian u32 qh) << 4
struct BlockQ5_0 {
  uint16_t d_f16;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_0) == 22);

// q5_1: 32 weights per block; w[i] = d * q[i] + m, q[i] 5-bit as in q5_0
struct BlockQ5_1 {
  uint16_t d_f16;
  uint16_t m_f16;
  uint8_t qh[4];
  uint8_t qs[16];
};
static_assert(sizeof(BlockQ5_1) == 24);

// q8_1 (activations for q4_1 / q5_1): x[i] = d * qs[i]; s = fp16(d * sum(qs)), so that the
// weights' offset m meets the activations' sum without another pass
struct BlockQ8_1 {
  uint16_t d_f16;
  uint16_t s_f16;
  int8_t qs[32];
};
static_assert(sizeof(BlockQ8_1) == 36);

// q4_K: 256 weights in 8 sub-blocks s of 32; w = d * sc[s] * q - dmin * m[s], q 4-bit, sc/m
// 6-bit packed in `scales` (see q4_k_scale_min). qs[32c + l] holds element 64c + l in the
// low nibble (sub-block 2c) and element 64c + 32 + l in the high nibble (sub-block 2c + 1).
struct BlockQ4_K {
  uint16_t d_f16;
  uint16_t dmin_f16;
  uint8_t scales[12];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ4_K) == 144);

// q2_K: 256 weights in 16 sub-blocks s of 16; w = d * (scales[s] & 15) * q - dmin * (scales[s] >> 4),
// q 2-bit. Per half h (128 elements), shift j (0..3) and l < 32:
//   element 128h + 32j + l: (qs[32h + l] >> 2j) & 3, sub-block 8h + 2j + l / 16
struct BlockQ2_K {
  uint8_t scales[16];
  uint8_t qs[64];
  uint16_t d_f16;
  uint16_t dmin_f16;
};
static_assert(sizeof(BlockQ2_K) == 84);

// q3_K: 256 weights in 16 sub-blocks s of 16; w = d * (sc[s] - 32) * q, q in [-4, 3]: the
// low 2 bits as q2_K's (qs), minus 4 unless the high bit is set. Per half h, shift j, l < 32:
//   element 128h + 32j + l: (qs[32h + l] >> 2j) & 3, high bit hmask[l] bit 4h + j
// sc[s] 6-bit, packed in `scales` (see q3_k_scale).
struct BlockQ3_K {
  uint8_t hmask[32];
  uint8_t qs[64];
  uint8_t scales[12];
  uint16_t d_f16;
};
static_assert(sizeof(BlockQ3_K) == 110);

// q5_K: q4_K plus a fifth bit per weight: w = d * sc[s] * q - dmin * m[s], q = the q4_K
// nibble | (qh[l] bit 2c for element 64c + l, bit 2c + 1 for element 64c + 32 + l) << 4.
struct BlockQ5_K {
  uint16_t d_f16;
  uint16_t dmin_f16;
  uint8_t scales[12];
  uint8_t qh[32];
  uint8_t qs[128];
};
static_assert(sizeof(BlockQ5_K) == 176);

// q6_K: 256 weights in 16 sub-blocks s of 16; w = d * scales[s] * (q - 32), q 6-bit: low 4
// bits in ql, high 2 bits in qh. Per half h (128 elements) and l < 32:
//   element 128h +  0 + l: ql[64h + l] & 15      | ((qh[32h + l] >> 0) & 3) << 4
//   element 128h + 32 + l: ql[64h + 32 + l] & 15 | ((qh[32h + l] >> 2) & 3) << 4
//   element 128h + 64 + l: ql[64h + l] >> 4      | ((qh[32h + l] >> 4) & 3) << 4
//   element 128h + 96 + l: ql[64h + 32 + l] >> 4 | ((qh[32h + l] >> 6) & 3) << 4
struct BlockQ6_K {
  uint8_t ql[128];
  uint8_t qh[64];
  int8_t scales[16];
  uint16_t d_f16;
};
static_assert(sizeof(BlockQ6_K) == 210);

// The interleaved q6_K layouts' bytes P, Q, R (q6_Kx8p, q6_Kx16p) for element e (0..31) of
// the four quarters of half h: with q0..q3 the 6-bit quants (0..63) of elements 128h + 32qi
// + e, P = q0 | (q3 >> 4) << 6, Q = q1 | ((q3 >> 2) & 3) << 6, R = q2 | (q3 & 3) << 6.
// Three quarters come out with one AND (& 63); q3 from the three top bit pairs.
inline void q6_k_pqr(const BlockQ6_K& b, int h, int e, uint8_t pqr[3]) {
  const uint8_t la = b.ql[64 * h + e], lb = b.ql[64 * h + 32 + e], hb = b.qh[32 * h + e];
  const int q0 = (la & 15) | (hb & 3) << 4, q1 = (lb & 15) | ((hb >> 2) & 3) << 4;
  const int q2 = (la >> 4) | ((hb >> 4) & 3) << 4, q3 = (lb >> 4) | ((hb >> 6) & 3) << 4;
  pqr[0] = static_cast<uint8_t>(q0 | (q3 >> 4) << 6);
  pqr[1] = static_cast<uint8_t>(q1 | ((q3 >> 2) & 3) << 6);
  pqr[2] = static_cast<uint8_t>(q2 | (q3 & 3) << 6);
}

// q8_K (activations for the K formats): x[i] = d * qs[i]; bsums[j] = sum(qs[16j .. 16j+15])
struct BlockQ8_K {
  float d;
  int8_t qs[256];
  int16_t bsums[16];
};
static_assert(sizeof(BlockQ8_K) == 292);

// ---- i-quants ---------------------------------------------------------------------------
// Layouts only; the grids and sign tables that give the weights their values are constants
// of the format too, and live with the i-quant kernels.

// iq4_nl: 32 weights per block; w[i] = d * kIq4nlValues[q[i]], q[i] 4-bit as in q4_0
struct BlockIQ4_NL {
  uint16_t d_f16;
  uint8_t qs[16];
};
static_assert(sizeof(BlockIQ4_NL) == 18);

// iq4_xs: 256 weights in 8 sub-blocks s of 32; w = d * (ls[s] - 32) * kIq4nlValues[q], ls 6-bit:
// low 4 bits (scales_l[s / 2] >> 4 (s % 2)) & 15, high 2 bits (scales_h >> 2s) & 3.
// qs[16s + l] holds element 32s + l (low nibble) and 32s + 16 + l (high nibble).
struct BlockIQ4_XS {
  uint16_t d_f16;
  uint16_t scales_h;
  uint8_t scales_l[4];
  uint8_t qs[128];
};
static_assert(sizeof(BlockIQ4_XS) == 136);

// The 16 values of the iq4_nl / iq4_xs non-linear grid (format constant, ggml-common.h's
// kvalues_iq4nl).
inline constexpr int8_t kIq4nlValues[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                            1,    13,   25,  38,  53,  69,  89,  113};

// iq2_xxs: 256 weights in 8 groups of 32; per group 4 grid indices (8 bits each) and
// 4 x 7 sign bits + a 4-bit scale in qs[4g .. 4g+3] (as two u32)
struct BlockIQ2_XXS {
  uint16_t d_f16;
  uint16_t qs[32];
};
static_assert(sizeof(BlockIQ2_XXS) == 66);

// iq2_xs: qs[i] = 9-bit grid index | 7 sign bits << 9; scales[g]: two 4-bit scales
struct BlockIQ2_XS {
  uint16_t d_f16;
  uint16_t qs[32];
  uint8_t scales[8];
};
static_assert(sizeof(BlockIQ2_XS) == 74);

// iq2_s: 10-bit grid indices (qs low 8 bits, qh 2 high bits each), explicit signs in
// qs[32..63], two 4-bit scales per group of 32
struct BlockIQ2_S {
  uint16_t d_f16;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t scales[8];
};
static_assert(sizeof(BlockIQ2_S) == 82);

// iq3_xxs: 8-bit grid indices qs[0..63]; per group of 32, a u32 of 4 x 7 sign bits and a
// 4-bit scale in qs[64 + 4g ..]
struct BlockIQ3_XXS {
  uint16_t d_f16;
  uint8_t qs[96];
};
static_assert(sizeof(BlockIQ3_XXS) == 98);

// iq3_s: 9-bit grid indices (qs low 8 bits, qh high bit), explicit signs, 4-bit scales
struct BlockIQ3_S {
  uint16_t d_f16;
  uint8_t qs[64];
  uint8_t qh[8];
  uint8_t signs[32];
  uint8_t scales[4];
};
static_assert(sizeof(BlockIQ3_S) == 110);

// iq1_s: 11-bit grid indices (qs low 8 bits, 3 bits of qh each), per group of 32 a 3-bit
// scale and the sign of a delta in qh's top bits
struct BlockIQ1_S {
  uint16_t d_f16;
  uint8_t qs[32];
  uint16_t qh[8];
};
static_assert(sizeof(BlockIQ1_S) == 50);

// iq1_m: as iq1_s with per-8 delta signs in qh; 3-bit scales, and the block's fp16 scale
// spread over the top nibbles of the four u16 of `scales`
struct BlockIQ1_M {
  uint8_t qs[32];
  uint8_t qh[16];
  uint8_t scales[8];
};
static_assert(sizeof(BlockIQ1_M) == 56);

// The 6-bit scale and min of q4_K sub-block j (0..7) from the 12 packed bytes b:
//   j < 4:  sc = b[j] & 63,                          m = b[j + 4] & 63
//   j >= 4: sc = (b[j + 4] & 15) | (b[j - 4] >> 6) << 4, m = (b[j + 4] >> 4) | (b[j] >> 6) << 4
static inline void q4_k_scale_min(const uint8_t* b, int j, uint8_t* sc, uint8_t* m) {
  if (j < 4) {
    *sc = b[j] & 63;
    *m = b[j + 4] & 63;
  } else {
    *sc = static_cast<uint8_t>((b[j + 4] & 15) | ((b[j - 4] >> 6) << 4));
    *m = static_cast<uint8_t>((b[j + 4] >> 4) | ((b[j] >> 6) << 4));
  }
}

// The 6-bit scale of q3_K sub-block j (0..15) from the 12 packed bytes b, as stored (0..63;
// the weight scale is d * (sc - 32)): low 4 bits in the low (j < 8) or high (j >= 8) nibble
// of b[j % 8], high 2 bits at bit 2 * (j / 4) of b[8 + j % 4].
static inline uint8_t q3_k_scale(const uint8_t* b, int j) {
  const int lo = j < 8 ? b[j] & 15 : b[j - 8] >> 4;
  const int hi = (b[8 + j % 4] >> (2 * (j / 4))) & 3;
  return static_cast<uint8_t>(lo | (hi << 4));
}

// Round to nearest, ties to even, for |f| <= 2^22, exactly as ggml's nearest_int: adding
// 1.5 * 2^23 puts the integer part into the low mantissa bits under the default rounding
// mode. Used by the q8_K quantizer so its ties break the same way as ggml's.
static inline int nearest_int(float f) {
  const float v = f + 12582912.0f;
  int32_t i;
  std::memcpy(&i, &v, sizeof(i));
  return (i & 0x007fffff) - 0x00400000;
}

}  // namespace lumen::kernels
