// 256-bit building blocks of the i-quant kernels, compiled by kernels_iq_avx2.cc (AVX2) and
// kernels_iq_avx512.cc (AVX-512: its row kernels, and the values its prefill panels pack).
// Everything is in an anonymous namespace, as kernels_isa_common.h explains, so each ISA's
// translation unit compiles its own copy with its flags. Include only from *_avx2.cc and
// *_avx512.cc files.
//
// Unpack<W>::chunk(b, k) gives the 32 int8 values v of elements 32k .. 32k+31 of a widened
// super-block (iq_blocks.h) in one vector: grid entries gathered by scalar loads (as ggml
// does), iq4 codes by a byte shuffle, the 1-bit types' shifts. The grid types with separate
// sign bits (iq3_s, iq3_xxs, iq2_s, iq2_xs, iq2_xxs) give instead grid(b, k), the unsigned
// grid bytes, and sign_words(b), the 8 chunks' sign bits; iq_block_values makes any type's
// signed values from either. IqKKernel<W> is the row
// kernel: per super-block the exact S (maddubs of the unsigned grid bytes, or |v|, against
// the activations carrying the signs, then the int16 scales by madd / vpdpwssd), then the
// reference's float step.
#pragma once
// The float steps must round as the reference's do: no FMA contraction (-mfma is on).
#pragma GCC optimize("fp-contract=off")
#include <immintrin.h>

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "kernels/iq_blocks.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/math_avx2.h"

namespace lumen::kernels {
namespace {  // NOLINT(google-build-namespaces): per-ISA copies, see the top of this file

[[gnu::always_inline]] inline __m256i iq_load256(const void* p) {
  return _mm256_loadu_si256(static_cast<const __m256i*>(p));
}

// g with the bytes under mask negated.
[[gnu::always_inline]] inline __m256i iq_apply_signs(__m256i g, __m256i mask) {
  return _mm256_sub_epi8(_mm256_xor_si256(g, mask), mask);
}
// The signs of a chunk as the row kernel applies them to the activations (grid bytes stay
// unsigned for maddubs): bit i of *bits set negates byte i of a q8 vector. With AVX-512BW
// that is one masked subtract per column; on AVX2 a sign vector made once per chunk.
struct IqSigns {
#if defined(__AVX512BW__) && defined(__AVX512VL__)
  __mmask32 k;
  [[gnu::always_inline]] explicit IqSigns(const uint32_t* bits) : k(static_cast<__mmask32>(*bits)) {}
  [[gnu::always_inline]] __m256i apply(__m256i q8) const {
    return _mm256_mask_sub_epi8(q8, k, _mm256_setzero_si256(), q8);
  }
#else
  __m256i s;
  [[gnu::always_inline]] explicit IqSigns(const uint32_t* bits)
      : s(_mm256_or_si256(bytes_from_bits(*bits), _mm256_set1_epi8(1))) {}
  [[gnu::always_inline]] __m256i apply(__m256i q8) const { return _mm256_sign_epi8(q8, s); }
#endif
};
// Bytes holding seven sign bits each (bit 7 clear) with bit 7 set where that makes the
// byte's parity even: the eighth sign of ggml's 7-bit sign fields (iq_signs8), 32 at once.
[[gnu::always_inline]] inline __m256i iq_even_parity_bytes(__m256i t) {
  // Bit 0 of each byte ends up the xor of the byte's bits (the shifts never carry a bit
  // into bits 0..3 from the byte above before it is used).
  __m256i p = _mm256_xor_si256(t, _mm256_srli_epi32(t, 4));
  p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 2));
  p = _mm256_xor_si256(p, _mm256_srli_epi32(p, 1));
  return _mm256_or_si256(t, _mm256_slli_epi32(_mm256_and_si256(p, _mm256_set1_epi8(1)), 7));
}
// The sign words of eight scales-and-signs words u (iq3_xxs, iq2_xxs): the 7-bit field l
// of u (bits 7l .. 7l+6) in byte l with its parity bit, so bit i of the result is the sign
// of element i of the chunk (iq_signs8 of each field, eight chunks at once).
[[gnu::always_inline]] inline __m256i iq_sas_sign_words(__m256i u) {
  auto field = [&](int l) {
    return _mm256_and_si256(_mm256_slli_epi32(u, l), _mm256_set1_epi32(0x7f << (8 * l)));
  };
  return iq_even_parity_bytes(
      _mm256_or_si256(_mm256_or_si256(field(0), field(1)), _mm256_or_si256(field(2), field(3))));
}
// Eight 32-bit table entries t[i0] .. t[i7] in one vector, built as two halves of inserts
// straight from the table (vpinsrd xmm, m32). Written as _mm256_setr_epi32, GCC loaded each
// entry into a general register and moved it over (vmovd / vpinsrd from a register): the
// iq3 kernels ran 10-13% slower (docs/perf.md, session 21).
template <typename Idx>
[[gnu::always_inline]] inline __m256i iq_table8x32(const uint32_t* t, Idx idx) {
  auto half = [&](int j) {
    __m128i h = _mm_cvtsi32_si128(static_cast<int32_t>(t[idx(j)]));
    h = _mm_insert_epi32(h, static_cast<int32_t>(t[idx(j + 1)]), 1);
    h = _mm_insert_epi32(h, static_cast<int32_t>(t[idx(j + 2)]), 2);
    return _mm_insert_epi32(h, static_cast<int32_t>(t[idx(j + 3)]), 3);
  };
  return _mm256_inserti128_si256(_mm256_castsi128_si256(half(0)), half(4), 1);
}
// Four grid indices as the 16-bit fields of one word: field j = byte j of q4 (an index's low
// 8 bits) | field j of hi << 8, hi's fields kBits wide and packed (BMI2 pdep: two deposits
// instead of a byte load and three bit operations per index).
#if defined(__BMI2__)
template <int kBits>
[[gnu::always_inline]] inline uint64_t iq_index4(uint32_t q4, uint32_t hi) {
  constexpr uint64_t kField = static_cast<uint64_t>((1u << kBits) - 1) << 8;
  return _pdep_u64(q4, 0x00ff00ff00ff00ffull) | _pdep_u64(hi, kField * 0x0001000100010001ull);
}
#endif
// Four 64-bit table entries t[i0] .. t[i3] in one vector (inserting them from memory as
// iq_table8x32 does measured the same).
template <typename Idx>
[[gnu::always_inline]] inline __m256i iq_table4x64(const uint64_t* t, Idx idx) {
  return _mm256_set_epi64x(static_cast<int64_t>(t[idx(3)]), static_cast<int64_t>(t[idx(2)]),
                           static_cast<int64_t>(t[idx(1)]), static_cast<int64_t>(t[idx(0)]));
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
  [[gnu::always_inline]] static __m256i grid(const Block& b, int k) {
    const uint8_t* qs = b.qs + 8 * k;
    const uint32_t h = b.qh[k];
#if defined(__BMI2__)
    const uint64_t w[2] = {iq_index4<1>(iq_load32(qs), h), iq_index4<1>(iq_load32(qs + 4), h >> 4)};
    return iq_table8x32(kIq3sGrid, [&](int j) { return static_cast<uint16_t>(w[j / 4] >> (16 * (j % 4))); });
#else
    return iq_table8x32(kIq3sGrid, [&](int j) { return qs[j] | ((h >> j) & 1) << 8; });
#endif
  }
  [[gnu::always_inline]] static __m256i sign_words(const Block& b) { return iq_load256(b.signs); }
};

