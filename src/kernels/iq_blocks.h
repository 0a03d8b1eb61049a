// The i-quant block formats of GGUF (GGML's IQ4_NL, IQ4_XS, IQ3_S, IQ3_XXS, IQ2_S, IQ2_XS,
// IQ2_XXS, IQ1_S, IQ1_M), byte for byte, and their widening to one integer form.
//
// Every 256-element i-quant super-block is, for the dot products, the same thing (IqWide):
//
//   w[i] = d * kScaleMul * sc[i / 16] * v[i],   v int8 in [-127, 113], sc int16 in [-32, 31]
//
// with a per-type power of two kScaleMul (1/8 for the 2-bit and 1-bit types, whose scales
// are 2s + 1 over 8; 1/4 for IQ3_XXS; 1 for IQ3_S and IQ4_XS). The 1-bit types' +-1/8
// grid shift is folded into v as 8 * grid +- 1 (so their v lies in [-9, 9]). A dot product
// with a q8_K row is then, per super-block, one exact int32
//
//   S = sum_s sc[s] * sum_{i in sub-block s} v[i] * q8[i]       (|S| < 2^28)
//
// and one float step, acc += (d_x * d_w) * (float)S; the row's result is acc * kScaleMul
// (exact: a power of two). Every kernel table computes S exactly and the float steps in the
// same order, so all of them agree with the scalar reference bit for bit.
//
// IQ4_NL is the exception: 32-element blocks with one fp16 scale, dotted with q8_0 as ggml
// does (w[i] = d * kIq4nlValues[nibble]).
//
// Like quant_blocks.h, everything here is a plain struct or `static inline` (one copy per
// translation unit, so no per-ISA code can be merged into the baseline one).
#pragma once

#include <cstdint>
#include <cstring>

#include "kernels/iq_grids.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {

// The block structs are quant_blocks.h's (byte for byte GGML's). What their bits mean:
//
// iq4_nl: w[i] = d * kIq4nlValues[q[i]], q[i] = i < 16 ? qs[i] & 15 : qs[i-16] >> 4.
// iq4_xs: 8 sub-blocks b of 32; w = d * (ls[b] - 32) * kIq4nlValues[q], ls 6-bit: low 4 bits
//   in nibble b % 2 of scales_l[b / 2], high 2 bits at bit 2b of scales_h; the quants of
//   sub-block b are qs[16b ..] as in iq4_nl.
// iq3_s: 8 sub-blocks b of 32; w = d * (1 + 2 * s[b]) * sign * grid value, s the nibble b % 2
//   of scales[b / 2]. Group g of 4 elements (g < 64): grid entry
//   kIq3sGrid[qs[g] | bit (g % 8) of qh[g / 8] << 8]; sign of element i: bit i % 8 of
//   signs[i / 8].
// iq3_xxs: 8 sub-blocks b of 32; group g of 4 elements: kIq3xxsGrid[qs[g]], g < 64; the
//   little-endian 32-bit word u at qs + 64 + 4b ("scales and signs", iq3_xxs_sas) holds the
//   sub-block's scale (u >> 28; w = d * (2s + 1) / 4 * sign * grid value) and four 7-bit sign
//   fields (bits 7l .. 7l+6 for elements 8l .. 8l+7 of the sub-block; the eighth sign makes
//   the parity even).
// iq2_xxs: 8 sub-blocks b of 32; words qs[4b .. 4b+3] as two uint32 (a, u): the bytes of a
//   index kIq2xxsGrid for the four groups of 8; u as iq3_xxs's scales-and-signs word
//   (w = d * (2s + 1) / 8 * sign * grid value).
// iq2_xs: group g of 8: qs[g] & 511 indexes kIq2xsGrid, qs[g] >> 9 is a 7-bit sign field
//   (eighth sign = parity); scale of 16-element half h of sub-block b: nibble h of scales[b]
//   (w = d * (2s + 1) / 8 * sign * grid value).
// iq2_s: group g of 8: kIq2sGrid[qs[g] | ((qh[g / 4] >> 2 (g % 4)) & 3) << 8], g < 32; its
//   signs: the byte qs[32 + g] (iq2_s_signs), one bit per element; scales as iq2_xs.
// iq1_s: 8 sub-blocks b of 32; group g of 8: kIq1sGrid[qs[g] | ((qh[b] >> 3 (g % 4)) & 7) << 8];
//   qh[b] bits 12..14: scale s, bit 15: shift sign;
//   w = d * (2s + 1) * (grid value + (bit 15 ? -1/8 : 1/8)).
// iq1_m: group g of 8: index qs[g] | ((qh[g / 2] >> 4 (g % 2)) & 7) << 8, shift sign bit
//   3 + 4 (g % 2) of qh[g / 2]; the 3-bit scale of 16-element sub-block t is at bit 3 (t % 4)
//   of the uint16 scales word t / 4; the fp16 d is the top nibbles of the four scales words
//   (word k's bits 12..15 are d's bits 4k .. 4k+3). w = d * (2s + 1) * (grid value +- 1/8).

