// AVX-512 VNNI kernels for matrices repacked into row-interleaved groups (the
// InterleavedKernels of kernel_table.h): q8_0, q4_0, q5_0, q4_1, q5_1, q4_K, q5_K, q6_K,
// iq4_xs.
//
// Why: decode reads every weight once per token, so its speed is the speed at which the
// weights stream from memory. In the GGUF layout the 16 rows a vector kernel works on are
// 16 streams side by side; the hardware prefetchers follow them poorly and every block
// needs gathers of the 16 rows' scales and a cross-lane reduction (matmul_avx512.cc).
// Here the 16 rows of a group are interleaved once, at load, so that
//
//   * a group is one contiguous run of bytes, and a thread's share of a matrix is one
//     contiguous run of groups: a single forward stream (prefetched in software, see
//     PrefetchCursor);
//   * every 64-byte load holds the same 4 consecutive elements (or nibble pairs) of the 16
//     rows, so one vpdpbusd with a broadcast activation dword advances all 16 rows and lane
//     r of every accumulator is row r: no reduction, no gather;
//   * each block's 16 scales are one contiguous vector (f16, widened by vcvtph2ps).
//
// Quants keep their width (q4 nibbles stay packed; the nibble split costs two logic ops per
// 64 bytes), so the copy is the size of the GGUF tensor (q4_K: +2.8%, its 6-bit scales are
// stored as bytes). The same kernels serve prefill (many activation columns) with no
// per-call packing.
//
// Arithmetic is the scalar reference's, block by block, with exact int32 block sums (see
// matmul_avx512.cc), so results equal vec_dot bit for bit.
#include "kernels/matmul_avx512_common.h"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <utility>

#include "kernels/iq_blocks.h"
#include "kernels/isa_kernels.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/quant_blocks.h"

