// Scalar reference kernels (see kernels_ref.h). Compiled for baseline x86-64.
//
// Every multiply and add here is rounded as written: C++ defaults to -ffp-contract=fast,
// which would fuse them into FMAs in a build for a newer ISA (LUMEN_NATIVE) and silently
// change the numerical definition. Deliberate FMAs are spelled std::fma.
#pragma GCC optimize("fp-contract=off")
#include "kernels/kernels_ref.h"

#include <cmath>
#include <cstring>
#include <vector>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels::ref {
namespace {

template <typename Block>
const Block* blocks(const std::byte* p) {
  return reinterpret_cast<const Block*>(p);
}
template <typename Block>
Block* blocks(std::byte* p) {
  return reinterpret_cast<Block*>(p);
}

// The unpacked 6-bit scales and mins of a q4_K block.
void q4_k_scales_mins(const BlockQ4_K& b, int32_t* sc, int32_t* m) {
  for (int j = 0; j < 8; ++j) {
    uint8_t s, mm;
    q4_k_scale_min(b.scales, j, &s, &mm);
    sc[j] = s;
    m[j] = mm;
  }
}

}  // namespace

// ---- dequantizers: ggml's dequantize_row_* operation by operation ------------------------

void dequantize_row_f32(const std::byte* src, float* dst, int64_t n) {
  std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float));
}

void dequantize_row_f16(const std::byte* src, float* dst, int64_t n) {
  const auto* h = reinterpret_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = fp16_to_f32(h[i]);
}

void dequantize_row_bf16(const std::byte* src, float* dst, int64_t n) {
  const auto* h = reinterpret_cast<const uint16_t*>(src);
  for (int64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(h[i]);
}

void dequantize_row_q8_0(const std::byte* src, float* y, int64_t n) {
  const BlockQ8_0* b = blocks<BlockQ8_0>(src);
  for (int64_t ib = 0; ib < n / kQk; ++ib, y += kQk) {
    const float d = fp16_to_f32(b[ib].d_f16);
    for (int i = 0; i < kQk; ++i) y[i] = b[ib].qs[i] * d;
  }
}

void dequantize_row_q8_1(const std::byte* src, float* y, int64_t n) {
  const BlockQ8_1* b = blocks<BlockQ8_1>(src);
  for (int64_t ib = 0; ib < n / kQk; ++ib, y += kQk) {
    const float d = fp16_to_f32(b[ib].d_f16);
    for (int i = 0; i < kQk; ++i) y[i] = b[ib].qs[i] * d;
  }
}

void dequantize_row_q4_0(const std::byte* src, float* y, int64_t n) {
  const BlockQ4_0* b = blocks<BlockQ4_0>(src);
  for (int64_t ib = 0; ib < n / kQk; ++ib, y += kQk) {
    const float d = fp16_to_f32(b[ib].d_f16);
    for (int i = 0; i < kQk / 2; ++i) {
      y[i] = ((b[ib].qs[i] & 15) - 8) * d;
      y[i + kQk / 2] = ((b[ib].qs[i] >> 4) - 8) * d;
    }
  }
}

// y = q * d + m (the product rounded first).
void dequantize_row_q4_1(const std::byte* src, float* y, int64_t n) {
  const BlockQ4_1* b = blocks<BlockQ4_1>(src);
  for (int64_t ib = 0; ib < n / kQk; ++ib, y += kQk) {
    const float d = fp16_to_f32(b[ib].d_f16), m = fp16_to_f32(b[ib].m_f16);
    for (int i = 0; i < kQk / 2; ++i) {
      y[i] = (b[ib].qs[i] & 15) * d + m;
      y[i + kQk / 2] = (b[ib].qs[i] >> 4) * d + m;
    }
  }
}

// The 5-bit quants of a q5_0 / q5_1 block: element i < 16 takes bit i of qh, element
// 16 + i bit 16 + i.
template <typename Block>
void q5_quants(const Block& b, int q[32]) {
  uint32_t qh;
  std::memcpy(&qh, b.qh, sizeof(qh));
  for (int i = 0; i < kQk / 2; ++i) {
    q[i] = (b.qs[i] & 15) | (((qh >> i) & 1) << 4);
    q[i + kQk / 2] = (b.qs[i] >> 4) | (((qh >> (i + 16)) & 1) << 4);
  }
}

void dequantize_row_q5_0(const std::byte* src, float* y, int64_t n) {
  const BlockQ5_0* b = blocks<BlockQ5_0>(src);
  for (int64_t ib = 0; ib < n / kQk; ++ib, y += kQk) {
    const float d = fp16_to_f32(b[ib].d_f16);
    int q[kQk];
    q5_quants(b[ib], q);
    for (int i = 0; i < kQk; ++i) y[i] = (q[i] - 16) * d;
  }
}

void dequantize_row_q5_1(const std::byte* src, float* y, int64_t n) {
  const BlockQ5_1* b = blocks<BlockQ5_1>(src);
  for (int64_t ib = 0; ib < n / kQk; ++ib, y += kQk) {
    const float d = fp16_to_f32(b[ib].d_f16), m = fp16_to_f32(b[ib].m_f16);
    int q[kQk];
    q5_quants(b[ib], q);
    for (int i = 0; i < kQk; ++i) y[i] = q[i] * d + m;
  }
}

// y = (d * sc) * q - (dmin * m), both products rounded to f32 first.
void dequantize_row_q2_k(const std::byte* src, float* y, int64_t n) {
  const BlockQ2_K* b = blocks<BlockQ2_K>(src);
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    const float d = fp16_to_f32(b[ib].d_f16), dmin = fp16_to_f32(b[ib].dmin_f16);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = b[ib].qs + 32 * h;
      for (int j = 0; j < 4; ++j) {
        for (int part = 0; part < 2; ++part) {
          const uint8_t sc = b[ib].scales[8 * h + 2 * j + part];
          const float dl = d * (sc & 15), ml = dmin * (sc >> 4);
          for (int l = 16 * part; l < 16 * part + 16; ++l) *y++ = dl * ((q[l] >> (2 * j)) & 3) - ml;
        }
      }
    }
  }
}