template <>
struct Unpack<WidenIQ3_XXS> : WidenIQ3_XXS {
  // WidenIQ3_XXS::scales in one vector: the top 4 bits of each of the 8 scales-and-signs
  // words, in both int16 halves of its dword.
  [[gnu::always_inline]] static __m256i scales16(const Block& b) {
    const __m256i top = _mm256_srli_epi32(iq_load256(iq3_xxs_sas(b)), 28);
    return iq_odd_scales16(_mm256_or_si256(top, _mm256_slli_epi32(top, 16)));
  }
  [[gnu::always_inline]] static __m256i grid(const Block& b, int k) {
    const uint8_t* qs = b.qs + 8 * k;
    return iq_table8x32(kIq3xxsGrid, [&](int j) { return qs[j]; });
  }
  [[gnu::always_inline]] static __m256i sign_words(const Block& b) { return iq_sas_sign_words(iq_load256(iq3_xxs_sas(b))); }
};

template <>
struct Unpack<WidenIQ2_XXS> : WidenIQ2_XXS {
  static constexpr bool kTwoChains = true;  // see IqKKernel::kChains
  [[gnu::always_inline]] static __m256i grid(const Block& b, int k) {
    const uint32_t a = iq_load32(b.qs + 4 * k);
    return iq_table4x64(kIq2xxsGrid, [&](int j) { return (a >> (8 * j)) & 255; });
  }
  // The scales-and-signs words are the odd dwords of qs.
  [[gnu::always_inline]] static __m256i sign_words(const Block& b) {
    const __m256 lo = _mm256_castsi256_ps(iq_load256(b.qs)), hi = _mm256_castsi256_ps(iq_load256(b.qs + 16));
    // Per 128-bit lane: chunks 0, 1, 4, 5 | 2, 3, 6, 7.
    const __m256i odd = _mm256_castps_si256(_mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1)));
    return iq_sas_sign_words(_mm256_permute4x64_epi64(odd, _MM_SHUFFLE(3, 1, 2, 0)));
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
  static constexpr bool kTwoChains = true;  // see IqKKernel::kChains
  [[gnu::always_inline]] static __m256i scales16(const Block& b) { return iq2_nibble_scales16(b.scales); }
  [[gnu::always_inline]] static __m256i grid(const Block& b, int k) {
    const uint16_t* q = b.qs + 4 * k;
    return iq_table4x64(kIq2xsGrid, [&](int j) { return q[j] & 511; });
  }
  // The 7-bit sign field of each qs word (its top bits), one byte each, with its parity bit.
  [[gnu::always_inline]] static __m256i sign_words(const Block& b) {
    const __m256i f = _mm256_packus_epi16(_mm256_srli_epi16(iq_load256(b.qs), 9), _mm256_srli_epi16(iq_load256(b.qs + 16), 9));
    // packus interleaves per 128-bit lane: chunks 0, 1, 4, 5 | 2, 3, 6, 7.
    return iq_even_parity_bytes(_mm256_permute4x64_epi64(f, _MM_SHUFFLE(3, 1, 2, 0)));
  }
};