namespace lumen::kernels {
namespace {

// ---- layouts ------------------------------------------------------------------------------
//
// A group is 16 rows; per block index ib the group holds one "group block" of the 16 rows'
// blocks ib. Below, [a][b] u32 means a-major arrays of little-endian dwords, r = row 0..15.
//
// q8_0 "q8_0x16", 544 bytes per 32 elements:
//   [g = 0..7][r] u32   qs[4g .. 4g+3] of row r, each byte + 128 (unsigned)       512
//   [r] f16             d                                                          32
// q4_0 "q4_0x16", 288 bytes per 32 elements:
//   [k = 0..3][r] u32   qs[4k .. 4k+3] of row r: low nibbles elements 4k .. 4k+3,
//                       high nibbles elements 16 + 4k ..                           256
//   [r] f16             d                                                          32
// q5_0 "q5_0x16", 352 bytes per 32 elements (the GGUF blocks' size):
//   [k = 0..3][r] u32   qs[4k .. 4k+3] of row r, as q4_0x16                          256
//   [r] u32             the fifth bits, spread so that one shift and mask per k puts
//                       them at bit 4 of the quant bytes: bit 8b + k = element 4k + b
//                       (low nibble of qs[4k + b]), bit 8b + 4 + k = element 16 + 4k + b   64
//   [r] f16             d                                                           32
// q4_1 "q4_1x16", 320 bytes per 32 elements (the GGUF blocks' size): q4_0x16 and the mins
//   [k = 0..3][r] u32   qs[4k .. 4k+3] of row r, as q4_0x16                          256
//   [r] f16 d, [r] f16 m                                                            64
// q5_1 "q5_1x16", 384 bytes per 32 elements (the GGUF blocks' size): q5_0x16 and the mins
//   [k = 0..3][r] u32   qs, [r] u32 fifth bits, as q5_0x16                          320
//   [r] f16 d, [r] f16 m                                                            64
// q4_K "q4_Kx16m", 2368 bytes per 256 elements:
//   [c = 0..3][k = 0..7][r] u32  qs[32c + 4k ..] of row r: low nibbles elements
//                       64c + 4k .. (sub-block 2c), high nibbles 64c + 32 + 4k ..   2048
//   [s = 0..7][r] u8    sc[s]                                                      128
//   [j = 0..3][r] u8 x 2  m[2j], m[2j + 1]                                         128
//   [r] f16 d, [r] f16 dmin                                                         64
//   The mins in pairs: widened to 16 bits, lane r of one vector holds row r's pair, and
//   one vpdpwssd against the activations' pair of sub-block sums adds both products (the
//   "q4_Kx16" layout of sessions 6-27 kept [s][r] u8 m[s]: a widening and a vpmulld, 2
//   uops, per sub-block and column).
// q5_K "q5_Kx16m", 2880 bytes per 256 elements: q4_Kx16m's quants in four sections, each
//   led by the fifth bits of its 32 lines as masks
//   [c = 0..3] { [k = 0..7] u64 lo, u64 hi                                           128
//                [k = 0..7][r] u32  qs[32c + 4k ..] of row r, as q4_Kx16m }          512
//   [s = 0..7][r] u8 sc[s], [j][r] u8 x 2 m[2j], m[2j + 1], [r] f16 d, [r] f16 dmin,
//   as q4_Kx16m                                                                     320
//   Bit 4r + b of lo (hi): the fifth bit of the low (high) nibble's element in byte 4r + b
//   of quant line (c, k), i.e. element 64c + 4k + b (64c + 32 + 4k + b) of row r. Each
//   mask goes straight into a mask register (kmovq) and adds 16 to its line's bytes under
//   it: 5 vector ops for a line's 128 quants where the "q5_Kx16" layout of sessions 14-21
//   (GGUF's qh dwords per row, all 512 bytes in front) took 7. The masks sit in front of
//   their own section, so a block is read front to back: with all of them in front (this
//   layout's first form) each section's masks were a jump back, and one-column decode out
//   of cache fell to 0.6-0.8x of the previous layout's (llama-3.2-1b Q5_K_M, 2 threads);
//   the same applied to the fifth bits of session 14's q5_Kx16, placed after the quants
//   (8192 x 8192, 1 thread: 4.3 ms against 1.5 with them in front).
// q6_K "q6_Kx16p", 3360 bytes per 256 elements:
//   [h = 0..1][k = 0..7] { [r] u32 P, [r] u32 Q, [r] u32 R }                          3072
//   [s = 0..15][r] i8   scales[s]                                                  256
//   [r] f16             d                                                           32
//   Byte j of row r's P, Q, R: the 6-bit quants of elements 128h + 32qi + 4k + j of the
//   four quarters qi, packed as q6_k_pqr (quant_blocks.h) does: quarters 0..2 one AND each,
//   quarter 3 (times 4) from the three top bit pairs; 9 vector ops for 4 x 64 quants where
//   GGUF's ql / qh split took 13 (the "q6_Kx16" layout of sessions 14-21).
// iq4_xs "iq4_xsx16", 2208 bytes per 256 elements:
//   [c = 0..7][k = 0..3][r] u32  qs[16c + 4k ..] of row r: low nibbles (codes) elements
//                       32c + 4k .., high nibbles 32c + 16 + 4k .. (sub-block c)     2048
//   [c = 0..7][r] i8    the scale ls[c] - 32                                       128
//   [r] f16             d                                                           32
constexpr size_t kQ8_0GroupBlock = 544;
constexpr size_t kQ4_0GroupBlock = 288;
constexpr size_t kQ5_0GroupBlock = 352;
constexpr size_t kQ4_1GroupBlock = 320;
constexpr size_t kQ5_1GroupBlock = 384;
constexpr size_t kQ4_KGroupBlock = 2368;
constexpr size_t kQ5_KGroupBlock = 2880;
constexpr size_t kQ6_KGroupBlock = 3360;
constexpr size_t kIQ4_XSGroupBlock = 2208;

template <size_t kGroupBlock, int kBlock>
size_t group_bytes(int64_t n) {
  return static_cast<size_t>(n / kBlock) * kGroupBlock;
}

void put_u32(std::byte* dst, const void* src) { std::memcpy(dst, src, 4); }
uint32_t get_u32(const void* src) {
  uint32_t v;
  std::memcpy(&v, src, 4);
  return v;
}

// Packs n_rows rows into groups: Fill(rows, ib, group_block) writes one group block from
// the 16 rows' blocks ib (rows past n_rows repeat the last row).
template <typename Block, size_t kGroupBlock, int kBlock, typename Fill>
void pack_groups(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst, Fill fill) {
  const int64_t nb = n / kBlock;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const Block* rows[kRows];
    for (int r = 0; r < kRows; ++r)
      rows[r] = reinterpret_cast<const Block*>(w + std::min<int64_t>(r0 + r, n_rows - 1) * w_stride);
    std::byte* g = dst + (r0 / kRows) * nb * kGroupBlock;
    for (int64_t ib = 0; ib < nb; ++ib) fill(rows, ib, g + ib * kGroupBlock);
  }
}

void pack_q8_0(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  pack_groups<BlockQ8_0, kQ8_0GroupBlock, kQk>(
      n, w, w_stride, n_rows, dst, [](const BlockQ8_0* const* rows, int64_t ib, std::byte* gb) {
        for (int r = 0; r < kRows; ++r) {
          const BlockQ8_0& b = rows[r][ib];
          for (int g = 0; g < 8; ++g) {
            const uint32_t u = get_u32(b.qs + 4 * g) ^ 0x80808080u;
            put_u32(gb + 64 * g + 4 * r, &u);
          }
          std::memcpy(gb + 512 + 2 * r, &b.d_f16, 2);
        }
      });
}

// q4_0x16 (Block = BlockQ4_0) or q4_1x16 (BlockQ4_1: the mins after d).
template <typename Block>
void pack_q4(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  constexpr bool kMin = std::is_same_v<Block, BlockQ4_1>;
  pack_groups<Block, kMin ? kQ4_1GroupBlock : kQ4_0GroupBlock, kQk>(
      n, w, w_stride, n_rows, dst, [](const Block* const* rows, int64_t ib, std::byte* gb) {
        for (int r = 0; r < kRows; ++r) {
          const Block& b = rows[r][ib];
          for (int k = 0; k < 4; ++k) put_u32(gb + 64 * k + 4 * r, b.qs + 4 * k);
          std::memcpy(gb + 256 + 2 * r, &b.d_f16, 2);
          if constexpr (kMin) std::memcpy(gb + 288 + 2 * r, &b.m_f16, 2);
        }
      });
}

// qh of a q5_0 block in the q5_0x16 spread order (see the layout above).
uint32_t spread_q5_bits(const uint8_t* qh) {
  const uint32_t h = get_u32(qh);
  uint32_t out = 0;
  for (int k = 0; k < 4; ++k) {
    for (int b = 0; b < 4; ++b) {
      out |= ((h >> (4 * k + b)) & 1u) << (8 * b + k);
      out |= ((h >> (16 + 4 * k + b)) & 1u) << (8 * b + 4 + k);
    }
  }
  return out;
}

// q5_0x16 (Block = BlockQ5_0) or q5_1x16 (BlockQ5_1: the mins after d).
template <typename Block>
void pack_q5(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  constexpr bool kMin = std::is_same_v<Block, BlockQ5_1>;
  pack_groups<Block, kMin ? kQ5_1GroupBlock : kQ5_0GroupBlock, kQk>(
      n, w, w_stride, n_rows, dst, [](const Block* const* rows, int64_t ib, std::byte* gb) {
        for (int r = 0; r < kRows; ++r) {
          const Block& b = rows[r][ib];
          for (int k = 0; k < 4; ++k) put_u32(gb + 64 * k + 4 * r, b.qs + 4 * k);
          const uint32_t h = spread_q5_bits(b.qh);
          put_u32(gb + 256 + 4 * r, &h);
          std::memcpy(gb + 320 + 2 * r, &b.d_f16, 2);
          if constexpr (kMin) std::memcpy(gb + 352 + 2 * r, &b.m_f16, 2);
        }
      });
}

// q4_Kx16m (Block = BlockQ4_K) or q5_Kx16m (BlockQ5_K: four sections of fifth-bit masks and quants).
template <typename Block>
void pack_q4_k(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  constexpr bool kQ5 = std::is_same_v<Block, BlockQ5_K>;
  constexpr size_t kQh = kQ5 ? 512 : 0;
  pack_groups<Block, kQ5 ? kQ5_KGroupBlock : kQ4_KGroupBlock, kQkK>(
      n, w, w_stride, n_rows, dst, [](const Block* const* rows, int64_t ib, std::byte* gb) {
        if constexpr (kQ5)  // the masks are ORed together below
          for (int c = 0; c < 4; ++c) std::memset(gb + 640 * c, 0, 128);
        for (int r = 0; r < kRows; ++r) {
          const Block& b = rows[r][ib];
          for (int c = 0; c < 4; ++c)
            for (int k = 0; k < 8; ++k) put_u32(gb + (kQ5 ? 640 * c + 128 : 512 * c) + 64 * k + 4 * r, b.qs + 32 * c + 4 * k);
          if constexpr (kQ5) {
            // Bit 4r + j of the (c, k) masks: byte 4r + j of quant line (c, k), qh[4k + j]'s
            // bit 2c (low nibble's element) and 2c + 1 (high nibble's).
            for (int c = 0; c < 4; ++c)
              for (int k = 0; k < 8; ++k)
                for (int j = 0; j < 4; ++j)
                  for (int hi = 0; hi < 2; ++hi) {
                    const int bit = 4 * r + j;
                    if ((b.qh[4 * k + j] >> (2 * c + hi)) & 1)
                      gb[640 * c + 16 * k + 8 * hi + bit / 8] |= static_cast<std::byte>(1 << (bit % 8));
                  }
          }
          uint8_t sc[8], mn[8];
          unpack_q4_k_scales(b.scales, sc, mn);
          for (int s = 0; s < 8; ++s) {
            gb[kQh + 2048 + 16 * s + r] = static_cast<std::byte>(sc[s]);
            gb[kQh + 2176 + 32 * (s / 2) + 2 * r + s % 2] = static_cast<std::byte>(mn[s]);
          }
          std::memcpy(gb + kQh + 2304 + 2 * r, &b.d_f16, 2);
          std::memcpy(gb + kQh + 2336 + 2 * r, &b.dmin_f16, 2);
        }
      });
}

void pack_q6_k(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  pack_groups<BlockQ6_K, kQ6_KGroupBlock, kQkK>(
      n, w, w_stride, n_rows, dst, [](const BlockQ6_K* const* rows, int64_t ib, std::byte* gb) {
        for (int r = 0; r < kRows; ++r) {
          const BlockQ6_K& b = rows[r][ib];
          for (int h = 0; h < 2; ++h) {
            for (int k = 0; k < 8; ++k) {
              std::byte* q = gb + (8 * h + k) * 192 + 4 * r;
              for (int j = 0; j < 4; ++j) {
                uint8_t pqr[3];
                q6_k_pqr(b, h, 4 * k + j, pqr);
                for (int i = 0; i < 3; ++i) q[64 * i + j] = static_cast<std::byte>(pqr[i]);
              }
            }
          }
          for (int s = 0; s < 16; ++s) gb[3072 + 16 * s + r] = static_cast<std::byte>(b.scales[s]);
          std::memcpy(gb + 3328 + 2 * r, &b.d_f16, 2);
        }
      });
}

void pack_iq4_xs(int64_t n, const std::byte* w, size_t w_stride, int64_t n_rows, std::byte* dst) {
  pack_groups<BlockIQ4_XS, kIQ4_XSGroupBlock, kQkK>(
      n, w, w_stride, n_rows, dst, [](const BlockIQ4_XS* const* rows, int64_t ib, std::byte* gb) {
        for (int r = 0; r < kRows; ++r) {
          const BlockIQ4_XS& b = rows[r][ib];
          for (int c = 0; c < 8; ++c)
            for (int k = 0; k < 4; ++k) put_u32(gb + (4 * c + k) * 64 + 4 * r, b.qs + 16 * c + 4 * k);
          int16_t sc[16];
          WidenIQ4_XS::scales(b, sc);
          for (int c = 0; c < 8; ++c) gb[2048 + 16 * c + r] = static_cast<std::byte>(static_cast<int8_t>(sc[2 * c]));
          std::memcpy(gb + 2176 + 2 * r, &b.d_f16, 2);
        }
      });
}

// ---- side data of q8_K activation rows -----------------------------------------------------

// q4_K / q5_K, per block (16 bytes): [j = 0..3] int16 pair (low half: sub-block 2j, high
// half: 2j + 1), each the sum of the sub-block's 32 quants (|sum| <= 32 * 128: exact in 16
// bits), the operand vpdpwssd pairs with the layouts' min pairs.
size_t q4_k_side_bytes(int64_t n) { return static_cast<size_t>(n / kQkK) * 16; }
void prepare_side_q4_k(const std::byte* xq, int64_t n, std::byte* side) {
  const auto* bx = reinterpret_cast<const BlockQ8_K*>(xq);
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    for (int s = 0; s < 8; ++s) {
      const int16_t v = static_cast<int16_t>(bx[ib].bsums[2 * s] + bx[ib].bsums[2 * s + 1]);
      std::memcpy(side + ib * 16 + 2 * s, &v, 2);
    }
  }
}