// y = (d * (sc - 32)) * q, q = low 2 bits - (high bit set ? 0 : 4).
void dequantize_row_q3_k(const std::byte* src, float* y, int64_t n) {
  const BlockQ3_K* b = blocks<BlockQ3_K>(src);
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    const float d = fp16_to_f32(b[ib].d_f16);
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = b[ib].qs + 32 * h;
      for (int j = 0; j < 4; ++j) {
        const int bit = 1 << (4 * h + j);
        for (int part = 0; part < 2; ++part) {
          const float dl = d * (q3_k_scale(b[ib].scales, 8 * h + 2 * j + part) - 32);
          for (int l = 16 * part; l < 16 * part + 16; ++l)
            *y++ = dl * (((q[l] >> (2 * j)) & 3) - ((b[ib].hmask[l] & bit) ? 0 : 4));
        }
      }
    }
  }
}

// As ggml's dequantize_row_q4_K: y = (d * sc) * q - (dmin * m), the two products rounded
// to f32 first.
void dequantize_row_q4_k(const std::byte* src, float* y, int64_t n) {
  const BlockQ4_K* b = blocks<BlockQ4_K>(src);
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    const float d = fp16_to_f32(b[ib].d_f16);
    const float dmin = fp16_to_f32(b[ib].dmin_f16);
    const uint8_t* q = b[ib].qs;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      q4_k_scale_min(b[ib].scales, 2 * c, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4_k_scale_min(b[ib].scales, 2 * c + 1, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * (q[l] & 15) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * (q[l] >> 4) - m2;
    }
  }
}

// q4_K's arithmetic with the fifth bit from qh.
void dequantize_row_q5_k(const std::byte* src, float* y, int64_t n) {
  const BlockQ5_K* b = blocks<BlockQ5_K>(src);
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    const float d = fp16_to_f32(b[ib].d_f16);
    const float dmin = fp16_to_f32(b[ib].dmin_f16);
    const uint8_t* q = b[ib].qs;
    const uint8_t* qh = b[ib].qh;
    for (int c = 0; c < 4; ++c, q += 32) {
      uint8_t sc, m;
      q4_k_scale_min(b[ib].scales, 2 * c, &sc, &m);
      const float d1 = d * sc, m1 = dmin * m;
      q4_k_scale_min(b[ib].scales, 2 * c + 1, &sc, &m);
      const float d2 = d * sc, m2 = dmin * m;
      for (int l = 0; l < 32; ++l) *y++ = d1 * ((q[l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4)) - m1;
      for (int l = 0; l < 32; ++l) *y++ = d2 * ((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
    }
  }
}

// As ggml's dequantize_row_q6_K: y = d * scale * (q - 32), evaluated left to right.
void dequantize_row_q6_k(const std::byte* src, float* y, int64_t n) {
  const BlockQ6_K* b = blocks<BlockQ6_K>(src);
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    const float d = fp16_to_f32(b[ib].d_f16);
    const uint8_t* ql = b[ib].ql;
    const uint8_t* qh = b[ib].qh;
    const int8_t* sc = b[ib].scales;
    for (int h = 0; h < 2; ++h, y += 128, ql += 64, qh += 32, sc += 8) {
      for (int l = 0; l < 32; ++l) {
        const int is = l / 16;
        const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        y[l + 0] = d * sc[is + 0] * q1;
        y[l + 32] = d * sc[is + 2] * q2;
        y[l + 64] = d * sc[is + 4] * q3;
        y[l + 96] = d * sc[is + 6] * q4;
      }
    }
  }
}

void dequantize_row_q8_k(const std::byte* src, float* y, int64_t n) {
  const BlockQ8_K* b = blocks<BlockQ8_K>(src);
  for (int64_t ib = 0; ib < n / kQkK; ++ib, y += kQkK)
    for (int i = 0; i < kQkK; ++i) y[i] = b[ib].d * b[ib].qs[i];
}

void dequantize_row_iq4_nl(const std::byte* src, float* y, int64_t n) {
  const BlockIQ4_NL* b = blocks<BlockIQ4_NL>(src);
  for (int64_t ib = 0; ib < n / kQk; ++ib, y += kQk) {
    const float d = fp16_to_f32(b[ib].d_f16);
    for (int i = 0; i < kQk / 2; ++i) {
      y[i] = d * kIq4nlValues[b[ib].qs[i] & 15];
      y[i + kQk / 2] = d * kIq4nlValues[b[ib].qs[i] >> 4];
    }
  }
}

// y = (d * (ls - 32)) * value.
void dequantize_row_iq4_xs(const std::byte* src, float* y, int64_t n) {
  const BlockIQ4_XS* b = blocks<BlockIQ4_XS>(src);
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    const float d = fp16_to_f32(b[ib].d_f16);
    for (int s = 0; s < 8; ++s, y += 32) {
      const int ls = ((b[ib].scales_l[s / 2] >> (4 * (s % 2))) & 15) | (((b[ib].scales_h >> (2 * s)) & 3) << 4);
      const float dl = d * (ls - 32);
      const uint8_t* q = b[ib].qs + 16 * s;
      for (int l = 0; l < 16; ++l) {
        y[l] = dl * kIq4nlValues[q[l] & 15];
        y[l + 16] = dl * kIq4nlValues[q[l] >> 4];
      }
    }
  }
}