// iq2_s's sign bytes, one per group of 8 (the second half of qs).
static inline const uint8_t* iq2_s_signs(const BlockIQ2_S& b) { return b.qs + 32; }
// iq3_xxs's eight scales-and-signs words (after the 64 grid indices of qs).
static inline const uint8_t* iq3_xxs_sas(const BlockIQ3_XXS& b) { return b.qs + 64; }

// ---- widening ------------------------------------------------------------------------

struct IqWide {
  int8_t v[kQkK];
  int16_t sc[16];  // per 16-element sub-block
  uint16_t d_f16;
};

// The eight signs of a 7-bit iq2/iq3 sign field: the eighth makes the parity even (this is
// ggml's ksigns_iq2xs table, computed rather than transcribed; iq_grids_test.cc checks it
// against the table's checksum).
struct IqSignTable {
  uint8_t v[128];
};
inline constexpr IqSignTable kIqSigns = [] {
  IqSignTable t{};
  for (uint32_t i = 0; i < 128; ++i) {
    uint32_t parity = 0;
    for (uint32_t b = i; b != 0; b >>= 1) parity ^= b & 1;
    t.v[i] = static_cast<uint8_t>(i | parity << 7);
  }
  return t;
}();
static inline uint32_t iq_signs8(uint32_t seven) { return kIqSigns.v[seven & 127]; }
static inline uint16_t iq_load16(const uint8_t* p) {
  uint16_t v;
  std::memcpy(&v, p, 2);
  return v;
}
static inline uint32_t iq_load32(const void* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
static inline uint64_t iq_load64(const void* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}
// kN grid bytes (element j in byte j) with the sign bits applied.
template <int kN = 8>
static inline void iq_put8(int8_t* out, uint64_t grid, uint32_t signs) {
  for (int j = 0; j < kN; ++j) {
    const int g = static_cast<int>((grid >> (8 * j)) & 0xff);
    out[j] = static_cast<int8_t>((signs >> j) & 1 ? -g : g);
  }
}
// 8 values 8 * grid +- 1 of the 1-bit types (grid bytes are int8 -1, 0, 1).
static inline void iq1_put8(int8_t* out, uint64_t grid, bool neg_shift) {
  for (int j = 0; j < 8; ++j)
    out[j] = static_cast<int8_t>(8 * static_cast<int8_t>((grid >> (8 * j)) & 0xff) + (neg_shift ? -1 : 1));
}

// iq2_xs / iq2_s: 2s + 1 for the two 4-bit s of each byte (low nibble first).
static inline void iq2_nibble_scales(const uint8_t* scales, int16_t* sc) {
  for (int ib = 0; ib < 8; ++ib) {
    sc[2 * ib] = static_cast<int16_t>(2 * (scales[ib] & 15) + 1);
    sc[2 * ib + 1] = static_cast<int16_t>(2 * (scales[ib] >> 4) + 1);
  }
}

struct WidenIQ4_XS {
  using Block = BlockIQ4_XS;
  static uint16_t d_bits(const Block& b) { return b.d_f16; }
  static constexpr float kScaleMul = 1.0f;
  static void scales(const Block& b, int16_t* sc) {
    for (int ib = 0; ib < 8; ++ib) {
      const int ls = ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 15) | (((b.scales_h >> (2 * ib)) & 3) << 4);
      sc[2 * ib] = sc[2 * ib + 1] = static_cast<int16_t>(ls - 32);
    }
  }
  static void widen(const Block& b, IqWide& o) {
    o.d_f16 = b.d_f16;
    scales(b, o.sc);
    for (int ib = 0; ib < 8; ++ib) {
      for (int j = 0; j < 16; ++j) {
        o.v[32 * ib + j] = kIq4nlValues[b.qs[16 * ib + j] & 15];
        o.v[32 * ib + 16 + j] = kIq4nlValues[b.qs[16 * ib + j] >> 4];
      }
    }
  }
};