// q6_K, per block (64 bytes): [s = 0..15] int32 -32 * (sum of the 16 quants of sub-block s),
// the q6 offset's share of the sub-block's sum (the start value of its integer dot).
size_t q6_k_side_bytes(int64_t n) { return static_cast<size_t>(n / kQkK) * 64; }
void prepare_side_q6_k(const std::byte* xq, int64_t n, std::byte* side) {
  const auto* bx = reinterpret_cast<const BlockQ8_K*>(xq);
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    for (int s = 0; s < 16; ++s) {
      const int32_t v = -32 * int32_t{bx[ib].bsums[s]};
      std::memcpy(side + ib * 64 + 4 * s, &v, 4);
    }
  }
}

// iq4_xs, per block (32 bytes): [c = 0..7] int32 -128 * (sum of the 32 quants of sub-block
// c), the unsigned values' offset (the start value of the sub-block's integer dot).
size_t iq4_xs_side_bytes(int64_t n) { return static_cast<size_t>(n / kQkK) * 32; }
void prepare_side_iq4_xs(const std::byte* xq, int64_t n, std::byte* side) {
  const auto* bx = reinterpret_cast<const BlockQ8_K*>(xq);
  for (int64_t ib = 0; ib < n / kQkK; ++ib) {
    for (int c = 0; c < 8; ++c) {
      const int32_t v = -128 * (int32_t{bx[ib].bsums[2 * c]} + bx[ib].bsums[2 * c + 1]);
      std::memcpy(side + ib * 32 + 4 * c, &v, 4);
    }
  }
}

// ---- group tiles: one group of 16 rows against C activation rows -------------------------

// Tiles that stream their group from memory (the first column tile of a group in calls of
// 2 to kStreamCols activation rows: see kStreamCols for which calls) read each group block
// once and use it for a few dot products, so they prefetch in software the lines
// kPrefetchAhead bytes further on (PrefetchCursor: at an even pace through each block, every
// line once). Until session 30 it was one prefetch next to each 64-byte load of quants and
// the scales' lines with the scales' loads; q8_0 / q4_0 / q5_0 / q4_1 / q5_1 prefetched a
// whole block (5-9 lines) at its start until session 29, and on the Cascade Lake host the
// spread form decoded qwen2.5-0.5b q8_0 / q5_0 and llama-3.2-1b q4_0 files 1-8% faster,
// never slower (2 threads, alternating, 2 rounds).
//
// Measured in session 6, decode of one column, before the weights were on 2 MiB pages
// (docs/perf.md, "Software prefetch in the decode tiles"): out of cache, one
// thread read q4_K groups at 25-28 GB/s without, 47-51 with a whole block prefetched at its
// start; end to end at 2 threads llama-3.2-1b q4_K decode went from 58 to 80 tok/s and
// qwen2.5-0.5b q4_0 from 237 to 274. Spreading the K-quants' prefetches among the loads
// (a burst of 37 per q4_K block outruns the L1's miss buffers) gained another 9% on
// llama-3.2-1b; for q4_0 and q8_0 the spread form was 5-7% slower than the burst. 6-10 KiB
// ahead was best (less hides less latency, 28 KiB slowed matrices in cache); into L2 only
// (T1) was 10-20% slower than into L1 (T0). Tiles of wider calls (prefill chunks) are
// compute-bound and re-read each group from cache once per tile of columns, so they do not
// prefetch (kPf false). Prefetches past the end of a matrix never fault and are at most
// kPrefetchAhead bytes per thread and call.
constexpr size_t kPrefetchAhead = 8192;