// float -> int8 as vcvtps2dq + vpackssdw + vpacksswb do it: out-of-range and NaN become
// INT32_MIN (hence -128), everything else saturates to [-128, 127]. Only reachable when
// 127 / amax overflows (an all-subnormal block); defined here so that every table agrees.
int8_t saturate_int8_like_cvtps(float r) {
  if (!(std::fabs(r) < 2147483648.0f)) return -128;
  const int32_t v = static_cast<int32_t>(r);
  return static_cast<int8_t>(v < -128 ? -128 : (v > 127 ? 127 : v));
}

// float -> int32 as vcvtps2dq does it: out-of-range and NaN become INT32_MIN.
int32_t saturate_int32_like_cvtps(float r) {
  if (!(std::fabs(r) < 2147483648.0f)) return INT32_MIN;
  return static_cast<int32_t>(r);
}

// ggml-cpu's x86 (AVX) quantize_row_q8_0, which is what llama.cpp runs on this hardware:
//   amax = max |x|, d = fp16(amax / 127), q = round_half_even(x * (127 / amax)).
// Note the quants use 127/amax in f32, not 1/d, and ties round to even (vroundps), which
// differs from ggml's scalar reference (roundf, half away from zero).
void quantize_row_q8_0(const float* x, std::byte* y, int64_t n) {
  LUMEN_DCHECK(n % kQk == 0);
  BlockQ8_0* b = blocks<BlockQ8_0>(y);
  for (int64_t ib = 0; ib < n / kQk; ++ib, x += kQk) {
    float amax = 0.0f;
    for (int i = 0; i < kQk; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    b[ib].d_f16 = f32_to_fp16(amax / 127.0f);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    for (int i = 0; i < kQk; ++i) b[ib].qs[i] = saturate_int8_like_cvtps(std::nearbyint(x[i] * id));
  }
}

// ggml-cpu's x86 (AVX2) quantize_row_q8_1: the quants exactly as quantize_row_q8_0 above,
// plus s = fp16(d * sum(q)) with d = amax / 127 in f32 (not the fp16-rounded d).
void quantize_row_q8_1(const float* x, std::byte* y, int64_t n) {
  LUMEN_DCHECK(n % kQk == 0);
  BlockQ8_1* b = blocks<BlockQ8_1>(y);
  for (int64_t ib = 0; ib < n / kQk; ++ib, x += kQk) {
    float amax = 0.0f;
    for (int i = 0; i < kQk; ++i) amax = std::fmax(amax, std::fabs(x[i]));
    const float d = amax / 127.0f;
    b[ib].d_f16 = f32_to_fp16(d);
    const float id = amax != 0.0f ? 127.0f / amax : 0.0f;
    uint32_t sum = 0;  // wraps like the vector adds (only an all-subnormal block overflows)
    for (int i = 0; i < kQk; ++i) {
      b[ib].qs[i] = saturate_int8_like_cvtps(std::nearbyint(x[i] * id));
      sum += static_cast<uint32_t>(saturate_int32_like_cvtps(std::nearbyint(x[i] * id)));
    }
    b[ib].s_f16 = f32_to_fp16(d * static_cast<float>(static_cast<int32_t>(sum)));
  }
}

// ggml's quantize_row_q8_K_ref (also used by ggml-cpu on x86): the scale comes from the
// signed value of largest magnitude (first one on ties), iscale = -127 / max, so that value
// maps to -127 and |q| <= 127; q = nearest_int(iscale * x) clamped to 127; d = 1 / iscale.
void quantize_row_q8_k(const float* x, std::byte* y, int64_t n) {
  LUMEN_DCHECK(n % kQkK == 0);
  BlockQ8_K* b = blocks<BlockQ8_K>(y);
  for (int64_t ib = 0; ib < n / kQkK; ++ib, x += kQkK) {
    float amax = 0.0f, max = 0.0f;
    for (int i = 0; i < kQkK; ++i) {
      const float ax = std::fabs(x[i]);
      if (ax > amax) {
        amax = ax;
        max = x[i];
      }
    }
    if (amax == 0.0f) {
      std::memset(&b[ib], 0, sizeof(BlockQ8_K));
      continue;
    }
    const float iscale = -127.0f / max;
    for (int i = 0; i < kQkK; ++i) {
      const int v = nearest_int(iscale * x[i]);
      b[ib].qs[i] = static_cast<int8_t>(v < 127 ? v : 127);
    }
    for (int j = 0; j < kQkK / 16; ++j) {
      int sum = 0;
      for (int i = 0; i < 16; ++i) sum += b[ib].qs[16 * j + i];
      b[ib].bsums[j] = static_cast<int16_t>(sum);
    }
    b[ib].d = 1.0f / iscale;
  }
}

// F16 / BF16 weights: ggml converts the activations to the weight type (round to nearest
// even) and then multiplies in f32.
void quantize_row_f16(const float* x, std::byte* y, int64_t n) {
  auto* h = reinterpret_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_fp16(x[i]);
}

void quantize_row_bf16(const float* x, std::byte* y, int64_t n) {
  auto* h = reinterpret_cast<uint16_t*>(y);
  for (int64_t i = 0; i < n; ++i) h[i] = f32_to_bf16(x[i]);
}

// Float dots: like ggml's scalar paths, each product is rounded to f32 (exact for f16 and
// bf16 inputs) and the sum is kept in double.
// The f32 dot sums in the order of the SIMD tables (so scalar and SIMD agree bit for bit):
// 4 accumulators x 8 lanes over steps of 32 elements (FMA), then steps of 8 into the first,
// lanes combined as (a0 + a1) + (a2 + a3) and reduced 8 -> 4 -> 2 -> 1, plus the n % 8
// tail summed sequentially. This order matters more than it seems: with an F16 KV cache,
// tiny differences flip F16 roundings, and over a 500-token context a more exact double
// sum measured |dlogit| 0.021 against the stories260K stress golden where this lane order
// measures 0.011 (tolerance 0.02): llama.cpp itself sums f32 dots in float vector lanes.
float vec_dot_f32_f32(int64_t n, const std::byte* w, const std::byte* x) {
  const auto* a = reinterpret_cast<const float*>(w);
  const auto* b = reinterpret_cast<const float*>(x);
  float acc[4][8] = {};
  int64_t i = 0;
  for (; i + 32 <= n; i += 32)
    for (int j = 0; j < 4; ++j)
      for (int l = 0; l < 8; ++l) acc[j][l] = std::fma(a[i + 8 * j + l], b[i + 8 * j + l], acc[j][l]);
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) acc[0][l] = std::fma(a[i + l], b[i + l], acc[0][l]);
  float v[8];
  for (int l = 0; l < 8; ++l) v[l] = (acc[0][l] + acc[1][l]) + (acc[2][l] + acc[3][l]);
  for (int l = 0; l < 4; ++l) v[l] += v[l + 4];
  v[0] += v[2];
  v[1] += v[3];
  const float lanes = v[0] + v[1];
  float tail = 0.0f;
  for (; i < n; ++i) tail += a[i] * b[i];
  return lanes + tail;
}