struct WidenIQ3_S {
  using Block = BlockIQ3_S;
  static uint16_t d_bits(const Block& b) { return b.d_f16; }
  static constexpr float kScaleMul = 1.0f;
  static void scales(const Block& b, int16_t* sc) {
    for (int ib = 0; ib < 8; ++ib)
      sc[2 * ib] = sc[2 * ib + 1] = static_cast<int16_t>(1 + 2 * ((b.scales[ib / 2] >> (4 * (ib % 2))) & 15));
  }
  static void widen(const Block& b, IqWide& o) {
    o.d_f16 = b.d_f16;
    scales(b, o.sc);
    for (int ib = 0; ib < 8; ++ib) {
      for (int k = 0; k < 8; ++k) {  // groups of 4
        const int g = 8 * ib + k;
        const uint32_t grid = kIq3sGrid[b.qs[g] | (((b.qh[ib] >> k) & 1) << 8)];
        const uint32_t signs = b.signs[g / 2] >> (4 * (g % 2));
        iq_put8<4>(o.v + 4 * g, grid, signs);
      }
    }
  }
};

struct WidenIQ3_XXS {
  using Block = BlockIQ3_XXS;
  static uint16_t d_bits(const Block& b) { return b.d_f16; }
  static constexpr float kScaleMul = 0.25f;
  static void scales(const Block& b, int16_t* sc) {
    for (int ib = 0; ib < 8; ++ib) sc[2 * ib] = sc[2 * ib + 1] = static_cast<int16_t>(2 * (iq_load32(iq3_xxs_sas(b) + 4 * ib) >> 28) + 1);
  }
  static void widen(const Block& b, IqWide& o) {
    o.d_f16 = b.d_f16;
    scales(b, o.sc);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t u = iq_load32(iq3_xxs_sas(b) + 4 * ib);
      for (int l = 0; l < 4; ++l) {
        const uint32_t signs = iq_signs8((u >> (7 * l)) & 127);
        const uint64_t grid = kIq3xxsGrid[b.qs[8 * ib + 2 * l]] |
                              static_cast<uint64_t>(kIq3xxsGrid[b.qs[8 * ib + 2 * l + 1]]) << 32;
        iq_put8(o.v + 32 * ib + 8 * l, grid, signs);
      }
    }
  }
};

struct WidenIQ2_XXS {
  using Block = BlockIQ2_XXS;
  static uint16_t d_bits(const Block& b) { return b.d_f16; }
  static constexpr float kScaleMul = 0.125f;
  static void scales(const Block& b, int16_t* sc) {
    for (int ib = 0; ib < 8; ++ib) sc[2 * ib] = sc[2 * ib + 1] = static_cast<int16_t>(2 * (iq_load32(b.qs + 4 * ib + 2) >> 28) + 1);
  }
  static void widen(const Block& b, IqWide& o) {
    o.d_f16 = b.d_f16;
    scales(b, o.sc);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t a = iq_load32(b.qs + 4 * ib), u = iq_load32(b.qs + 4 * ib + 2);
      for (int l = 0; l < 4; ++l)
        iq_put8(o.v + 32 * ib + 8 * l, kIq2xxsGrid[(a >> (8 * l)) & 255], iq_signs8((u >> (7 * l)) & 127));
    }
  }
};