// The tiles' software prefetch, a cursor over the tile's run of group blocks: every line from
// kPrefetchAhead bytes past the run's start onward, each once and in address order. Step s
// of a block's N steps has used the block's first (s + 1) / N of its bytes and prefetches
// every line below that point + kPrefetchAhead that it has not prefetched yet, so that the
// prefetches keep an even pace through the quants and the scales alike (a block's scales
// are its last lines), and a block that starts mid-line (q6_K, iq4_xs, q8_0, q4_0, q5_0
// groups: 52.5, 34.5, 8.5, 4.5 and 5.5 lines) gets no line twice. Each prefetch is an asm
// that names a register loaded in the same step: GCC treats _mm_prefetch as free to move,
// and with the default tuning it had hoisted a q4_K block's prefetches into one burst at
// the block's start (session 29); held this way they stay where they are written.
// Measured (session 30, Cascade Lake, 2 threads, one column, 8192 x 16384 out of cache,
// alternating with a plain read of the same bytes, medians of 6 rounds), the tile's rate as
// a share of the plain read's, one prefetch beside each line's load -> the cursor: q6_K
// 0.900 -> 0.962, q4_K 0.970 -> 0.987, iq4_xs 0.906 -> 0.996. End to end: docs/perf.md.
template <bool kPf>
class PrefetchCursor {
 public:
  explicit PrefetchCursor(const std::byte* run) {
    if constexpr (kPf) next_ = (reinterpret_cast<uintptr_t>(run) + kPrefetchAhead) & ~uintptr_t{63};
  }

  // Step `step` of kSteps of the block at gb (kBlockBytes long) is done; `line` is a
  // register it loaded.
  template <size_t kBlockBytes, int kSteps>
  [[gnu::always_inline]] void step(const std::byte* gb, int step, const __m512i& line) {
    if constexpr (kPf) {
      const uintptr_t want = reinterpret_cast<uintptr_t>(gb) + (static_cast<size_t>(step) + 1) * kBlockBytes / kSteps +
                             kPrefetchAhead;
      // At most this many lines a step; written out (a loop here kept GCC from unrolling
      // the wider tiles' steps, which then spilled).
      constexpr int kMaxLines = static_cast<int>((kBlockBytes / kSteps + 63) / 64) + 1;
      #pragma GCC unroll 8
      for (int i = 0; i < kMaxLines; ++i) {
        if (next_ >= want) break;
        asm volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(next_)), "v"(line));
        next_ += 64;
      }
    }
  }

 private:
  uintptr_t next_ = 0;
};

// Runs step(0) .. step(N - 1): written out in the one-column tiles (C == 1), a loop in the
// wider ones (kWideUnroll: its unroll factor, 1 or 2). A one-column tile streams its
// weights from memory with no software prefetch, and the straight-line block lets the core
// overlap one sub-block's loads and dot products with the next one's (the steps are
// independent but for their sums). Measured (session 19; one column, 2 threads,
// llama-3.2-1b's layer shapes x 16 layers out of cache, rolled and unrolled alternating,
// 48 rounds, medians of the per-round ratios): q4_K +6.6%, q6_K +4.5%, iq4_xs +6.7%,
// q5_K +2%. In the wider tiles the written-out form only adds code.
template <int C, int N, int kWideUnroll = 1, typename Step>
[[gnu::always_inline]] inline void sub_block_steps(Step&& step) {
  static_assert(kWideUnroll == 1 || kWideUnroll == 2);
  if constexpr (C == 1) {
    [&]<int... I>(std::integer_sequence<int, I...>) { (step(I), ...); }(std::make_integer_sequence<int, N>{});
  } else if constexpr (kWideUnroll == 2) {
    #pragma GCC unroll 2
    for (int i = 0; i < N; ++i) step(i);
  } else {
    #pragma GCC unroll 1
    for (int i = 0; i < N; ++i) step(i);
  }
}

