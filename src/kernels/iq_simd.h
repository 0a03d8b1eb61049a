// AVX2 building blocks of the i-quant kernels (kernels_iq_avx2.cc; everything is in an
// anonymous namespace, as kernels_isa_common.h explains, so another ISA's translation unit
// can compile its own copy with its flags). Include only from *_avx2.cc and *_avx512.cc files
// (kernels_iq_avx512.cc packs its panels with Unpack).
//
// Unpack<W>::chunk(b, k) gives the 32 int8 values v of elements 32k .. 32k+31 of a widened
// super-block (iq_blocks.h) in one vector: grid entries gathered by scalar loads (as ggml
// does), signs expanded from their bits, iq4 codes by a byte shuffle. IqKKernel<W> is the
// row kernel: per super-block the exact S (maddubs of |v| against the activations with v's
// signs, then the int16 scales by madd / vpdpwssd), then the reference's float step.
#pragma once
// The float steps must round as the reference's do: no FMA contraction (-mfma is on).
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/iq_blocks.h"
#include "kernels/kernels_isa_common.h"

namespace lumen::kernels {
namespace {  // NOLINT(google-build-namespaces): per-ISA copies, see the top of this file

[[gnu::always_inline]] inline __m256i iq_load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// 0xff in byte i where bit i of `bits` is set, 0 elsewhere.
[[gnu::always_inline]] inline __m256i iq_sign_mask(uint32_t bits) {
  const __m256i spread = _mm256_shuffle_epi8(
      _mm256_set1_epi32(static_cast<int32_t>(bits)),
      _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
  const __m256i bit = _mm256_set1_epi64x(static_cast<int64_t>(0x8040201008040201ull));
  return _mm256_cmpeq_epi8(_mm256_and_si256(spread, bit), bit);
}
// g with the bytes under mask negated.
[[gnu::always_inline]] inline __m256i iq_apply_signs(__m256i g, __m256i mask) {
  return _mm256_sub_epi8(_mm256_xor_si256(g, mask), mask);
}
[[gnu::always_inline]] inline __m256i iq_grid64(uint64_t a, uint64_t b, uint64_t c, uint64_t d) {
  return _mm256_set_epi64x(static_cast<int64_t>(d), static_cast<int64_t>(c), static_cast<int64_t>(b),
                           static_cast<int64_t>(a));
}
// The 32 iq4 codes of 16 bytes (low nibbles first, then high nibbles) as their values.
[[gnu::always_inline]] inline __m256i iq4_values(const uint8_t* qs) {
  const __m128i q = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i codes = _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(q, 4), q), _mm256_set1_epi8(15));
  const __m256i table = _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(kIq4nlValues)));
  return _mm256_shuffle_epi8(table, codes);
}
// 8 * g + (neg ? -1 : 1) per byte for 1-bit grid bytes g in {-1, 0, 1}; neg: mask bytes.
[[gnu::always_inline]] inline __m256i iq1_values(__m256i g, __m256i neg) {
  const __m256i eight_g = _mm256_sign_epi8(_mm256_set1_epi8(8), g);
  return _mm256_add_epi8(eight_g, _mm256_or_si256(neg, _mm256_set1_epi8(1)));
}

template <typename W>
struct Unpack;

template <>
struct Unpack<WidenIQ4_XS> : WidenIQ4_XS {
  [[gnu::always_inline]] static __m256i chunk(const Block& b, int k) { return iq4_values(b.qs + 16 * k); }
};

// 2s + 1 for sixteen int16 s (the one-vector scales of the i-quants with odd scales).
[[gnu::always_inline]] inline __m256i iq_odd_scales16(__m256i s) {
  return _mm256_add_epi16(_mm256_add_epi16(s, s), _mm256_set1_epi16(1));
}
// The nibbles of the low 8 bytes of b, byte by byte, low nibble first (16 bytes).
[[gnu::always_inline]] inline __m128i iq_nibbles_lo_first(__m128i b) {
  const __m128i m4 = _mm_set1_epi8(15);
  return _mm_unpacklo_epi8(_mm_and_si128(b, m4), _mm_and_si128(_mm_srli_epi16(b, 4), m4));
}