struct WidenIQ2_XS {
  using Block = BlockIQ2_XS;
  static uint16_t d_bits(const Block& b) { return b.d_f16; }
  static constexpr float kScaleMul = 0.125f;
  static void scales(const Block& b, int16_t* sc) { iq2_nibble_scales(b.scales, sc); }
  static void widen(const Block& b, IqWide& o) {
    o.d_f16 = b.d_f16;
    scales(b, o.sc);
    for (int ib = 0; ib < 8; ++ib) {
      for (int l = 0; l < 4; ++l) {
        const uint16_t q = b.qs[4 * ib + l];
        iq_put8(o.v + 32 * ib + 8 * l, kIq2xsGrid[q & 511], iq_signs8(q >> 9));
      }
    }
  }
};

struct WidenIQ2_S {
  using Block = BlockIQ2_S;
  static uint16_t d_bits(const Block& b) { return b.d_f16; }
  static constexpr float kScaleMul = 0.125f;
  static void scales(const Block& b, int16_t* sc) { iq2_nibble_scales(b.scales, sc); }
  static void widen(const Block& b, IqWide& o) {
    o.d_f16 = b.d_f16;
    scales(b, o.sc);
    for (int ib = 0; ib < 8; ++ib) {
      for (int l = 0; l < 4; ++l) {
        const int g = 4 * ib + l;
        const uint32_t idx = b.qs[g] | (((b.qh[ib] >> (2 * l)) & 3u) << 8);
        iq_put8(o.v + 8 * g, kIq2sGrid[idx], iq2_s_signs(b)[g]);
      }
    }
  }
};

struct WidenIQ1_S {
  using Block = BlockIQ1_S;
  static uint16_t d_bits(const Block& b) { return b.d_f16; }
  static constexpr float kScaleMul = 0.125f;
  static void scales(const Block& b, int16_t* sc) {
    for (int ib = 0; ib < 8; ++ib) sc[2 * ib] = sc[2 * ib + 1] = static_cast<int16_t>(2 * ((b.qh[ib] >> 12) & 7) + 1);
  }
  static void widen(const Block& b, IqWide& o) {
    o.d_f16 = b.d_f16;
    scales(b, o.sc);
    for (int ib = 0; ib < 8; ++ib) {
      const uint32_t h = b.qh[ib];
      for (int l = 0; l < 4; ++l) {
        const uint32_t idx = b.qs[4 * ib + l] | (((h >> (3 * l)) & 7) << 8);
        iq1_put8(o.v + 32 * ib + 8 * l, kIq1sGrid[idx], (h & 0x8000) != 0);
      }
    }
  }
};

struct WidenIQ1_M {
  using Block = BlockIQ1_M;
  static constexpr float kScaleMul = 0.125f;
  static uint16_t d_bits(const Block& b) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, 8);
    return static_cast<uint16_t>((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
  }
  static void scales(const Block& b, int16_t* out) {
    uint16_t sc[4];
    std::memcpy(sc, b.scales, 8);
    for (int t = 0; t < 16; ++t) out[t] = static_cast<int16_t>(2 * ((sc[t / 4] >> (3 * (t % 4))) & 7) + 1);
  }
  static void widen(const Block& b, IqWide& o) {
    o.d_f16 = d_bits(b);
    scales(b, o.sc);
    for (int g = 0; g < 32; ++g) {
      const uint32_t h = b.qh[g / 2] >> (4 * (g % 2));
      iq1_put8(o.v + 8 * g, kIq1sGrid[b.qs[g] | ((h & 7) << 8)], (h & 8) != 0);
    }
  }
};

// S of one widened super-block against one q8_K block (exact; see the top of this file).
static inline int32_t iq_wide_dot(const IqWide& w, const int8_t* q8) {
  int32_t s = 0;
  for (int t = 0; t < 16; ++t) {
    int32_t sub = 0;
    for (int i = 0; i < 16; ++i) sub += w.v[16 * t + i] * q8[16 * t + i];
    s += w.sc[t] * sub;
  }
  return s;
}

}  // namespace lumen::kernels