// q8_0 / q4_0 / q5_0 (kBits 8, 4, 5): sumf += (float)sumi * (d_w * d_x) per block; the side
// data holds d_x and the unsigned weights' offset correction (-128, -8 or -16 * sum(q_x)).
// q5_0's fifth bits are ORed in at bit 4 of every quant byte.
// q4_1 / q5_1 (kBits 4, 5 and kMin; q8_1 activations): the same quants with no offset (the
// sums start at 0), acc += (d_w * d_x) * (float)sumi and acc_m += m_w * s_x per block, result
// acc + acc_m; the side data holds d_x and s_x (prepare_side_q8_1).
template <int kBits, bool kMin, int C, bool kPf>
void tile_q8(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* side,
             size_t ss, __mmask16 mask, float* y, int64_t ys) {
  static_assert(!kMin || kBits != 8);
  using Act = std::conditional_t<kMin, BlockQ8_1, BlockQ8_0>;
  constexpr size_t kGroupBlock = kBits == 8 ? kQ8_0GroupBlock
                                 : kBits == 4 ? (kMin ? kQ4_1GroupBlock : kQ4_0GroupBlock)
                                              : (kMin ? kQ5_1GroupBlock : kQ5_0GroupBlock);
  constexpr size_t kScales = kGroupBlock - (kMin ? 64 : 32);  // [r] f16 d (then [r] f16 m)
  // The min terms in the block loop, or (tiles of 5 to 8 columns) in a pass of their own
  // after it, over the group blocks' m rows again (in cache): the acc_m chains do not depend
  // on the dot products, and the 8-column tile with them in the loop (acc, acc_m, s, s_hi:
  // all 32 registers) spilled in every block (measured, 2048 x 2048 at 512 columns, 1 thread:
  // q4_1 16.2 -> 15.3 ms, q5_1 18.3 -> 16.2 ms with the pass after).
  constexpr bool kMinInLoop = kMin && C <= 4;
  const __m512i m4 = _mm512_set1_epi8(15), m16 = _mm512_set1_epi8(16);
  PrefetchCursor<kPf> pf(group);
  __m512 acc[C], acc_m[C];
  #pragma GCC unroll 8
  for (int c = 0; c < C; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kGroupBlock;
    const std::byte* xb = x + ib * sizeof(Act) + offsetof(Act, qs);
    // The embedded-broadcast dot product (dpbusd_bcast) but in the one-column q8_0 / q5_0 /
    // q5_1 tiles, which streamed their groups from memory 8-16% slower with it than with a
    // separate vpbroadcastd (2 threads, 150-290 MB, alternating with a plain read of the same
    // bytes; q4_0 / q4_1 level, and in the L2 all faster: docs/perf.md, session 22).
    const auto dot = [](__m512i acc, __m512i w, const std::byte* p) __attribute__((always_inline)) {
      if constexpr (C == 1 && kBits != 4) return _mm512_dpbusd_epi32(acc, w, bcast_i32(p));
      else return dpbusd_bcast(acc, w, p);
    };
    __m512i s[C];
    #pragma GCC unroll 8
    for (int c = 0; c < C; ++c) s[c] = kMin ? _mm512_setzero_si512() : bcast_i32(side + c * ss + ib * 8 + 4);
    if constexpr (kBits != 8) {
      // Two chains per column (low, high nibbles) so that one block's 8 dot steps are not
      // one serial dependency.
      __m512i s_hi[C];
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) s_hi[c] = _mm512_setzero_si512();
      #pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512i q = load512(gb + 64 * k);
        asm("" : "+v"(q));  // one load (see tile_q4_k)
        pf.template step<kGroupBlock, 4>(gb, k, q);
        __m512i lo, hi;
        if constexpr (kBits == 4) {
          lo = _mm512_and_si512(q, m4);
          hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
        } else {
          // (q & 15) | (fifth bits & 16): vpternlogd 0xea is (A & B) | C.
          const __m512i h = load512(gb + 256);
          lo = _mm512_ternarylogic_epi32(q, m4, _mm512_and_si512(_mm512_slli_epi32(h, 4 - k), m16), 0xea);
          hi = _mm512_ternarylogic_epi32(_mm512_srli_epi16(q, 4), m4, _mm512_and_si512(_mm512_srli_epi32(h, k), m16),
                                         0xea);
        }
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
          s[c] = dot(s[c], lo, xb + c * xs + 4 * k);
          s_hi[c] = dot(s_hi[c], hi, xb + c * xs + 16 + 4 * k);
        }
      }
      #pragma GCC unroll 8
      for (int c = 0; c < C; ++c) s[c] = _mm512_add_epi32(s[c], s_hi[c]);
    } else {
      #pragma GCC unroll 8
      for (int g = 0; g < 8; ++g) {
        __m512i q = load512(gb + 64 * g);
        pf.template step<kGroupBlock, 8>(gb, g, q);
        #pragma GCC unroll 8
        for (int c = 0; c < C; ++c) s[c] = dot(s[c], q, xb + c * xs + 4 * g);
      }
    }
    __m512i dw = _mm512_castsi256_si512(load256(gb + kScales));
    add_q8_block<C>(acc, side + ib * 8, ss, _mm512_cvtph_ps(_mm512_castsi512_si256(dw)), s);
    if constexpr (kMinInLoop)
      add_min_block<C>(acc_m, side + ib * 8, ss, _mm512_cvtph_ps(load256(gb + kScales + 32)));
  }
  if constexpr (kMin && !kMinInLoop) {
    #pragma GCC unroll 1
    for (int64_t ib = 0; ib < nb; ++ib)
      add_min_block<C>(acc_m, side + ib * 8, ss, _mm512_cvtph_ps(load256(group + ib * kGroupBlock + kScales + 32)));
  }
  store_cols<C>(acc, kMin ? acc_m : nullptr, mask, y, ys);
}

// q4_K: acc += (d_x * d_w) * (float)sumi, acc_m += (-d_x * dmin_w) * (float)summ per block,
// result acc + acc_m; sumi = sum_s sc[s] * (q . q8 over s), summ = sum_s m[s] * bsum[s].
// q5_K (kQ5): 16 added to each quant byte whose fifth bit is set (the layout's byte masks).
template <bool kQ5, int C, bool kPf>
void tile_q4_k(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* side,
               size_t ss, __mmask16 mask, float* y, int64_t ys) {
  constexpr size_t kQh = kQ5 ? 512 : 0;  // the fifth bits' masks (in the quant sections)
  constexpr size_t kGroupBlock = kQ5 ? kQ5_KGroupBlock : kQ4_KGroupBlock;
  const __m512i m4 = _mm512_set1_epi8(15), m16 = _mm512_set1_epi8(16);
  PrefetchCursor<kPf> pf(group);
  __m512 acc[C], acc_m[C];
  #pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = acc_m[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kGroupBlock;
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    __m512i sumi[C], summ[C];
    #pragma GCC unroll 4
    for (int c = 0; c < C; ++c) sumi[c] = summ[c] = _mm512_setzero_si512();
    sub_block_steps<C, 4>([&](int cc) __attribute__((always_inline)) {
      __m512i tl[C], th[C];
      #pragma GCC unroll 4
      for (int c = 0; c < C; ++c) tl[c] = th[c] = _mm512_setzero_si512();
      const std::byte* xq = xb + offsetof(BlockQ8_K, qs) + 64 * cc;
      #pragma GCC unroll 8
      for (int k = 0; k < 8; ++k) {
        const std::byte* qline = gb + (kQ5 ? 640 * cc + 128 + 64 * k : 512 * cc + 64 * k);
        __m512i q = load512(qline);
        pf.template step<kGroupBlock, 32>(gb, 8 * cc + k, q);
        // One load in a register: folded into each op that uses it, the compiler loads the
        // line twice, and the load ports are what these tiles wait on.
        asm("" : "+v"(q));
        __m512i lo, hi;
        if constexpr (!kQ5) {
          // The high nibbles left in place, q & 0xf0 = 16 * hi: th sums 16x its value,
          // shifted back once per sub-block below (exact: every term is a multiple of 16).
          lo = _mm512_and_si512(q, m4);
          hi = _mm512_andnot_si512(m4, q);
        } else {
          // The fifth bits as two byte masks (lo, hi) read straight into mask registers:
          // 16 added under each (vpaddb with merge masking).
          const std::byte* hm = gb + 640 * cc + 16 * k;
          __mmask64 klo, khi;
          std::memcpy(&klo, hm, 8);
          std::memcpy(&khi, hm + 8, 8);
          lo = _mm512_and_si512(q, m4);
          lo = _mm512_mask_add_epi8(lo, klo, lo, m16);
          hi = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
          hi = _mm512_mask_add_epi8(hi, khi, hi, m16);
        }
        #pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          tl[c] = dpbusd_bcast(tl[c], lo, xq + c * xs + 4 * k);
          th[c] = dpbusd_bcast(th[c], hi, xq + c * xs + 32 + 4 * k);
        }
      }
      const __m512i scl = _mm512_cvtepu8_epi32(load128(gb + kQh + 2048 + 16 * (2 * cc)));
      const __m512i sch = _mm512_cvtepu8_epi32(load128(gb + kQh + 2048 + 16 * (2 * cc + 1)));
      #pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        if constexpr (!kQ5) th[c] = _mm512_srai_epi32(th[c], 4);
        sumi[c] = _mm512_add_epi32(sumi[c], _mm512_add_epi32(_mm512_mullo_epi32(tl[c], scl), _mm512_mullo_epi32(th[c], sch)));
      }
    });
    #pragma GCC unroll 4
    for (int j = 0; j < 4; ++j) {
      const __m512i mv = _mm512_cvtepu8_epi16(load256(gb + kQh + 2176 + 32 * j));
      #pragma GCC unroll 4
      for (int c = 0; c < C; ++c) summ[c] = _mm512_dpwssd_epi32(summ[c], mv, bcast_i32(side + c * ss + ib * 16 + 4 * j));
    }
    add_k_block<C>(acc, xb, xs, 1.0f, _mm512_cvtph_ps(load256(gb + kQh + 2304)), sumi);
    add_k_block<C>(acc_m, xb, xs, -1.0f, _mm512_cvtph_ps(load256(gb + kQh + 2336)), summ);
  }
  store_cols<C>(acc, acc_m, mask, y, ys);
}