float vec_dot_f16_f16(int64_t n, const std::byte* w, const std::byte* x) {
  const auto* a = reinterpret_cast<const uint16_t*>(w);
  const auto* b = reinterpret_cast<const uint16_t*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(fp16_to_f32(a[i]) * fp16_to_f32(b[i]));
  return static_cast<float>(sum);
}

float vec_dot_bf16_bf16(int64_t n, const std::byte* w, const std::byte* x) {
  const auto* a = reinterpret_cast<const uint16_t*>(w);
  const auto* b = reinterpret_cast<const uint16_t*>(x);
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(bf16_to_f32(a[i]) * bf16_to_f32(b[i]));
  return static_cast<float>(sum);
}

// Integer block dots: each block's sum of int8 products is exact; it is scaled by
// (d_w * d_x) in f32 and accumulated in f32 in block order, as ggml does
// (sumf += (float)sumi * (d_w * d_x)).
float vec_dot_q8_0_q8_0(int64_t n, const std::byte* w, const std::byte* x) {
  const BlockQ8_0* bw = blocks<BlockQ8_0>(w);
  const BlockQ8_0* bx = blocks<BlockQ8_0>(x);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    int32_t sumi = 0;
    for (int i = 0; i < kQk; ++i) sumi += bw[ib].qs[i] * bx[ib].qs[i];
    sumf += static_cast<float>(sumi) * (fp16_to_f32(bw[ib].d_f16) * fp16_to_f32(bx[ib].d_f16));
  }
  return sumf;
}