template <>
struct Unpack<WidenIQ2_S> : WidenIQ2_S {
  [[gnu::always_inline]] static __m256i scales16(const Block& b) { return iq2_nibble_scales16(b.scales); }
  [[gnu::always_inline]] static __m256i grid(const Block& b, int k) {
    const uint8_t* q = b.qs + 4 * k;
    const uint32_t h = b.qh[k];
#if defined(__BMI2__)
    const uint64_t w = iq_index4<2>(iq_load32(q), h);
    return iq_table4x64(kIq2sGrid, [&](int j) { return static_cast<uint16_t>(w >> (16 * j)); });
#else
    return iq_table4x64(kIq2sGrid, [&](int j) { return q[j] | ((h >> (2 * j)) & 3) << 8; });
#endif
  }
  [[gnu::always_inline]] static __m256i sign_words(const Block& b) { return iq_load256(iq2_s_signs(b)); }
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
#if defined(__BMI2__)
    const uint64_t w = iq_index4<3>(iq_load32(q), h);
    const __m256i g = iq_table4x64(kIq1sGrid, [&](int j) { return static_cast<uint16_t>(w >> (16 * j)); });
#else
    const __m256i g = iq_table4x64(kIq1sGrid, [&](int j) { return q[j] | ((h >> (3 * j)) & 7) << 8; });
#endif
    // The shift sign (bit 15 of qh[k]) as a byte broadcast from memory: the top byte of the
    // little-endian word, arithmetic-shifted by 7, is 0 or -1 in every bit (a byte load,
    // no transfer from a general register).
    return iq1_values(g, _mm256_srai_epi16(_mm256_set1_epi8(static_cast<char>(reinterpret_cast<const uint8_t*>(b.qh + k)[1])), 15));
  }
};

template <>
struct Unpack<WidenIQ1_M> : WidenIQ1_M {
  // WidenIQ1_M::scales in one vector: int16 lane t gets scales word t / 4, multiplied so its
  // bits 3 (t % 4) .. 3 (t % 4) + 2 land at 13..15.
  [[gnu::always_inline]] static __m256i scales16(const Block& b) {
    const __m256i w = _mm256_shuffle_epi8(
        _mm256_set1_epi64x(static_cast<int64_t>(iq_load64(b.scales))),
        _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 4, 5, 4, 5, 4, 5, 4, 5, 6, 7, 6, 7, 6, 7, 6, 7));
    const __m256i up = _mm256_setr_epi16(1 << 13, 1 << 10, 1 << 7, 1 << 4, 1 << 13, 1 << 10, 1 << 7, 1 << 4, 1 << 13,
                                         1 << 10, 1 << 7, 1 << 4, 1 << 13, 1 << 10, 1 << 7, 1 << 4);
    return iq_odd_scales16(_mm256_srli_epi16(_mm256_mullo_epi16(w, up), 13));
  }
  [[gnu::always_inline]] static __m256i chunk(const Block& b, int k) {
    const uint8_t* q = b.qs + 4 * k;
    const uint32_t h0 = b.qh[2 * k], h1 = b.qh[2 * k + 1];
    const __m256i g = iq_table4x64(kIq1sGrid, [&](int j) { return q[j] | (((j < 2 ? h0 : h1) >> (4 * (j & 1))) & 7) << 8; });
    // Shift sign per group of 8: bits 3 and 7 of h0 (groups 0, 1), of h1 (groups 2, 3).
    const __m256i hh = _mm256_shuffle_epi8(
        _mm256_set1_epi16(static_cast<int16_t>(iq_load16(b.qh + 2 * k))),
        _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1));
    const __m256i bit = _mm256_setr_epi8(8, 8, 8, 8, 8, 8, 8, 8, -128, -128, -128, -128, -128, -128, -128, -128, 8, 8, 8,
                                         8, 8, 8, 8, 8, -128, -128, -128, -128, -128, -128, -128, -128);
    return iq1_values(g, _mm256_cmpeq_epi8(_mm256_and_si256(hh, bit), bit));
  }
};

