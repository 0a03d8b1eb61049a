// AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c (cmake/lumen.cmake); only
// reached through the table when cpu_features().has_avx2_fma().
//
// Everything here has internal linkage (anonymous namespace) and no header with external
// inline functions is used, so no AVX2 code can leak into the baseline build through the
// linker's choice among duplicate inline definitions (see quant_blocks.h).
//
// Numerics against the scalar reference (kernels_ref.cc):
//   quantize_row_q8_0, _q8_1  bit-exact (q8_K: matmul_avx2.cc, bit-exact)
//   quantized dots             integer products exact; f32 accumulation in 8 lanes (each
//                              lane sums its share of every block, as ggml's AVX2 kernels);
//                              q8_0 / q4_0 / q5_0 / q4_K / q5_K / q6_K (matmul_avx2.cc, with
//                              their 8-row interleaved layouts): bit-exact
//   f32/f16/bf16 dots          4 x 8 f32 lanes with FMA instead of a double sum
//   rms_norm                   double sum of squares in 4 lanes; then bit-exact
//   silu_mul, exp_sum          polynomial expf (Cephes), <= 2 ulp
//   attention                  f32 lanes with FMA
#include <immintrin.h>

#include <cmath>
#include <cstdint>
#include <cstring>

#include "base/fp16.h"
#include "kernels/isa_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/math_avx2.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

// ---- helpers ---------------------------------------------------------------------------

float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

float f16(uint16_t h) { return _cvtsh_ss(h); }

__m256i load256(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
__m128i load128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

// 8 lanes of int32, each the sum of 4 products a[i] * b[i] of int8 (a != -128 or b != -128:
// |a| is taken as unsigned, b takes a's sign; maddubs pairs stay below 2 * 128 * 127).
__m256i dot_i8(__m256i a, __m256i b) {
  const __m256i p16 = _mm256_maddubs_epi16(_mm256_sign_epi8(a, a), _mm256_sign_epi8(b, a));
  return _mm256_madd_epi16(p16, _mm256_set1_epi16(1));
}

// 32 4-bit values of a q4_0 block as bytes: elements 0..15 from the low nibbles, 16..31
// from the high nibbles.
__m256i unpack_q4_0(const uint8_t* qs) {
  const __m128i b = load128(qs);
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(b, 4), b);
  return _mm256_and_si256(both, _mm256_set1_epi8(15));
}

// ---- activation quantizer --------------------------------------------------------------

// One block of 32 activations as ref::quantize_row_q8_0 makes it (and ggml's AVX path): same
// max, same f32 division, same multiply, round-half-even. Stores the quants at qs, returns
// d = amax / 127 in f32 (not yet fp16) and the quants as int32 before saturation (vcvtps2dq:
// what ref::quantize_row_q8_1 sums).
struct Q8BlockParts {
  float d;
  __m256i q[4];  // elements 8k .. 8k + 7
};
[[gnu::always_inline]] inline Q8BlockParts quantize_block_q8(const float* x, int8_t* qs) {
  const __m256 sign_bit = _mm256_set1_ps(-0.0f);
  const __m256i perm = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  __m256 v[4];
  __m256 amax = _mm256_setzero_ps();
  for (int k = 0; k < 4; ++k) {
    v[k] = _mm256_loadu_ps(x + 8 * k);
    amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign_bit, v[k]));
  }
  __m128 m4 = _mm_max_ps(_mm256_extractf128_ps(amax, 1), _mm256_castps256_ps128(amax));
  m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
  m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
  const float max_scalar = _mm_cvtss_f32(m4);
  Q8BlockParts out;
  out.d = max_scalar / 127.0f;
  const __m256 id = _mm256_set1_ps(max_scalar != 0.0f ? 127.0f / max_scalar : 0.0f);
  for (int k = 0; k < 4; ++k) {
    const __m256 r = _mm256_round_ps(_mm256_mul_ps(v[k], id), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    out.q[k] = _mm256_cvtps_epi32(r);
  }
  // packs interleave 128-bit lanes: (0 1 4 5 | 2 3 6 7) in 32-bit groups; undo that.
  const __m256i p01 = _mm256_packs_epi32(out.q[0], out.q[1]);
  const __m256i p23 = _mm256_packs_epi32(out.q[2], out.q[3]);
  const __m256i p = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(p01, p23), perm);
  _mm256_storeu_si256(reinterpret_cast<__m256i*>(qs), p);
  return out;
}