// q6_K: acc += (d_x * d_w) * (float)sumi per block, sumi = sum_s scales[s] * ((q6 - 32) . q8
// over s); each sub-block's dot starts at the side data's -32 * bsum[s].
template <int C, bool kPf>
void tile_q6_k(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* side,
               size_t ss, __mmask16 mask, float* y, int64_t ys) {
  const __m512i m63 = _mm512_set1_epi8(63), top = _mm512_set1_epi8(static_cast<char>(0xc0));
  PrefetchCursor<kPf> pf(group);
  __m512 acc[C];
  #pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kQ6_KGroupBlock;
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    const std::byte* sb = side + ib * 64;
    __m512i sumi[C];
    #pragma GCC unroll 4
    for (int c = 0; c < C; ++c) sumi[c] = _mm512_setzero_si512();
    sub_block_steps<C, 4>([&](int hk) __attribute__((always_inline)) {  // half h = hk / 2; dwords k of 4 * (hk % 2) .. + 3
      const int h = hk >> 1, kk = hk & 1;
      // Sub-block of quarter qi: 8h + 2qi + kk.
      __m512i t[4][C];
      #pragma GCC unroll 4
      for (int qi = 0; qi < 4; ++qi) {
        #pragma GCC unroll 4
        for (int c = 0; c < C; ++c) t[qi][c] = bcast_i32(sb + c * ss + 4 * (8 * h + 2 * qi + kk));
      }
      // Quarter 3's quants go in times 4 (v[3] below): its sums start at 4x the side data and
      // are shifted back after the dot products (exact: every term is a multiple of 4).
      #pragma GCC unroll 4
      for (int c = 0; c < C; ++c) t[3][c] = _mm512_slli_epi32(t[3][c], 2);
      #pragma GCC unroll 4
      for (int k = 4 * kk; k < 4 * kk + 4; ++k) {
        const std::byte* q = gb + (8 * h + k) * 192;
        __m512i pv = load512(q), qv = load512(q + 64), rv = load512(q + 128);
        // Each line loaded once into a register: folded into each op that uses it, the
        // compiler loads it twice, and the load ports set these tiles' pace.
        asm("" : "+v"(pv), "+v"(qv), "+v"(rv));
        pf.template step<kQ6_KGroupBlock, 16>(gb, 8 * h + k, pv);
        __m512i v[4];
        v[0] = _mm512_and_si512(pv, m63);
        v[1] = _mm512_and_si512(qv, m63);
        v[2] = _mm512_and_si512(rv, m63);
        // 4 * q3 (at most 252): P's top pair in place, Q's and R's moved down by 2 and 4
        // (masked first, so the 16-bit shifts carry nothing across bytes); three-way or
        // as one vpternlogd (0xfe).
        v[3] = _mm512_ternarylogic_epi32(_mm512_and_si512(pv, top), _mm512_srli_epi16(_mm512_and_si512(qv, top), 2),
                                         _mm512_srli_epi16(_mm512_and_si512(rv, top), 4), 0xfe);
        const std::byte* xq = xb + offsetof(BlockQ8_K, qs) + 128 * h + 4 * k;
        #pragma GCC unroll 4
        for (int qi = 0; qi < 4; ++qi) {
          #pragma GCC unroll 4
          for (int c = 0; c < C; ++c) t[qi][c] = dpbusd_bcast(t[qi][c], v[qi], xq + c * xs + 32 * qi);
        }
      }
      #pragma GCC unroll 4
      for (int c = 0; c < C; ++c) t[3][c] = _mm512_srai_epi32(t[3][c], 2);
      #pragma GCC unroll 4
      for (int qi = 0; qi < 4; ++qi) {
        const __m512i sc = _mm512_cvtepi8_epi32(load128(gb + 3072 + 16 * (8 * h + 2 * qi + kk)));
        #pragma GCC unroll 4
        for (int c = 0; c < C; ++c) sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(t[qi][c], sc));
      }
    });
    add_k_block<C>(acc, xb, xs, 1.0f, _mm512_cvtph_ps(load256(gb + 3328)), sumi);
  }
  store_cols<C>(acc, nullptr, mask, y, ys);
}