template <>
struct Unpack<WidenIQ3_S> : WidenIQ3_S {
  // WidenIQ3_S::scales in one vector: the 8 nibbles of the 4 scale bytes (low first), each
  // for both halves of its 32 values.
  [[gnu::always_inline]] static __m256i scales16(const Block& b) {
    const __m128i nib = iq_nibbles_lo_first(_mm_cvtsi32_si128(static_cast<int>(iq_load32(b.scales))));
    return iq_odd_scales16(_mm256_cvtepu8_epi16(_mm_unpacklo_epi8(nib, nib)));
  }
  [[gnu::always_inline]] static __m256i chunk(const Block& b, int k) {
    const uint8_t* qs = b.qs + 8 * k;
    const uint32_t h = b.qh[k];
    auto idx = [&](int j) { return kIq3sGrid[qs[j] | ((h >> j) & 1) << 8]; };
    const __m256i g = _mm256_setr_epi32(static_cast<int32_t>(idx(0)), static_cast<int32_t>(idx(1)),
                                        static_cast<int32_t>(idx(2)), static_cast<int32_t>(idx(3)),
                                        static_cast<int32_t>(idx(4)), static_cast<int32_t>(idx(5)),
                                        static_cast<int32_t>(idx(6)), static_cast<int32_t>(idx(7)));
    return iq_apply_signs(g, iq_sign_mask(iq_load32(b.signs + 4 * k)));
  }
};

template <>
struct Unpack<WidenIQ3_XXS> : WidenIQ3_XXS {
  // WidenIQ3_XXS::scales in one vector: the top 4 bits of each of the 8 scales-and-signs
  // words, in both int16 halves of its dword.
  [[gnu::always_inline]] static __m256i scales16(const Block& b) {
    const __m256i top = _mm256_srli_epi32(iq_load256(iq3_xxs_sas(b)), 28);
    return iq_odd_scales16(_mm256_or_si256(top, _mm256_slli_epi32(top, 16)));
  }
  [[gnu::always_inline]] static __m256i chunk(const Block& b, int k) {
    const uint8_t* qs = b.qs + 8 * k;
    const uint32_t u = iq_load32(iq3_xxs_sas(b) + 4 * k);
    const __m256i g = _mm256_setr_epi32(
        static_cast<int32_t>(kIq3xxsGrid[qs[0]]), static_cast<int32_t>(kIq3xxsGrid[qs[1]]),
        static_cast<int32_t>(kIq3xxsGrid[qs[2]]), static_cast<int32_t>(kIq3xxsGrid[qs[3]]),
        static_cast<int32_t>(kIq3xxsGrid[qs[4]]), static_cast<int32_t>(kIq3xxsGrid[qs[5]]),
        static_cast<int32_t>(kIq3xxsGrid[qs[6]]), static_cast<int32_t>(kIq3xxsGrid[qs[7]]));
    const uint32_t signs = iq_signs8(u) | iq_signs8(u >> 7) << 8 | iq_signs8(u >> 14) << 16 | iq_signs8(u >> 21) << 24;
    return iq_apply_signs(g, iq_sign_mask(signs));
  }
};

template <>
struct Unpack<WidenIQ2_XXS> : WidenIQ2_XXS {
  [[gnu::always_inline]] static __m256i chunk(const Block& b, int k) {
    const uint32_t a = iq_load32(b.qs + 4 * k), u = iq_load32(b.qs + 4 * k + 2);
    const __m256i g = iq_grid64(kIq2xxsGrid[a & 255], kIq2xxsGrid[(a >> 8) & 255], kIq2xxsGrid[(a >> 16) & 255],
                                kIq2xxsGrid[a >> 24]);
    const uint32_t signs = iq_signs8(u) | iq_signs8(u >> 7) << 8 | iq_signs8(u >> 14) << 16 | iq_signs8(u >> 21) << 24;
    return iq_apply_signs(g, iq_sign_mask(signs));
  }
};