// Bit-exact with ref::quantize_row_q8_0.
void quantize_row_q8_0(const float* x, std::byte* y, int64_t n) {
  auto* b = reinterpret_cast<BlockQ8_0*>(y);
  for (int64_t ib = 0; ib < n / kQk; ++ib, x += kQk) b[ib].d_f16 = _cvtss_sh(quantize_block_q8(x, b[ib].qs).d, 0);
}

// Bit-exact with ref::quantize_row_q8_1: q8_0's block, and s = fp16(d * sum(q)) with the f32 d
// and the int32 quants summed with wrap-around (the reference's uint32 sum; any order).
void quantize_row_q8_1(const float* x, std::byte* y, int64_t n) {
  auto* b = reinterpret_cast<BlockQ8_1*>(y);
  for (int64_t ib = 0; ib < n / kQk; ++ib, x += kQk) {
    const Q8BlockParts r = quantize_block_q8(x, b[ib].qs);
    const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(r.q[0], r.q[1]), _mm256_add_epi32(r.q[2], r.q[3]));
    __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(1, 0, 3, 2)));
    s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, _MM_SHUFFLE(2, 3, 0, 1)));
    b[ib].d_f16 = _cvtss_sh(r.d, 0);
    b[ib].s_f16 = _cvtss_sh(r.d * static_cast<float>(_mm_cvtsi128_si32(s4)), 0);
  }
}

// ---- weight x activation kernels -------------------------------------------------------
// Each Kernel::cols<NC>(n, w, x, x_stride, out) computes out[c] = dot(w, x + c * x_stride)
// for NC activation rows at once, so the weight block is unpacked once for all of them.
// The arithmetic of each column is the same whatever NC is, so vec_dot (NC = 1) and gemm
// agree bit for bit.

// Two accumulators per column (even / odd blocks) break the 4-cycle FMA dependency chain
// that otherwise bounds a single row-times-vector product.
template <typename Unpack>
struct Q8_0StyleKernel {
  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    using Block = typename Unpack::Block;
    const auto* bw = reinterpret_cast<const Block*>(w);
    __m256 acc[2][NC];
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[0][c] = acc[1][c] = _mm256_setzero_ps();
    const int64_t nb = n / kQk;
    auto step = [&](int64_t ib, __m256* a) {
      const __m256i qw = Unpack::quants(bw[ib]);
      const float dw = f16(bw[ib].d_f16);
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8_0& bx = reinterpret_cast<const BlockQ8_0*>(x + c * xs)[ib];
        const __m256 d = _mm256_set1_ps(dw * f16(bx.d_f16));
        a[c] = _mm256_fmadd_ps(d, _mm256_cvtepi32_ps(dot_i8(qw, load256(bx.qs))), a[c]);
      }
    };
    int64_t ib = 0;
    for (; ib + 1 < nb; ib += 2) {
      step(ib, acc[0]);
      step(ib + 1, acc[1]);
    }
    if (ib < nb) step(ib, acc[0]);
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) out[c] = hsum(_mm256_add_ps(acc[0][c], acc[1][c]));
  }
};

// The 5-bit quants of a q5_0 / q5_1 block as unsigned bytes 0..31 (element order).
template <typename Block>
__m256i unpack_q5(const Block& b) {
  return _mm256_or_si256(unpack_q4_0(b.qs), _mm256_and_si256(bytes_from_bits(b.qh), _mm256_set1_epi8(16)));
}

struct UnpackIQ4_NL {  // the non-linear values, in [-127, 113]
  using Block = BlockIQ4_NL;
  static __m256i quants(const BlockIQ4_NL& b) {
    const __m256i table = _mm256_broadcastsi128_si256(load128(kIq4nlValues));
    return _mm256_shuffle_epi8(table, unpack_q4_0(b.qs));
  }
};

// q8_0, q4_0, q5_0, q4_K and q6_K have their own kernels, bit-exact with the reference
// (matmul_avx2.cc).
using IQ4_NLKernel = Q8_0StyleKernel<UnpackIQ4_NL>;