float vec_dot_q4_0_q8_0(int64_t n, const std::byte* w, const std::byte* x) {
  const BlockQ4_0* bw = blocks<BlockQ4_0>(w);
  const BlockQ8_0* bx = blocks<BlockQ8_0>(x);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    int32_t sumi = 0;
    for (int i = 0; i < kQk / 2; ++i) {
      sumi += ((bw[ib].qs[i] & 15) - 8) * bx[ib].qs[i];
      sumi += ((bw[ib].qs[i] >> 4) - 8) * bx[ib].qs[i + kQk / 2];
    }
    sumf += static_cast<float>(sumi) * (fp16_to_f32(bw[ib].d_f16) * fp16_to_f32(bx[ib].d_f16));
  }
  return sumf;
}

// q4_1 / q5_1 against q8_1: w = d_w * q + m and x = d_x * q8, so per block
//   sum w x = (d_w * d_x) * sum q q8 + m * (d_x * sum q8) = (d_w * d_x) * sumi + m * s_x
// with s_x the activation block's stored sum. As ggml's AVX2 kernels: the first terms
// accumulate in acc, the m * s_x terms in acc_m, and the result is acc + acc_m.
template <typename Block, bool kFiveBit>
float vec_dot_q_1_q8_1(int64_t n, const std::byte* w, const std::byte* x) {
  const Block* bw = blocks<Block>(w);
  const BlockQ8_1* bx = blocks<BlockQ8_1>(x);
  float acc = 0.0f, acc_m = 0.0f;
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    int q[kQk];
    if constexpr (kFiveBit) {
      q5_quants(bw[ib], q);
    } else {
      for (int i = 0; i < kQk / 2; ++i) {
        q[i] = bw[ib].qs[i] & 15;
        q[i + kQk / 2] = bw[ib].qs[i] >> 4;
      }
    }
    int32_t sumi = 0;
    for (int i = 0; i < kQk; ++i) sumi += q[i] * bx[ib].qs[i];
    acc += (fp16_to_f32(bw[ib].d_f16) * fp16_to_f32(bx[ib].d_f16)) * static_cast<float>(sumi);
    acc_m += fp16_to_f32(bw[ib].m_f16) * fp16_to_f32(bx[ib].s_f16);
  }
  return acc + acc_m;
}

float vec_dot_q4_1_q8_1(int64_t n, const std::byte* w, const std::byte* x) {
  return vec_dot_q_1_q8_1<BlockQ4_1, false>(n, w, x);
}
float vec_dot_q5_1_q8_1(int64_t n, const std::byte* w, const std::byte* x) {
  return vec_dot_q_1_q8_1<BlockQ5_1, true>(n, w, x);
}

// As q4_0: sumf += (float)sumi * (d_w * d_x), sumi = sum (q - 16) q8 exact.
float vec_dot_q5_0_q8_0(int64_t n, const std::byte* w, const std::byte* x) {
  const BlockQ5_0* bw = blocks<BlockQ5_0>(w);
  const BlockQ8_0* bx = blocks<BlockQ8_0>(x);
  float sumf = 0.0f;
  for (int64_t ib = 0; ib < n / kQk; ++ib) {
    int q[kQk];
    q5_quants(bw[ib], q);
    int32_t sumi = 0;
    for (int i = 0; i < kQk; ++i) sumi += (q[i] - 16) * bx[ib].qs[i];
    sumf += static_cast<float>(sumi) * (fp16_to_f32(bw[ib].d_f16) * fp16_to_f32(bx[ib].d_f16));
  }
  return sumf;
}

// The K formats with a min (q2_K, q4_K, q5_K), per super-block: sumi = sum_s sc[s] * (q . q8
// over sub-block s) and summ = sum_s m[s] * (sum of q8 over sub-block s, from bsums), both
// exact integers; then as ggml's AVX2 kernels: acc += (d_x * d) * sumi,
// acc_m += (-d_x * dmin) * summ, and the result is acc + acc_m.
struct KMinAcc {
  float acc = 0.0f, acc_m = 0.0f;
  void add(const BlockQ8_K& bx, uint16_t d_f16, uint16_t dmin_f16, int32_t sumi, int32_t summ) {
    const float d = bx.d * fp16_to_f32(d_f16);
    const float dmin = -bx.d * fp16_to_f32(dmin_f16);
    acc += d * static_cast<float>(sumi);
    acc_m += dmin * static_cast<float>(summ);
  }
  float result() const { return acc + acc_m; }
};