// iq2_xs / iq2_s: iq2_nibble_scales in one vector (2s + 1 for the low, then the high nibble
// of each of the 8 scale bytes). Built one int16 at a time, the scales were ~40% of iq2_xs's
// decode (perf, session 20).
[[gnu::always_inline]] inline __m256i iq2_nibble_scales16(const uint8_t* scales) {
  const __m128i bytes = _mm_loadl_epi64(reinterpret_cast<const __m128i*>(scales));
  return iq_odd_scales16(_mm256_cvtepu8_epi16(iq_nibbles_lo_first(bytes)));
}

template <>
struct Unpack<WidenIQ2_XS> : WidenIQ2_XS {
  static constexpr bool kRolled = true;  // see kRolledChunks
  [[gnu::always_inline]] static __m256i scales16(const Block& b) { return iq2_nibble_scales16(b.scales); }
  [[gnu::always_inline]] static __m256i chunk(const Block& b, int k) {
    const uint16_t* q = b.qs + 4 * k;
    const __m256i g = iq_grid64(kIq2xsGrid[q[0] & 511], kIq2xsGrid[q[1] & 511], kIq2xsGrid[q[2] & 511],
                                kIq2xsGrid[q[3] & 511]);
    const uint32_t signs = iq_signs8(q[0] >> 9) | iq_signs8(q[1] >> 9) << 8 | iq_signs8(q[2] >> 9) << 16 |
                           iq_signs8(q[3] >> 9) << 24;
    return iq_apply_signs(g, iq_sign_mask(signs));
  }
};

template <>
struct Unpack<WidenIQ2_S> : WidenIQ2_S {
  [[gnu::always_inline]] static __m256i scales16(const Block& b) { return iq2_nibble_scales16(b.scales); }
  [[gnu::always_inline]] static __m256i chunk(const Block& b, int k) {
    const uint8_t* q = b.qs + 4 * k;
    const uint32_t h = b.qh[k];
    const __m256i g = iq_grid64(kIq2sGrid[q[0] | (h & 3) << 8], kIq2sGrid[q[1] | ((h >> 2) & 3) << 8],
                                kIq2sGrid[q[2] | ((h >> 4) & 3) << 8], kIq2sGrid[q[3] | ((h >> 6) & 3) << 8]);
    return iq_apply_signs(g, iq_sign_mask(iq_load32(iq2_s_signs(b) + 4 * k)));
  }
};

template <>
struct Unpack<WidenIQ1_S> : WidenIQ1_S {
  // WidenIQ1_S::scales in one vector: bits 12..14 of each of the 8 qh words, twice each.
  [[gnu::always_inline]] static __m256i scales16(const Block& b) {
    const __m128i s = _mm_and_si128(_mm_srli_epi16(_mm_loadu_si128(reinterpret_cast<const __m128i*>(b.qh)), 12),
                                    _mm_set1_epi16(7));
    return iq_odd_scales16(_mm256_set_m128i(_mm_unpackhi_epi16(s, s), _mm_unpacklo_epi16(s, s)));
  }
  [[gnu::always_inline]] static __m256i chunk(const Block& b, int k) {
    const uint8_t* q = b.qs + 4 * k;
    const uint32_t h = b.qh[k];
    const __m256i g = iq_grid64(kIq1sGrid[q[0] | (h & 7) << 8], kIq1sGrid[q[1] | ((h >> 3) & 7) << 8],
                                kIq1sGrid[q[2] | ((h >> 6) & 7) << 8], kIq1sGrid[q[3] | ((h >> 9) & 7) << 8]);
    return iq1_values(g, _mm256_set1_epi8(h & 0x8000 ? -1 : 0));
  }
};

template <>
struct Unpack<WidenIQ1_M> : WidenIQ1_M {
  [[gnu::always_inline]] static __m256i chunk(const Block& b, int k) {
    const uint8_t* q = b.qs + 4 * k;
    const uint32_t h0 = b.qh[2 * k], h1 = b.qh[2 * k + 1];
    const __m256i g = iq_grid64(kIq1sGrid[q[0] | (h0 & 7) << 8], kIq1sGrid[q[1] | ((h0 >> 4) & 7) << 8],
                                kIq1sGrid[q[2] | (h1 & 7) << 8], kIq1sGrid[q[3] | ((h1 >> 4) & 7) << 8]);
    // Shift sign per group of 8: bits 3 and 7 of h0, h1.
    const uint32_t neg = (h0 & 0x08 ? 0xffu : 0) | (h0 & 0x80 ? 0xff00u : 0) | (h1 & 0x08 ? 0xff0000u : 0) |
                         (h1 & 0x80 ? 0xff000000u : 0);
    return iq1_values(g, iq_sign_mask(neg));
  }
};