// q4_1 / q5_1 against q8_1 (see ref::vec_dot_q4_1_q8_1): the quants go in unsigned
// (maddubs), (d_w * d_x) * sumi accumulates in 8 lanes, m * s_x in a scalar as the reference.
template <typename Block, bool kFiveBit>
struct Q_1Kernel {
  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    const auto* bw = reinterpret_cast<const Block*>(w);
    __m256 acc[NC];
    float acc_m[NC];
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) {
      acc[c] = _mm256_setzero_ps();
      acc_m[c] = 0.0f;
    }
    const __m256i ones = _mm256_set1_epi16(1);
    for (int64_t ib = 0; ib < n / kQk; ++ib) {
      __m256i q;
      if constexpr (kFiveBit) {
        q = unpack_q5(bw[ib]);
      } else {
        q = unpack_q4_0(bw[ib].qs);
      }
      const float dw = f16(bw[ib].d_f16), mw = f16(bw[ib].m_f16);
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8_1& bx = reinterpret_cast<const BlockQ8_1*>(x + c * xs)[ib];
        const __m256i p = _mm256_madd_epi16(_mm256_maddubs_epi16(q, load256(bx.qs)), ones);
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(dw * f16(bx.d_f16)), _mm256_cvtepi32_ps(p), acc[c]);
        acc_m[c] += mw * f16(bx.s_f16);
      }
    }
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) out[c] = hsum(acc[c]) + acc_m[c];
  }
};
using Q4_1Kernel = Q_1Kernel<BlockQ4_1, false>;
using Q5_1Kernel = Q_1Kernel<BlockQ5_1, true>;

// The int16 pair (scale of sub-block s in the low 128-bit lane, of s + 1 in the high one)
// that meets maddubs results over 32 elements = sub-blocks s, s + 1 of 16, for s = 8h + 2j:
// one byte shuffle of sc8, the int16 scales 8h .. 8h + 7 in both lanes (the scalar form,
// two broadcasts of scales read one by one, made q3_K decode 1.5x slower).
__m256i scale_pair16(__m256i sc8, int j) {
  const char lo = static_cast<char>(4 * j), hi = static_cast<char>(4 * j + 2);
  return _mm256_shuffle_epi8(sc8, _mm256_setr_epi8(lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo, lo + 1, lo,
                                                   lo + 1, lo, lo + 1, lo, lo + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1,
                                                   hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1, hi, hi + 1));
}
// Scales 8h .. 8h + 7 of sixteen int16 scales, in both lanes.
__m256i scale_half16(__m256i scales16, int h) {
  return _mm256_broadcastsi128_si256(h == 0 ? _mm256_castsi256_si128(scales16) : _mm256_extracti128_si256(scales16, 1));
}

// q2_K: per half h and shift j, 32 two-bit quants = sub-blocks 8h + 2j, 8h + 2j + 1 (unsigned,
// maddubs); the mins' term from bsums; floats as ref::vec_dot_q2_k_q8_k with lanes.
struct Q2_KKernel {
  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    const auto* bw = reinterpret_cast<const BlockQ2_K*>(w);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[NC], acc_m[NC];
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[c] = acc_m[c] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / kQkK; ++ib) {
      const BlockQ2_K& b = bw[ib];
      const __m256i mins16 = _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(load128(b.scales), 4), _mm_set1_epi8(15)));
      const __m256i scales16 = _mm256_cvtepu8_epi16(_mm_and_si128(load128(b.scales), _mm_set1_epi8(15)));
      __m256i sumi[NC];
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
      #pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i qv = load256(b.qs + 32 * h);
        const __m256i sc8 = scale_half16(scales16, h);
        #pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const int s = 8 * h + 2 * j;
          const __m256i q2 = _mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m3);
          const __m256i sv = scale_pair16(sc8, j);
          #pragma GCC unroll 8
          for (int c = 0; c < NC; ++c) {
            const int8_t* q8 = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].qs + 16 * s;
            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(sv, _mm256_maddubs_epi16(q2, load256(q8))));
          }
        }
      }
      const float dw = f16(b.d_f16), dminw = f16(b.dmin_f16);
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8_K& bx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib];
        const __m256i prod = _mm256_madd_epi16(load256(bx.bsums), mins16);
        acc_m[c] = _mm256_fmadd_ps(_mm256_set1_ps(-bx.d * dminw), _mm256_cvtepi32_ps(prod), acc_m[c]);
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(bx.d * dw), _mm256_cvtepi32_ps(sumi[c]), acc[c]);
      }
    }
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) out[c] = hsum(acc[c]) + hsum(acc_m[c]);
  }
};