// q2_K: 16 sub-blocks of 16, sc = scales & 15, m = scales >> 4.
float vec_dot_q2_k_q8_k(int64_t n, const std::byte* w, const std::byte* x) {
  const BlockQ2_K* bw = blocks<BlockQ2_K>(w);
  const BlockQ8_K* bx = blocks<BlockQ8_K>(x);
  KMinAcc a;
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    int32_t summ = 0;
    for (int s = 0; s < 16; ++s) summ += bx[ib].bsums[s] * (bw[ib].scales[s] >> 4);
    int32_t sumi = 0;
    const int8_t* q8 = bx[ib].qs;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = bw[ib].qs + 32 * h;
      for (int j = 0; j < 4; ++j, q8 += 32) {
        for (int part = 0; part < 2; ++part) {
          int32_t sub = 0;
          for (int l = 16 * part; l < 16 * part + 16; ++l) sub += ((q[l] >> (2 * j)) & 3) * q8[l];
          sumi += (bw[ib].scales[8 * h + 2 * j + part] & 15) * sub;
        }
      }
    }
    a.add(bx[ib], bw[ib].d_f16, bw[ib].dmin_f16, sumi, summ);
  }
  return a.result();
}

// q3_K: sumi = sum_s (sc[s] - 32) * (q . q8 over sub-block s), q in [-4, 3]; acc += (d_x * d) * sumi.
float vec_dot_q3_k_q8_k(int64_t n, const std::byte* w, const std::byte* x) {
  const BlockQ3_K* bw = blocks<BlockQ3_K>(w);
  const BlockQ8_K* bx = blocks<BlockQ8_K>(x);
  float acc = 0.0f;
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    int32_t sumi = 0;
    const int8_t* q8 = bx[ib].qs;
    for (int h = 0; h < 2; ++h) {
      const uint8_t* q = bw[ib].qs + 32 * h;
      for (int j = 0; j < 4; ++j, q8 += 32) {
        const int bit = 1 << (4 * h + j);
        for (int part = 0; part < 2; ++part) {
          int32_t sub = 0;
          for (int l = 16 * part; l < 16 * part + 16; ++l)
            sub += (((q[l] >> (2 * j)) & 3) - ((bw[ib].hmask[l] & bit) ? 0 : 4)) * q8[l];
          sumi += (q3_k_scale(bw[ib].scales, 8 * h + 2 * j + part) - 32) * sub;
        }
      }
    }
    acc += (bx[ib].d * fp16_to_f32(bw[ib].d_f16)) * static_cast<float>(sumi);
  }
  return acc;
}

// q5_K: q4_K's sums with 5-bit quants.
float vec_dot_q5_k_q8_k(int64_t n, const std::byte* w, const std::byte* x) {
  const BlockQ5_K* bw = blocks<BlockQ5_K>(w);
  const BlockQ8_K* bx = blocks<BlockQ8_K>(x);
  KMinAcc a;
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    uint8_t sc[8], m[8];
    for (int j = 0; j < 8; ++j) q4_k_scale_min(bw[ib].scales, j, &sc[j], &m[j]);
    int32_t summ = 0;
    for (int j = 0; j < 16; ++j) summ += bx[ib].bsums[j] * m[j / 2];
    int32_t sumi = 0;
    const uint8_t* q = bw[ib].qs;
    const uint8_t* qh = bw[ib].qh;
    const int8_t* q8 = bx[ib].qs;
    for (int c = 0; c < 4; ++c, q += 32, q8 += 64) {
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += ((q[l] & 15) | (((qh[l] >> (2 * c)) & 1) << 4)) * q8[l];
        hi += ((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) * q8[l + 32];
      }
      sumi += sc[2 * c] * lo + sc[2 * c + 1] * hi;
    }
    a.add(bx[ib], bw[ib].d_f16, bw[ib].dmin_f16, sumi, summ);
  }
  return a.result();
}