// iq4_xs: acc += (d_x * d_w) * (float)sumi per block, sumi = sum_c (ls[c] - 32) * (v . q8
// over sub-block c), the values v looked up from the codes as v + 128 (vpshufb), each
// sub-block's dot starting at the side data's -128 * bsum[c]; two chains per column (low,
// high nibbles) as tile_q8's. The reference's kScaleMul is 1.
// kVbmi (the CPU has AVX512_VBMI): the lookups by vpermb over the 16 values repeated four
// times, which reads the low 6 bits of each index byte, so neither nibble needs its AND
// (vpshufb zeroes a byte whose index has bit 7 set): one column in the L2 1.17-1.18x
// (docs/perf.md, session 22). vpermb is written as inline asm so that this file keeps the AVX-512 table's flags.
template <int C, bool kPf, bool kVbmi = false>
void tile_iq4_xs(int64_t nb, const std::byte* group, const std::byte* x, size_t xs, const std::byte* side,
                 size_t ss, __mmask16 mask, float* y, int64_t ys) {
  const __m512i m4 = _mm512_set1_epi8(15);
  const auto lookup = [](__m512i table, __m512i idx) __attribute__((always_inline)) {
    __m512i v;
    asm("vpermb %2, %1, %0" : "=v"(v) : "v"(idx), "v"(table));
    return v;
  };
  const __m512i table = _mm512_xor_si512(_mm512_broadcast_i32x4(load128(kIq4nlValues)),
                                         _mm512_set1_epi8(static_cast<char>(0x80)));
  PrefetchCursor<kPf> pf(group);
  __m512 acc[C];
  #pragma GCC unroll 4
  for (int c = 0; c < C; ++c) acc[c] = _mm512_setzero_ps();
  for (int64_t ib = 0; ib < nb; ++ib) {
    const std::byte* gb = group + ib * kIQ4_XSGroupBlock;
    const std::byte* xb = x + ib * sizeof(BlockQ8_K);
    __m512i sumi[C];
    #pragma GCC unroll 4
    for (int c = 0; c < C; ++c) sumi[c] = _mm512_setzero_si512();
    sub_block_steps<C, 8, 2>([&](int sb) __attribute__((always_inline)) {
      __m512i t[C], t_hi[C];
      #pragma GCC unroll 4
      for (int c = 0; c < C; ++c) {
        t[c] = bcast_i32(side + c * ss + ib * 32 + 4 * sb);
        t_hi[c] = _mm512_setzero_si512();
      }
      const std::byte* xq = xb + offsetof(BlockQ8_K, qs) + 32 * sb;
      #pragma GCC unroll 4
      for (int k = 0; k < 4; ++k) {
        __m512i q = load512(gb + (4 * sb + k) * 64);
        asm("" : "+v"(q));
        pf.template step<kIQ4_XSGroupBlock, 32>(gb, 4 * sb + k, q);
        __m512i lo, hi;
        if constexpr (kVbmi) {
          lo = lookup(table, q);
          hi = lookup(table, _mm512_srli_epi16(q, 4));
        } else {
          lo = _mm512_shuffle_epi8(table, _mm512_and_si512(q, m4));
          hi = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_srli_epi16(q, 4), m4));
        }
        #pragma GCC unroll 4
        for (int c = 0; c < C; ++c) {
          t[c] = dpbusd_bcast(t[c], lo, xq + c * xs + 4 * k);
          t_hi[c] = dpbusd_bcast(t_hi[c], hi, xq + c * xs + 16 + 4 * k);
        }
      }
      const __m512i sc = _mm512_cvtepi8_epi32(load128(gb + 2048 + 16 * sb));
      #pragma GCC unroll 4
      for (int c = 0; c < C; ++c) sumi[c] = _mm512_add_epi32(sumi[c], _mm512_mullo_epi32(_mm512_add_epi32(t[c], t_hi[c]), sc));
    });
    add_k_block<C>(acc, xb, xs, 1.0f, _mm512_cvtph_ps(load256(gb + 2176)), sumi);
  }
  store_cols<C>(acc, nullptr, mask, y, ys);
}

enum class TileKind { kQ8_0, kQ4_0, kQ5_0, kQ4_1, kQ5_1, kQ4_K, kQ5_K, kIQ4_XS, kIQ4_XSVbmi, kQ6_K };

// The tiles of one kind, C columns; kPf: prefetch the weights (tiles that stream them from
// memory, see gemm_groups).
template <TileKind kKind, bool kPf>
struct Tiles {
  template <int C>
  struct Width {
    static void run(int64_t nb, const std::byte* g, const std::byte* x, size_t xs, const std::byte* s, size_t ss,
                    __mmask16 m, float* y, int64_t ys) {
      if constexpr (kKind == TileKind::kQ8_0) tile_q8<8, false, C, kPf>(nb, g, x, xs, s, ss, m, y, ys);
      if constexpr (kKind == TileKind::kQ4_0) tile_q8<4, false, C, kPf>(nb, g, x, xs, s, ss, m, y, ys);
      if constexpr (kKind == TileKind::kQ5_0) tile_q8<5, false, C, kPf>(nb, g, x, xs, s, ss, m, y, ys);
      if constexpr (kKind == TileKind::kQ4_1) tile_q8<4, true, C, kPf>(nb, g, x, xs, s, ss, m, y, ys);
      if constexpr (kKind == TileKind::kQ5_1) tile_q8<5, true, C, kPf>(nb, g, x, xs, s, ss, m, y, ys);
      if constexpr (kKind == TileKind::kQ4_K) tile_q4_k<false, C, kPf>(nb, g, x, xs, s, ss, m, y, ys);
      if constexpr (kKind == TileKind::kQ5_K) tile_q4_k<true, C, kPf>(nb, g, x, xs, s, ss, m, y, ys);
      if constexpr (kKind == TileKind::kIQ4_XS) tile_iq4_xs<C, kPf>(nb, g, x, xs, s, ss, m, y, ys);
      if constexpr (kKind == TileKind::kIQ4_XSVbmi) tile_iq4_xs<C, kPf, true>(nb, g, x, xs, s, ss, m, y, ys);
      if constexpr (kKind == TileKind::kQ6_K) tile_q6_k<C, kPf>(nb, g, x, xs, s, ss, m, y, ys);
    }
  };
};

// Which tiles prefetch (Zen 4, weights on 2 MiB pages, 2 threads, alternating runs):
//   1 column (decode of one sequence): none on AMD (gemm), all on Intel (gemm_prefetch;
//     the choice is fill_matmul_kernels'). On Zen 4 the hardware prefetchers run unhindered
//     on 2 MiB pages, and the software prefetches into L1 held decode back when the machine's
//     read bandwidth was high: llama-3.2-1b Q4_K_M tg64 at 67-73 GB/s 47.2 / 48.9 / 47.2 with
//     them, 58.0 / 58.3 / 60.8 tok/s without; OLMoE-1B-7B and qwen2.5-0.5b Q4_0 also ahead
//     without. On a Cascade Lake Xeon (2 cores, ~22 GB/s) Intel's L2 streamer stops at every
//     4 KiB boundary whatever the page size, and the stream fell short without them: 2
//     threads, 8192 x 16384 out of cache, q4_K 12.5 -> 17.7 GB/s, q6_K 14.6 -> 17.9, q4_0
//     17.3 -> 18.5 (docs/perf.md, "Cascade Lake host").
//   2 .. kStreamCols columns (batched decode, a speculative verify: ops.cc gives them ranges
//     of groups; each group is read from memory once, by its first column tile): prefetch.
//     The tiles are slower per byte and the stream stalls without: llama-3.2-1b Q4_K_M's
//     9-token verify step 75-76 ms without, 59-61 with.
//   wider calls (chunks of groups meeting a prefill's batch) re-read groups from cache and
//     are compute-bound: none.
constexpr int64_t kStreamCols = 16;