// q3_K's 16 six-bit scales minus 32, as int16, from its 12 scale bytes (q3_k_scale's
// unpacking, four at a time): scale j's low 4 bits are the low (j < 8) or high (j >= 8)
// nibble of byte j % 8, its high 2 bits bits 2 (j / 4) .. + 1 of byte 8 + j % 4.
__m256i q3_k_scales16(const uint8_t* scales) {
  uint32_t a0, a1, a2;
  std::memcpy(&a0, scales, 4);
  std::memcpy(&a1, scales + 4, 4);
  std::memcpy(&a2, scales + 8, 4);
  constexpr uint32_t kLow4 = 0x0f0f0f0fu, kLow2 = 0x03030303u;
  const uint32_t s0 = (a0 & kLow4) | ((a2 & kLow2) << 4);               // scales 0..3
  const uint32_t s1 = (a1 & kLow4) | (((a2 >> 2) & kLow2) << 4);        // 4..7
  const uint32_t s2 = ((a0 >> 4) & kLow4) | (((a2 >> 4) & kLow2) << 4); // 8..11
  const uint32_t s3 = ((a1 >> 4) & kLow4) | (((a2 >> 6) & kLow2) << 4); // 12..15
  const __m128i bytes = _mm_set_epi32(static_cast<int>(s3), static_cast<int>(s2), static_cast<int>(s1),
                                      static_cast<int>(s0));
  return _mm256_sub_epi16(_mm256_cvtepu8_epi16(bytes), _mm256_set1_epi16(32));
}

// q3_K: q = u - 4 with u = low 2 bits + (high bit ? 4 : 0) in 0..7 (unsigned, maddubs);
// sum (sc - 32) (u - 4) q8 = sum (sc - 32) u q8 - 4 sum (sc - 32) bsums.
struct Q3_KKernel {
  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    const auto* bw = reinterpret_cast<const BlockQ3_K*>(w);
    const __m256i m3 = _mm256_set1_epi8(3);
    __m256 acc[NC];
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) acc[c] = _mm256_setzero_ps();
    for (int64_t ib = 0; ib < n / kQkK; ++ib) {
      const BlockQ3_K& b = bw[ib];
      const __m256i scales16 = q3_k_scales16(b.scales);
      const __m256i hm = load256(b.hmask);
      __m256i sumi[NC];
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
      #pragma GCC unroll 2
      for (int h = 0; h < 2; ++h) {
        const __m256i qv = load256(b.qs + 32 * h);
        // Scales 8h .. 8h + 7 in both lanes; step j takes 2j (low lane) and 2j + 1 (high).
        const __m256i sc8 = scale_half16(scales16, h);
        #pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) {
          const int s = 8 * h + 2 * j;
          // hmask bit p = 4h + j of each byte moved to bit 2 (16-bit shifts: the bits that
          // cross into the neighbouring byte are masked off).
          const int p = 4 * h + j;
          const __m256i at2 = p < 2 ? _mm256_slli_epi16(hm, 2 - p) : _mm256_srli_epi16(hm, p - 2);
          const __m256i high = _mm256_and_si256(at2, _mm256_set1_epi8(4));
          const __m256i u = _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(qv, 2 * j), m3), high);
          const __m256i sv = scale_pair16(sc8, j);
          #pragma GCC unroll 8
          for (int c = 0; c < NC; ++c) {
            const int8_t* q8 = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].qs + 16 * s;
            sumi[c] = _mm256_add_epi32(sumi[c], _mm256_madd_epi16(sv, _mm256_maddubs_epi16(u, load256(q8))));
          }
        }
      }
      const float dw = f16(b.d_f16);
      #pragma GCC unroll 8
      for (int c = 0; c < NC; ++c) {
        const BlockQ8_K& bx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib];
        const __m256i offset = _mm256_slli_epi32(_mm256_madd_epi16(load256(bx.bsums), scales16), 2);
        acc[c] = _mm256_fmadd_ps(_mm256_set1_ps(bx.d * dw), _mm256_cvtepi32_ps(_mm256_sub_epi32(sumi[c], offset)), acc[c]);
      }
    }
    #pragma GCC unroll 8
    for (int c = 0; c < NC; ++c) out[c] = hsum(acc[c]);
  }
};