// Per super-block: sumi = sum_s sc[s] * (q4 . q8 over sub-block s) and
// summ = sum_s m[s] * (sum of q8 over sub-block s, from bsums), both exact integers; then
// as ggml's AVX2 kernel: acc += (d_x * d) * sumi, acc_m += (-d_x * dmin) * summ, and the
// result is acc + acc_m.
float vec_dot_q4_k_q8_k(int64_t n, const std::byte* w, const std::byte* x) {
  const BlockQ4_K* bw = blocks<BlockQ4_K>(w);
  const BlockQ8_K* bx = blocks<BlockQ8_K>(x);
  KMinAcc a;
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    int32_t sc[8], m[8];
    q4_k_scales_mins(bw[ib], sc, m);
    int32_t summ = 0;
    for (int j = 0; j < 16; ++j) summ += bx[ib].bsums[j] * m[j / 2];
    int32_t sumi = 0;
    const uint8_t* q4 = bw[ib].qs;
    const int8_t* q8 = bx[ib].qs;
    for (int c = 0; c < 4; ++c, q4 += 32, q8 += 64) {
      int32_t lo = 0, hi = 0;
      for (int l = 0; l < 32; ++l) {
        lo += (q4[l] & 15) * q8[l];
        hi += (q4[l] >> 4) * q8[l + 32];
      }
      sumi += sc[2 * c] * lo + sc[2 * c + 1] * hi;
    }
    a.add(bx[ib], bw[ib].d_f16, bw[ib].dmin_f16, sumi, summ);
  }
  return a.result();
}

// Per super-block: sumi = sum_s scales[s] * ((q6 - 32) . q8 over sub-block s), exact;
// acc += (d_x * d) * sumi.
float vec_dot_q6_k_q8_k(int64_t n, const std::byte* w, const std::byte* x) {
  const BlockQ6_K* bw = blocks<BlockQ6_K>(w);
  const BlockQ8_K* bx = blocks<BlockQ8_K>(x);
  float acc = 0.0f;
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    const uint8_t* ql = bw[ib].ql;
    const uint8_t* qh = bw[ib].qh;
    const int8_t* q8 = bx[ib].qs;
    int32_t sub[16] = {};  // per 16-element sub-block
    for (int h = 0; h < 2; ++h, ql += 64, qh += 32, q8 += 128) {
      for (int l = 0; l < 32; ++l) {
        const int is = 8 * h + l / 16;
        const int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
        const int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
        const int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
        const int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
        sub[is + 0] += q1 * q8[l];
        sub[is + 2] += q2 * q8[l + 32];
        sub[is + 4] += q3 * q8[l + 64];
        sub[is + 6] += q4 * q8[l + 96];
      }
    }
    int32_t sumi = 0;
    for (int s = 0; s < 16; ++s) sumi += bw[ib].scales[s] * sub[s];
    const float d = bx[ib].d * fp16_to_f32(bw[ib].d_f16);
    acc += d * static_cast<float>(sumi);
  }
  return acc;
}

// ggml's rms_norm: sum of squares (each square rounded to f32) in double, mean converted
// to f32, scale = 1 / sqrtf(mean + eps); y = x * scale, then the separate ggml_mul by the
// norm weight rounds again.
void rms_norm_row(const float* x, const float* w, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i] * x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(mean + eps);
  if (w) {
    for (int64_t i = 0; i < n; ++i) out[i] = (x[i] * scale) * w[i];
  } else {
    for (int64_t i = 0; i < n; ++i) out[i] = x[i] * scale;
  }
}

// silu(g) = g / (1 + expf(-g)) (ggml_silu_f32), then the separate multiply by up.
void silu_mul(float* gate, const float* up, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const float g = gate[i];
    gate[i] = (g / (1.0f + std::exp(-g))) * up[i];
  }
}

// ggml_norm (mean and the sum of squared deviations in double, v = x - mean kept in f32),
// then ggml_mul by the weight and ggml_add of the bias, each rounding to f32.
void layer_norm_row(const float* x, const float* w, const float* b, int64_t n, float eps, float* out) {
  double sum = 0.0;
  for (int64_t i = 0; i < n; ++i) sum += static_cast<double>(x[i]);
  const float mean = static_cast<float>(sum / static_cast<double>(n));
  double sum2 = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float v = x[i] - mean;
    sum2 += static_cast<double>(v * v);
  }
  const float variance = static_cast<float>(sum2 / static_cast<double>(n));
  const float scale = 1.0f / std::sqrt(variance + eps);
  for (int64_t i = 0; i < n; ++i) {
    float y = (x[i] - mean) * scale;
    if (w) y = y * w[i];
    if (b) y = y + b[i];
    out[i] = y;
  }
}

const float* gelu_f16_table() {
  static const std::vector<float> kTable = [] {
    constexpr float kCoefA = 0.044715f;
    constexpr float kSqrt2OverPi = 0.79788456080286535587989211986876f;
    std::vector<float> t(65536);
    for (uint32_t h = 0; h < 65536; ++h) {
      const float x = fp16_to_f32(static_cast<uint16_t>(h));
      const float g = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * x * (1.0f + kCoefA * x * x)));
      t[h] = fp16_to_f32(f32_to_fp16(g));
    }
    return t;
  }();
  return kTable.data();
}