// n_rows rows = consecutive groups from `groups`, each against every activation row.
// kPf1: the one-column tiles prefetch too (InterleavedKernels::gemm_prefetch).
template <int kBlock, size_t kGroupBlock, int kCols, TileKind kKind, bool kPf1 = false>
void gemm_groups(int64_t n, const std::byte* groups, int64_t n_rows, const std::byte* x, size_t xs,
                 const std::byte* side, size_t ss, int64_t n_cols, float* y, int64_t ys) {
  const int64_t nb = n / kBlock;
  const size_t stride = static_cast<size_t>(nb) * kGroupBlock;
  for (int64_t r0 = 0; r0 < n_rows; r0 += kRows) {
    const std::byte* g = groups + (r0 / kRows) * stride;
    if (n_cols >= (kPf1 ? 1 : 2) && n_cols <= kStreamCols)
      TileSet<kCols, Tiles<kKind, true>::template Width>::run(nb, g, n_rows - r0, x, xs, side, ss, n_cols, y + r0, ys);
    else
      TileSet<kCols, Tiles<kKind, false>::template Width>::run(nb, g, n_rows - r0, x, xs, side, ss, n_cols, y + r0, ys);
  }
}

// Both forms of a layout's products: one-column tiles streaming with and without software
// prefetch (the table builder picks one per CPU).
template <int kBlock, size_t kGroupBlock, int kCols, TileKind kKind>
void set_gemms(InterleavedKernels& ik) {
  ik.gemm = ik.gemm_stream = &gemm_groups<kBlock, kGroupBlock, kCols, kKind, false>;
  ik.gemm_prefetch = &gemm_groups<kBlock, kGroupBlock, kCols, kKind, true>;
}

}  // namespace

// ---- the type table's interleaved AVX-512 entries (isa_kernels.h) ----------------------

void mm_q8_0_avx512_interleaved(MatmulKernels& mk) {
  mk.interleaved = {"q8_0x16", kRows, &group_bytes<kQ8_0GroupBlock, kQk>, &q8_side_bytes, &prepare_side_q8<7>,
                    &pack_q8_0};
  set_gemms<kQk, kQ8_0GroupBlock, 8, TileKind::kQ8_0>(mk.interleaved);
}
void mm_q4_0_avx512_interleaved(MatmulKernels& mk) {
  mk.interleaved = {"q4_0x16", kRows, &group_bytes<kQ4_0GroupBlock, kQk>, &q8_side_bytes, &prepare_side_q8<3>,
                    &pack_q4<BlockQ4_0>};
  set_gemms<kQk, kQ4_0GroupBlock, 8, TileKind::kQ4_0>(mk.interleaved);
}
void mm_q5_0_avx512_interleaved(MatmulKernels& mk) {
  mk.interleaved = {"q5_0x16", kRows, &group_bytes<kQ5_0GroupBlock, kQk>, &q8_side_bytes, &prepare_side_q8<4>,
                    &pack_q5<BlockQ5_0>};
  set_gemms<kQk, kQ5_0GroupBlock, 8, TileKind::kQ5_0>(mk.interleaved);
}
void mm_q4_1_avx512_interleaved(MatmulKernels& mk) {
  mk.interleaved = {"q4_1x16", kRows, &group_bytes<kQ4_1GroupBlock, kQk>, &q8_side_bytes, &prepare_side_q8_1,
                    &pack_q4<BlockQ4_1>};
  set_gemms<kQk, kQ4_1GroupBlock, 8, TileKind::kQ4_1>(mk.interleaved);
}
void mm_q5_1_avx512_interleaved(MatmulKernels& mk) {
  mk.interleaved = {"q5_1x16", kRows, &group_bytes<kQ5_1GroupBlock, kQk>, &q8_side_bytes, &prepare_side_q8_1,
                    &pack_q5<BlockQ5_1>};
  set_gemms<kQk, kQ5_1GroupBlock, 8, TileKind::kQ5_1>(mk.interleaved);
}
void mm_q4_k_avx512_interleaved(MatmulKernels& mk) {
  mk.interleaved = {"q4_Kx16m", kRows, &group_bytes<kQ4_KGroupBlock, kQkK>, &q4_k_side_bytes, &prepare_side_q4_k,
                    &pack_q4_k<BlockQ4_K>};
  set_gemms<kQkK, kQ4_KGroupBlock, 4, TileKind::kQ4_K>(mk.interleaved);
}
void mm_q5_k_avx512_interleaved(MatmulKernels& mk) {
  mk.interleaved = {"q5_Kx16m", kRows, &group_bytes<kQ5_KGroupBlock, kQkK>, &q4_k_side_bytes, &prepare_side_q4_k,
                    &pack_q4_k<BlockQ5_K>};
  set_gemms<kQkK, kQ5_KGroupBlock, 4, TileKind::kQ5_K>(mk.interleaved);
}
void mm_q6_k_avx512_interleaved(MatmulKernels& mk) {
  mk.interleaved = {"q6_Kx16p", kRows, &group_bytes<kQ6_KGroupBlock, kQkK>, &q6_k_side_bytes, &prepare_side_q6_k,
                    &pack_q6_k};
  set_gemms<kQkK, kQ6_KGroupBlock, 4, TileKind::kQ6_K>(mk.interleaved);
}
void mm_iq4_xs_avx512_interleaved(MatmulKernels& mk) {
  mk.interleaved = {"iq4_xsx16", kRows, &group_bytes<kIQ4_XSGroupBlock, kQkK>, &iq4_xs_side_bytes,
                    &prepare_side_iq4_xs, &pack_iq4_xs};
  set_gemms<kQkK, kIQ4_XSGroupBlock, 4, TileKind::kIQ4_XS>(mk.interleaved);
}
void mm_iq4_xs_avx512vbmi_interleaved(MatmulKernels& mk) {  // the same layout, vpermb tiles
  mm_iq4_xs_avx512_interleaved(mk);
  set_gemms<kQkK, kIQ4_XSGroupBlock, 4, TileKind::kIQ4_XSVbmi>(mk.interleaved);
}

}  // namespace lumen::kernels