// Float dots: 4 accumulators of 8 lanes over 32 elements, then 8 at a time into the first;
// the caller adds the scalar tail (n % 8 elements) at the end.
template <typename Load>
float dot_lanes(int64_t n, Load load) {
  __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
  int64_t i = 0;
  for (; i + 32 <= n; i += 32) {
    a0 = load(i, a0);
    a1 = load(i + 8, a1);
    a2 = load(i + 16, a2);
    a3 = load(i + 24, a3);
  }
  for (; i + 8 <= n; i += 8) a0 = load(i, a0);
  return hsum(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
}

__m256 load_f16x8(const uint16_t* p) { return _mm256_cvtph_ps(load128(p)); }
__m256 load_bf16x8(const uint16_t* p) {
  return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(load128(p)), 16));
}
float to_f32(float f) { return f; }
float to_f32(uint16_t h) { return f16(h); }
float bf16(uint16_t h) {
  const uint32_t u = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

float dot_f32(const float* a, const float* b, int64_t n) {
  float tail = 0.0f;
  for (int64_t i = n / 8 * 8; i < n; ++i) tail += a[i] * b[i];
  return dot_lanes(n, [&](int64_t i, __m256 acc) {
           return _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc);
         }) + tail;
}

float dot_f16(const uint16_t* a, const uint16_t* b, int64_t n) {
  float tail = 0.0f;
  for (int64_t i = n / 8 * 8; i < n; ++i) tail += f16(a[i]) * f16(b[i]);
  return dot_lanes(
             n, [&](int64_t i, __m256 acc) { return _mm256_fmadd_ps(load_f16x8(a + i), load_f16x8(b + i), acc); }) +
         tail;
}

float dot_bf16(const uint16_t* a, const uint16_t* b, int64_t n) {
  float tail = 0.0f;
  for (int64_t i = n / 8 * 8; i < n; ++i) tail += bf16(a[i]) * bf16(b[i]);
  return dot_lanes(
             n, [&](int64_t i, __m256 acc) { return _mm256_fmadd_ps(load_bf16x8(a + i), load_bf16x8(b + i), acc); }) +
         tail;
}

float vec_dot_f32(int64_t n, const std::byte* w, const std::byte* x) {
  return dot_f32(reinterpret_cast<const float*>(w), reinterpret_cast<const float*>(x), n);
}
float vec_dot_f16(int64_t n, const std::byte* w, const std::byte* x) {
  return dot_f16(reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const uint16_t*>(x), n);
}
float vec_dot_bf16(int64_t n, const std::byte* w, const std::byte* x) {
  return dot_bf16(reinterpret_cast<const uint16_t*>(w), reinterpret_cast<const uint16_t*>(x), n);
}

// ---- row kernels -----------------------------------------------------------------------

void quantize_row_f16(const float* x, std::byte* y, int64_t n) {
  auto* h = reinterpret_cast<uint16_t*>(y);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm_storeu_si128(reinterpret_cast<__m128i*>(h + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), 0));
  for (; i < n; ++i) h[i] = _cvtss_sh(x[i], 0);
}

// Same arithmetic as ref::rms_norm_row except the double sum runs in 4 lanes.
void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* out) {
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    const __m256 sq = _mm256_mul_ps(v, v);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(sq)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(sq, 1)));
  }
  double sum = hsum_pd(_mm256_add_pd(s0, s1));
  for (; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(mean + eps)));
  const __m256 vs = _mm256_set1_ps(scale);
  i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(x + i), vs);
    if (w) v = _mm256_mul_ps(v, _mm256_loadu_ps(w + i));
    _mm256_storeu_ps(out + i, v);
  }
  for (; i < n; ++i) out[i] = w ? (x[i] * scale) * w[i] : x[i] * scale;
}

__m256 silu_ps(__m256 g) {
  const __m256 e = exp_ps(_mm256_sub_ps(_mm256_setzero_ps(), g));
  return _mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e));
}

void silu_mul(float* gate, const float* up, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(gate + i, _mm256_mul_ps(silu_ps(_mm256_loadu_ps(gate + i)), _mm256_loadu_ps(up + i)));
  if (i < n) {  // tail through a padded vector so every element uses the same expf
    float g[8] = {}, u[8] = {};
    for (int64_t k = i; k < n; ++k) {
      g[k - i] = gate[k];
      u[k - i] = up[k];
    }
    _mm256_storeu_ps(g, _mm256_mul_ps(silu_ps(_mm256_loadu_ps(g)), _mm256_loadu_ps(u)));
    for (int64_t k = i; k < n; ++k) gate[k] = g[k - i];
  }
}

void add(float* x, const float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(x + i, _mm256_add_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) x[i] += y[i];
}