// The signed values of a super-block's 8 chunks (for the prefill panels' packing): the grid
// types' from their unsigned grid bytes and sign words (made once for the block), the others'
// from Unpack<W>::chunk.
template <typename W>
[[gnu::always_inline]] inline void iq_block_values(const typename W::Block& b, __m256i* v) {
  using U = Unpack<W>;
  if constexpr (requires { U::sign_words(b); }) {
    alignas(32) uint32_t sw[8];
    _mm256_store_si256(reinterpret_cast<__m256i*>(sw), U::sign_words(b));
    for (int k = 0; k < 8; ++k) v[k] = iq_apply_signs(U::grid(b, k), bytes_from_bits(sw[k]));
  } else {
    for (int k = 0; k < 8; ++k) v[k] = U::chunk(b, k);
  }
}

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


// The row kernel of a 256-element i-quant against NC q8_K rows (Kernel::cols of
// kernels_isa_common.h): bit for bit the scalar reference.
template <typename W>
struct IqKKernel {
  using U = Unpack<W>;
  // Integer accumulator chains per column: two (even, odd chunks) where Unpack<W>::kTwoChains,
  // so that a super-block's 8 scale steps (vpdpwssd with AVX-512 VNNI: 8 dependent steps of
  // its latency) are two chains of 4. Measured in the row kernels' harness (session 21):
  // iq2_xs, iq2_xxs +6-8%; the others -1-2%, so they keep one.
  static constexpr int kChains = requires { U::kTwoChains; } ? 2 : 1;
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
      __m256i sumi[kChains][NC];
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c)
        for (int h = 0; h < kChains; ++h) sumi[h][c] = _mm256_setzero_si256();
      // The types with unsigned grid entries and separate signs: bit i of sw[k] negates
      // element i of chunk k (on the activations, so the grid bytes feed maddubs as they are).
      alignas(32) uint32_t sw[8];
      if constexpr (requires { U::sign_words(b); })
        _mm256_store_si256(reinterpret_cast<__m256i*>(sw), U::sign_words(b));
      auto chunk_step = [&](int k) __attribute__((always_inline)) {
        // int16 lanes 0..7: sc[2k], 8..15: sc[2k + 1].
        const __m256i sv = _mm256_shuffle_epi8(
            _mm256_permutevar8x32_epi32(sc16, _mm256_set1_epi32(k)),
            _mm256_setr_epi8(0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 0, 1, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3, 2, 3));
        auto q8_at = [&](int c) { return iq_load256(reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].qs + 32 * k); };
        __m256i* sum = sumi[k % kChains];
        if constexpr (requires { U::sign_words(b); }) {
          const __m256i g = U::grid(b, k);
          const IqSigns sg(sw + k);
          #pragma GCC unroll 4
          for (int c = 0; c < NC; ++c) sum[c] = iq_madd_acc(sum[c], _mm256_maddubs_epi16(g, sg.apply(q8_at(c))), sv);
        } else {
          const __m256i v = U::chunk(b, k);
          const __m256i av = _mm256_sign_epi8(v, v);
          #pragma GCC unroll 4
          for (int c = 0; c < NC; ++c)
            sum[c] = iq_madd_acc(sum[c], _mm256_maddubs_epi16(av, _mm256_sign_epi8(q8_at(c), v)), sv);
        }
      };
      // Written out. (iq2_xs's was kept rolled in session 20, when its written-out loop
      // spilled; with the sign words of session 21 the written-out loop is 4-5% ahead.)
      #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) chunk_step(k);
      float dw;
      _mm_store_ss(&dw, _mm_cvtph_ps(_mm_cvtsi32_si128(W::d_bits(b))));
      #pragma GCC unroll 4
      for (int c = 0; c < NC; ++c) {
        const float dx = reinterpret_cast<const BlockQ8_K*>(x + c * xs)[ib].d;
        const __m256i s = kChains == 1 ? sumi[0][c] : _mm256_add_epi32(sumi[0][c], sumi[kChains - 1][c]);
        acc[c] += (dx * dw) * static_cast<float>(iq_hsum_epi32(s));
      }
    }
    #pragma GCC unroll 4
    for (int c = 0; c < NC; ++c) out[c] = acc[c] * W::kScaleMul;
  }
};

}  // namespace
}  // namespace lumen::kernels
