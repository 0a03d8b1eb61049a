// IEEE half (fp16) and bfloat16 <-> float conversions, scalar and exact.
// fp32 -> fp16 rounds to nearest even (what F16C's _mm_cvtps_ph(x, 0) and ggml do);
// fp32 -> bf16 rounds to nearest even, NaN stays NaN (as ggml_compute_fp32_to_bf16).
#pragma once

#include <cstdint>
#include <cstring>

namespace lumen {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

inline float fp16_to_f32(uint16_t h) {
  const uint32_t sign = (uint32_t)(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    if (mant == 0) return f32_from_bits(sign);
    // subnormal: value = mant * 2^-24
    float f = (float)mant * (1.0f / 16777216.0f);
    return sign ? -f : f;
  }
  if (exp == 31) return f32_from_bits(sign | 0x7f800000u | (mant << 13));
  return f32_from_bits(sign | ((exp + 112) << 23) | (mant << 13));
}

inline uint16_t f32_to_fp16(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) {  // inf or nan
    return (uint16_t)(sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u));
  }
  if (abs >= 0x477ff000u) return (uint16_t)(sign | 0x7c00u);  // rounds to >= 65520 -> inf
  if (abs < 0x38800000u) {
    // result is subnormal (or zero) in fp16: value / 2^-24, rounded to nearest even
    if (abs < 0x33000000u) return (uint16_t)sign;  // < 2^-25 -> 0
    const uint32_t e = abs >> 23;
    const uint32_t m = (abs & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126 - e;  // 14 + (112 - e) + ... : bring to units of 2^-24
    // value = m * 2^(e-150); in units of 2^-24: m * 2^(e-126) = m >> (126-e)
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;
    return (uint16_t)(sign | q);
  }
  // normal: rebias exponent, round mantissa from 23 to 10 bits (nearest even)
  uint32_t r = abs - 0x38000000u;  // exponent rebias 127 -> 15
  const uint32_t lsb = (r >> 13) & 1u;
  r += 0xfffu + lsb;
  return (uint16_t)(sign | (r >> 13));
}

inline float bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

inline uint16_t f32_to_bf16(float f) {
  uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((x >> 16) | 64);  // quiet nan
  return (uint16_t)((x + (0x7fffu + ((x >> 16) & 1u))) >> 16);
}

// Round a float through fp16 and back (used to emulate an F16 KV cache exactly).
inline float round_fp16(float f) { return fp16_to_f32(f32_to_fp16(f)); }

}  // namespace lumen