double exp_sum(float* s, int64_t n, float max) {
  const __m256 vmax = _mm256_set1_ps(max);
  __m256d s0 = _mm256_setzero_pd(), s1 = s0;
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    const __m256 e = exp_ps(_mm256_sub_ps(_mm256_loadu_ps(s + j), vmax));
    _mm256_storeu_ps(s + j, e);
    s0 = _mm256_add_pd(s0, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
    s1 = _mm256_add_pd(s1, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
  }
  double sum = hsum_pd(_mm256_add_pd(s0, s1));
  if (j < n) {
    float t[8];
    for (int k = 0; k < 8; ++k) t[k] = j + k < n ? s[j + k] - max : -100.0f;
    _mm256_storeu_ps(t, exp_ps(_mm256_loadu_ps(t)));
    for (int64_t k = j; k < n; ++k) {
      s[k] = t[k - j];
      sum += t[k - j];
    }
  }
  return sum;
}

// ---- attention -------------------------------------------------------------------------

// Scores four keys at a time: one 8-lane accumulator per key over head_dim, then a
// horizontal-add tree that leaves the four sums side by side. A key's arithmetic does not
// depend on its slot in the group of four (a short last group is padded with a repeat of
// key 0, whose result is dropped), so results do not depend on n.
constexpr int32_t kMaxScoreDim = 512;

__m128 reduce4(__m256 a0, __m256 a1, __m256 a2, __m256 a3) {
  const __m256 t = _mm256_hadd_ps(_mm256_hadd_ps(a0, a1), _mm256_hadd_ps(a2, a3));
  return _mm_add_ps(_mm256_castps256_ps128(t), _mm256_extractf128_ps(t, 1));
}

template <typename T, typename Load>
void scores4(const T* k, int64_t n, const float* qf, int32_t hd, float scale, float* scores,
             Load load) {
  for (int64_t s = 0; s < n; s += 4) {
    const T* kr[4];
    for (int j = 0; j < 4; ++j) kr[j] = k + (s + j < n ? s + j : 0) * hd;
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    for (int32_t i = 0; i < hd; i += 8) {
      const __m256 qv = _mm256_loadu_ps(qf + i);
      a0 = _mm256_fmadd_ps(load(kr[0] + i), qv, a0);
      a1 = _mm256_fmadd_ps(load(kr[1] + i), qv, a1);
      a2 = _mm256_fmadd_ps(load(kr[2] + i), qv, a2);
      a3 = _mm256_fmadd_ps(load(kr[3] + i), qv, a3);
    }
    float out[4];
    _mm_storeu_ps(out, _mm_mul_ps(reduce4(a0, a1, a2, a3), _mm_set1_ps(scale)));
    for (int j = 0; j < 4 && s + j < n; ++j) scores[s + j] = out[j];
  }
}

void attn_scores_f16(const uint16_t* k, int64_t n, const uint16_t* q, int32_t hd, float scale,
                     float* scores) {
  if (hd % 8 != 0 || hd > kMaxScoreDim) {
    for (int64_t s = 0; s < n; ++s, k += hd) scores[s] = dot_f16(k, q, hd) * scale;
    return;
  }
  float qf[kMaxScoreDim];  // q16 widened once (exact)
  for (int32_t i = 0; i < hd; i += 8) _mm256_storeu_ps(qf + i, load_f16x8(q + i));
  scores4(k, n, qf, hd, scale, scores, [](const uint16_t* p) { return load_f16x8(p); });
}

void attn_scores_f32(const float* k, int64_t n, const float* q, int32_t hd, float scale,
                     float* scores) {
  if (hd % 8 != 0) {
    for (int64_t s = 0; s < n; ++s, k += hd) scores[s] = dot_f32(k, q, hd) * scale;
    return;
  }
  scores4(k, n, q, hd, scale, scores, [](const float* p) { return _mm256_loadu_ps(p); });
}

// acc += sum_s p[s] v_s with the accumulator held in registers for 32 dims at a time.
template <typename Load, typename T>
void accum_lanes(const float* p, const T* v, int64_t n, int32_t hd, float* acc, Load load) {
  int32_t i = 0;
  for (; i + 32 <= hd; i += 32) {
    __m256 a0 = _mm256_loadu_ps(acc + i), a1 = _mm256_loadu_ps(acc + i + 8);
    __m256 a2 = _mm256_loadu_ps(acc + i + 16), a3 = _mm256_loadu_ps(acc + i + 24);
    const T* vs = v + i;
    for (int64_t s = 0; s < n; ++s, vs += hd) {
      const __m256 ps = _mm256_set1_ps(p[s]);
      a0 = _mm256_fmadd_ps(ps, load(vs), a0);
      a1 = _mm256_fmadd_ps(ps, load(vs + 8), a1);
      a2 = _mm256_fmadd_ps(ps, load(vs + 16), a2);
      a3 = _mm256_fmadd_ps(ps, load(vs + 24), a3);
    }
    _mm256_storeu_ps(acc + i, a0);
    _mm256_storeu_ps(acc + i + 8, a1);
    _mm256_storeu_ps(acc + i + 16, a2);
    _mm256_storeu_ps(acc + i + 24, a3);
  }
  for (; i + 8 <= hd; i += 8) {
    __m256 a0 = _mm256_loadu_ps(acc + i);
    const T* vs = v + i;
    for (int64_t s = 0; s < n; ++s, vs += hd) a0 = _mm256_fmadd_ps(_mm256_set1_ps(p[s]), load(vs), a0);
    _mm256_storeu_ps(acc + i, a0);
  }
  for (; i < hd; ++i) {
    float a = acc[i];
    for (int64_t s = 0; s < n; ++s) a += p[s] * to_f32(v[s * hd + i]);
    acc[i] = a;
  }
}

void f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) _mm256_storeu_ps(y + i, load_f16x8(x + i));
  for (; i < n; ++i) y[i] = f16(x[i]);
}