// sum += the int16 pairs of p times the int16 scales sv (one exact int32 per pair).
[[gnu::always_inline]] inline __m256i iq_madd_acc(__m256i sum, __m256i p, __m256i sv) {
#if defined(__AVX512VNNI__) && defined(__AVX512VL__)
  return _mm256_dpwssd_epi32(sum, p, sv);
#else
  return _mm256_add_epi32(sum, _mm256_madd_epi16(p, sv));
#endif
}

[[gnu::always_inline]] inline int32_t iq_hsum_epi32(__m256i v) {
  __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(1, 0, 3, 2)));
  s = _mm_add_epi32(s, _mm_shuffle_epi32(s, _MM_SHUFFLE(2, 3, 0, 1)));
  return _mm_cvtsi128_si32(s);
}

// Whether IqKKernel keeps its loop over a super-block's 8 chunks rolled (Unpack<W>::kRolled):
// iq2_xs's written-out loop spilled to the stack and decoded llama-3.2-1b's 4-layer
// IQ2_S-ftype file (iq2_xs tensors) at 19 tok/s against 31-32 rolled; for iq2_xxs, iq3_xxs
// and iq1_s the written-out loop was level or ahead (docs/perf.md, session 20).
template <typename U>
constexpr bool kRolledChunks = requires { U::kRolled; };

// The row kernel of a 256-element i-quant against NC q8_K rows (Kernel::cols of
// kernels_isa_common.h): bit for bit the scalar reference.
template <typename W>
struct IqKKernel {
  using U = Unpack<W>;
  template <int NC>
  static void cols(int64_t n, const std::byte* w, const std::byte* x, size_t xs, float* out) {
    const auto* bw = reinterpret_cast<const typename W::Block*>(w);
    float acc[NC];
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) acc[c] = 0.0f;
    for (int64_t ib = 0; ib < n / kQkK; ++ib) {
      const typename W::Block& b = bw[ib];
      __m256i sc16;
      if constexpr (requires { U::scales16(b); }) {
        sc16 = U::scales16(b);
      } else {
        alignas(32) int16_t sc[16];
        W::scales(b, sc);
        sc16 = iq_load256(sc);
      }
      __m256i sumi[NC];
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) sumi[c] = _mm256_setzero_si256();
      auto chunk_step = [&](int k) __attribute__((always_inline)) {
        const __m256i v = U::chunk(b, k);
        const __m256i av = _mm256_sign_epi8(v, v);
        // int16 lanes 0..7: sc[2k], 8..15: sc[2k + 1].
        const __m256i sv = _mm256_shuffle_epi8(
            _mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(k)),
            _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
        #pragma GCC unroll 4
        for (int c = 0; c < NC; ++c) {
          const int8_t* q8 = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].qs + 32 * k;
          const __m256i p = _mm256_maddubs_epi16(av, _mm256_sign_epi8(iq_load256(q8), v));
          sumi[c] = iq_madd_acc(sumi[c], p, sv);
        }
      };
      if constexpr (kRolledChunks<U>) {
        #pragma GCC unroll 1
        for (int k = 0; k < 8; ++k) chunk_step(k);
      } else {
        #pragma GCC unroll 8
        for (int k = 0; k < 8; ++k) chunk_step(k);
      }
      float dw;
      _mm_store_ss(&dw, _mm_cvtph_ps(_mm_cvtsi32_si128(W::d_bits(b))));
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        const float dx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].d;
        acc[c] += (dx * dw) * static_cast<float>(iq_hsum_epi32(sumi[c]));
      }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) out[c] = acc[c] * W::kScaleMul;
  }
};

}  // namespace
}  // namespace lumen::kernels