// ggml_vec_gelu_f32 with GGML_GELU_FP16 (what ggml-cpu builds): the input rounded to fp16
// indexes the table; outside (-10, 10) the function is taken as 0 or x. Then ggml_mul.
void gelu_mul(float* gate, const float* up, int64_t n) {
  const float* table = gelu_f16_table();
  for (int64_t i = 0; i < n; ++i) {
    const float x = gate[i];
    float g;
    if (x <= -10.0f) g = 0.0f;
    else if (x >= 10.0f) g = x;
    else g = table[f32_to_fp16(x)];
    gate[i] = up ? g * up[i] : g;
  }
}

// ggml_scale(1 / cap), ggml_tanh (tanhf), ggml_scale(cap).
void softcap(float* s, int64_t n, float cap) {
  const float inv = 1.0f / cap;
  for (int64_t i = 0; i < n; ++i) s[i] = std::tanh(s[i] * inv) * cap;
}

void add(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// Attention dots as ggml's scalar F16 / F32 vec_dot (products rounded to f32, exact for
// f16 inputs; sum in double), then the softmax's scale multiply in f32.
void attn_scores_f16(const uint16_t* k, int64_t n, const uint16_t* q, int32_t head_dim,
                     float scale, float* scores) {
  for (int64_t s = 0; s < n; ++s, k += head_dim) {
    double sum = 0.0;
    for (int32_t i = 0; i < head_dim; ++i)
      sum += static_cast<double>(fp16_to_f32(k[i]) * fp16_to_f32(q[i]));
    scores[s] = static_cast<float>(sum) * scale;
  }
}

void attn_scores_f32(const float* k, int64_t n, const float* q, int32_t head_dim, float scale,
                     float* scores) {
  for (int64_t s = 0; s < n; ++s, k += head_dim) {
    double sum = 0.0;
    for (int32_t i = 0; i < head_dim; ++i) sum += static_cast<double>(k[i] * q[i]);
    scores[s] = static_cast<float>(sum) * scale;
  }
}

void attn_accum_f16(const float* p, const uint16_t* v, int64_t n, int32_t head_dim, float* acc) {
  for (int64_t s = 0; s < n; ++s, v += head_dim)
    for (int32_t i = 0; i < head_dim; ++i) acc[i] += p[s] * fp16_to_f32(v[i]);
}

void attn_accum_f32(const float* p, const float* v, int64_t n, int32_t head_dim, float* acc) {
  for (int64_t s = 0; s < n; ++s, v += head_dim)
    for (int32_t i = 0; i < head_dim; ++i) acc[i] += p[s] * v[i];
}

double exp_sum(float* s, int64_t n, float max) {
  double sum = 0.0;
  for (int64_t j = 0; j < n; ++j) {
    s[j] = std::exp(s[j] - max);
    sum += s[j];
  }
  return sum;
}

void f16_to_f32(const uint16_t* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = fp16_to_f32(x[i]);
}

void f32_to_f16(const float* x, uint16_t* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] = f32_to_fp16(x[i]);
}

float row_max(const float* s, int64_t n) {
  float m = -INFINITY;
  for (int64_t j = 0; j < n; ++j) m = std::max(m, s[j]);
  return m;
}

void scale_round(float* s, int64_t n, float scale, bool round_f16) {
  for (int64_t j = 0; j < n; ++j) s[j] = round_f16 ? round_fp16(s[j] * scale) : s[j] * scale;
}

}  // namespace lumen::kernels::ref

namespace lumen::kernels {

// The row ops; the matmul entries come from the type table (fill_matmul_kernels).
KernelTable make_reference_kernel_table() {
  KernelTable t;
  t.name = "scalar";
  t.rms_norm_row = &ref::rms_norm_row;
  t.silu_mul = &ref::silu_mul;
  t.layer_norm_row = &ref::layer_norm_row;
  t.gelu_mul = &ref::gelu_mul;
  t.softcap = &ref::softcap;
  t.add = &ref::add;
  t.attn_scores_f16 = &ref::attn_scores_f16;
  t.attn_scores_f32 = &ref::attn_scores_f32;
  t.attn_accum_f16 = &ref::attn_accum_f16;
  t.attn_accum_f32 = &ref::attn_accum_f32;
  t.exp_sum = &ref::exp_sum;
  t.f16_to_f32 = &ref::f16_to_f32;
  t.f32_to_f16 = &ref::f32_to_f16;
  t.dequantize_q8_0 = &ref::dequantize_row_q8_0;
  t.dequantize_q4_0 = &ref::dequantize_row_q4_0;
  t.row_max = &ref::row_max;
  t.scale_round = &ref::scale_round;
  t.attn_scores_group_f32 = &attn_scores_group_loop<&ref::attn_scores_f32>;
  t.attn_accum_group_f32 = &attn_accum_group_loop<&ref::attn_accum_f32>;
  return t;
}

}  // namespace lumen::kernels