// y = d * q per block, the scalar dequantizers' one f32 product (q is exact as a float):
// bit for bit. q8_0: 32 signed bytes; q4_0: nibbles, the low ones values 0-15, the high
// ones 16-31, each minus 8.
void dequantize_q8_0(const std::byte* src, float* y, int64_t n) {
  const auto* b = reinterpret_cast<const BlockQ8_0*>(src);
  for (int64_t ib = 0; ib < n / 32; ++ib, y += 32) {
    const __m256 d = _mm256_set1_ps(fp16_to_f32(b[ib].d_f16));
    for (int j = 0; j < 32; j += 8) {
      const __m128i q = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(b[ib].qs + j));
      _mm256_storeu_ps(y + j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(q)), d));
    }
  }
}

void dequantize_q4_0(const std::byte* src, float* y, int64_t n) {
  const auto* b = reinterpret_cast<const BlockQ4_0*>(src);
  const __m128i low4 = _mm_set1_epi8(0x0f), eight = _mm_set1_epi8(8);
  for (int64_t ib = 0; ib < n / 32; ++ib, y += 32) {
    const __m256 d = _mm256_set1_ps(fp16_to_f32(b[ib].d_f16));
    const __m128i qs = _mm_loadu_si128(reinterpret_cast<const __m128i*>(b[ib].qs));
    const __m128i lo = _mm_sub_epi8(_mm_and_si128(qs, low4), eight);                     // values 0-15
    const __m128i hi = _mm_sub_epi8(_mm_and_si128(_mm_srli_epi16(qs, 4), low4), eight);  // values 16-31
    const __m128i parts[4] = {lo, _mm_srli_si128(lo, 8), hi, _mm_srli_si128(hi, 8)};
    for (int j = 0; j < 4; ++j)
      _mm256_storeu_ps(y + 8 * j, _mm256_mul_ps(_mm256_cvtepi32_ps(_mm256_cvtepi8_epi32(parts[j])), d));
  }
}

// F16C rounds to nearest even like f32_to_fp16, subnormals and overflow included; only a
// NaN's payload differs, so a vector holding a NaN takes the scalar path.
void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 v = _mm256_loadu_ps(x + i);
    if (_mm256_movemask_ps(_mm256_cmp_ps(v, v, _CMP_UNORD_Q)) != 0) {
      for (int j = 0; j < 8; ++j) y[i + j] = f32_to_fp16(x[i + j]);
    } else {
      _mm_storeu_si128(reinterpret_cast<__m128i*>(y + i), _mm256_cvtps_ph(v, _MM_FROUND_TO_NEAREST_INT));
    }
  }
  for (; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

float row_max(const float* s, int64_t n) {
  __m256 m0 = _mm256_set1_ps(-INFINITY), m1 = m0;
  int64_t j = 0;
  for (; j + 16 <= n; j += 16) {
    m0 = _mm256_max_ps(m0, _mm256_loadu_ps(s + j));
    m1 = _mm256_max_ps(m1, _mm256_loadu_ps(s + j + 8));
  }
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, _mm256_max_ps(m0, m1));
  float m = lanes[0];
  for (int l = 1; l < 8; ++l) m = m > lanes[l] ? m : lanes[l];
  for (; j < n; ++j) m = m > s[j] ? m : s[j];
  return m;
}

// vcvtps2ph with imm 0 rounds to nearest even, handles subnormals and overflow like
// f32_to_fp16 (the F16 quantizer's parity test checks the same conversion).
void scale_round(float* s, int64_t n, float scale, bool round_f16) {
  const __m256 vs = _mm256_set1_ps(scale);
  int64_t j = 0;
  for (; j + 8 <= n; j += 8) {
    __m256 v = _mm256_mul_ps(_mm256_loadu_ps(s + j), vs);
    if (round_f16) v = _mm256_cvtph_ps(_mm256_cvtps_ph(v, 0));
    _mm256_storeu_ps(s + j, v);
  }
  for (; j < n; ++j) {
    const float v = s[j] * scale;
    s[j] = round_f16 ? _cvtsh_ss(_cvtss_sh(v, 0)) : v;
  }
}

void attn_accum_f16(const float* p, const uint16_t* v, int64_t n, int32_t hd, float* acc) {
  accum_lanes(p, v, n, hd, acc, [](const uint16_t* ptr) { return load_f16x8(ptr); });
}

void attn_accum_f32(const float* p, const float* v, int64_t n, int32_t hd, float* acc) {
  accum_lanes(p, v, n, hd, acc, [](const float* ptr) { return _mm256_loadu_ps(ptr); });
}

}  // namespace

// ---- the type table's AVX2 entries (isa_kernels.h) -------------------------------------

void mm_f32_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_f32;
  mk.gemm = &gemm_from_vec_dot<&vec_dot_f32>;
}
void mm_f16_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_f16;
  mk.gemm = &gemm_from_vec_dot<&vec_dot_f16>;
}
void mm_bf16_avx2(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_bf16;
  mk.gemm = &gemm_from_vec_dot<&vec_dot_bf16>;
}
template <typename Kernel>
void set_cols(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<Kernel>;
  mk.gemm = &gemm_cols<Kernel>;
}
void mm_q4_1_avx2(MatmulKernels& mk) { set_cols<Q4_1Kernel>(mk); }
void mm_q5_1_avx2(MatmulKernels& mk) { set_cols<Q5_1Kernel>(mk); }
void mm_q2_k_avx2(MatmulKernels& mk) { set_cols<Q2_KKernel>(mk); }
void mm_q3_k_avx2(MatmulKernels& mk) { set_cols<Q3_KKernel>(mk); }
void mm_iq4_nl_avx2(MatmulKernels& mk) { set_cols<IQ4_NLKernel>(mk); }
void quantize_row_q8_0_avx2(const float* x, std::byte* y, int64_t n) { quantize_row_q8_0(x, y, n); }
void quantize_row_q8_1_avx2(const float* x, std::byte* y, int64_t n) { quantize_row_q8_1(x, y, n); }
void quantize_row_f16_avx2(const float* x, std::byte* y, int64_t n) { quantize_row_f16(x, y, n); }

void override_kernels_avx2(KernelTable& t) {
  t.name = "avx2";
  t.rms_norm_row = &rms_norm_row;
  t.silu_mul = &silu_mul;
  t.add = &add;
  t.attn_scores_f16 = &attn_scores_f16;
  t.attn_scores_f32 = &attn_scores_f32;
  t.attn_accum_f16 = &attn_accum_f16;
  t.attn_accum_f32 = &attn_accum_f32;
  t.exp_sum = &exp_sum;
  t.f16_to_f32 = &f16_to_f32;
  t.f32_to_f16 = &f32_to_f16;
  t.dequantize_q8_0 = &dequantize_q8_0;
  t.dequantize_q4_0 = &dequantize_q4_0;
  t.row_max = &row_max;
  t.scale_round = &scale_round;
  t.attn_scores_group_f32 = &attn_scores_group_loop<&attn_scores_f32>;
  t.attn_accum_group_f32 = &attn_accum_group_loop<&attn_accum_f32>;
  override_activations_avx2(t);
  override_attention_avx2(t);
}

}  // namespace lumen::kernels
