// The i-quant formats: the transcribed grids, every grid index through the dequantizers and
// every table, hostile blocks. (llama.cpp's own dequantized values and dot products of every
// i-quant are KernelsGolden.*, golden_test.cc; the dot against the dequantized values is
// KernelsVecDot.MatchesDequantizedDoubleReference.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "base/fp16.h"
#include "kernels/iq_blocks.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_ref.h"
#include "kernels/kernels_test_util.h"
#include "kernels/ops.h"

namespace lumen::kernels {
namespace {

uint64_t fnv1a(const void* data, size_t n, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < n; ++i) {
    h ^= p[i];
    h *= 0x100000001b3ull;
  }
  return h;
}

// Checksums of the tables as ggml-common.h (llama.cpp c392e5094) defines them: FNV-1a 64
// over each table's little-endian bytes, computed once from that source.
TEST(IqGrids, ChecksumsMatchTheFormat) {
  EXPECT_EQ(fnv1a(kIq2xxsGrid, sizeof(kIq2xxsGrid)), 0xbb4ee025b5ac6e8eull);
  EXPECT_EQ(fnv1a(kIq2xsGrid, sizeof(kIq2xsGrid)), 0xc9b1ee61e79909bdull);
  EXPECT_EQ(fnv1a(kIq2sGrid, sizeof(kIq2sGrid)), 0x123edd38a3b62b90ull);
  EXPECT_EQ(fnv1a(kIq3xxsGrid, sizeof(kIq3xxsGrid)), 0xdfa5dc83d6a155d5ull);
  EXPECT_EQ(fnv1a(kIq3sGrid, sizeof(kIq3sGrid)), 0xfa37020c25b44829ull);
  EXPECT_EQ(fnv1a(kIq1sGrid, sizeof(kIq1sGrid)), 0x6703ed863501ae2eull);
  EXPECT_EQ(fnv1a(kIqSigns.v, sizeof(kIqSigns.v)), 0xf19ba8f8c3292ba5ull);  // ksigns_iq2xs
}

// Structural facts a transcription error would break: every grid byte from the format's
// value set, entries distinct, and (all but iq1s) sorted ascending as the source lists them.
template <typename T, size_t N>
void check_grid(const T (&grid)[N], std::set<int> values, bool sorted, const char* name) {
  std::set<T> seen;
  for (size_t i = 0; i < N; ++i) {
    for (size_t j = 0; j < sizeof(T); ++j) {
      const int b = static_cast<int>((grid[i] >> (8 * j)) & 0xff);
      ASSERT_TRUE(values.count(b)) << name << "[" << i << "] byte " << j << " = " << b;
    }
    EXPECT_TRUE(seen.insert(grid[i]).second) << name << "[" << i << "] repeats";
    if (sorted && i > 0) {
      EXPECT_LT(grid[i - 1], grid[i]) << name << "[" << i << "]";
    }
  }
}

TEST(IqGrids, EveryEntryIsFromTheValueSet) {
  check_grid(kIq2xxsGrid, {8, 25, 43}, true, "iq2xxs");
  check_grid(kIq2xsGrid, {8, 25, 43}, true, "iq2xs");
  check_grid(kIq2sGrid, {8, 25, 43}, true, "iq2s");
  check_grid(kIq3xxsGrid, {4, 12, 20, 28, 36, 44, 52, 62}, true, "iq3xxs");
  check_grid(kIq3sGrid, {1, 3, 5, 7, 9, 11, 13, 15}, true, "iq3s");
  check_grid(kIq1sGrid, {0xff, 0, 1}, false, "iq1s");
  for (int i = 1; i < 16; ++i) EXPECT_LT(kIq4nlValues[i - 1], kIq4nlValues[i]);
  for (uint32_t i = 0; i < 128; ++i) {
    EXPECT_EQ(kIqSigns.v[i] & 127, i);
    EXPECT_EQ(__builtin_popcount(kIqSigns.v[i]) % 2, 0);
  }
}

const DType kIqTypes[] = {DType::kIQ4_NL, DType::kIQ4_XS,  DType::kIQ3_S, DType::kIQ3_XXS, DType::kIQ2_S,
                          DType::kIQ2_XS, DType::kIQ2_XXS, DType::kIQ1_S, DType::kIQ1_M};

// Every grid index and every sign pattern decodes to the grid entry with those signs: one
// block per index range, built field by field (independent of the block's bit layout
// helpers only through the struct fields the format names).
TEST(IqReference, EveryGridIndexDecodes) {
  // iq2_xs: 32 groups per block, 9-bit index + 7-bit sign field per uint16.
  for (int i0 = 0; i0 < 512; i0 += 32) {
    BlockIQ2_XS b{};
    b.d_f16 = f32_to_fp16(1.0f);
    for (int g = 0; g < 32; ++g) b.qs[g] = static_cast<uint16_t>((i0 + g) | ((g * 5 + i0) & 127) << 9);
    std::memset(b.scales, 0x33, sizeof(b.scales));  // s = 3: (2s + 1) / 8 = 7/8
    const std::vector<float> y = testing::dequantize(DType::kIQ2_XS, reinterpret_cast<const std::byte*>(&b), 256);
    for (int g = 0; g < 32; ++g) {
      const uint32_t signs = kIqSigns.v[(g * 5 + i0) & 127];
      for (int j = 0; j < 8; ++j) {
        const float v = static_cast<float>((kIq2xsGrid[i0 + g] >> (8 * j)) & 0xff) * 0.875f;
        ASSERT_EQ(y[8 * g + j], (signs >> j) & 1 ? -v : v) << "index " << i0 + g << " j " << j;
      }
    }
  }
  // iq1_s: 11-bit index over the 2048-entry grid, both shift signs.
  for (int i0 = 0; i0 < 2048; i0 += 32) {
    BlockIQ1_S b{};
    b.d_f16 = f32_to_fp16(1.0f);
    for (int ib = 0; ib < 8; ++ib) {
      uint32_t h = (ib % 2 ? 0x8000u : 0) | (2u << 12);  // s = 2: scale 5
      for (int l = 0; l < 4; ++l) {
        const int idx = i0 + 4 * ib + l;
        b.qs[4 * ib + l] = static_cast<uint8_t>(idx & 255);
        h |= static_cast<uint32_t>(idx >> 8) << (3 * l);
      }
      b.qh[ib] = static_cast<uint16_t>(h);
    }
    const std::vector<float> y = testing::dequantize(DType::kIQ1_S, reinterpret_cast<const std::byte*>(&b), 256);
    for (int g = 0; g < 32; ++g) {
      for (int j = 0; j < 8; ++j) {
        const float v = static_cast<int8_t>((kIq1sGrid[i0 + g] >> (8 * j)) & 0xff);
        ASSERT_EQ(y[8 * g + j], 5.0f * (v + ((g / 4) % 2 ? -0.125f : 0.125f))) << "index " << i0 + g;
      }
    }
  }
}

// Sets the grid index of group g (the groups of 8, or of 4 for the iq3 types) of block b.
void set_grid_index(DType dt, std::byte* b, int g, uint32_t idx) {
  switch (dt) {
    case DType::kIQ2_XXS: reinterpret_cast<uint8_t*>(reinterpret_cast<BlockIQ2_XXS*>(b)->qs)[8 * (g / 4) + g % 4] = idx & 255; break;
    case DType::kIQ2_XS: {
      uint16_t& q = reinterpret_cast<BlockIQ2_XS*>(b)->qs[g];
      q = static_cast<uint16_t>((q & ~511u) | idx);
      break;
    }
    case DType::kIQ2_S: {
      auto* blk = reinterpret_cast<BlockIQ2_S*>(b);
      blk->qs[g] = idx & 255;
      blk->qh[g / 4] = static_cast<uint8_t>((blk->qh[g / 4] & ~(3u << 2 * (g % 4))) | (idx >> 8) << 2 * (g % 4));
      break;
    }
    case DType::kIQ3_XXS: reinterpret_cast<BlockIQ3_XXS*>(b)->qs[g] = idx & 255; break;
    case DType::kIQ3_S: {
      auto* blk = reinterpret_cast<BlockIQ3_S*>(b);
      blk->qs[g] = idx & 255;
      blk->qh[g / 8] = static_cast<uint8_t>((blk->qh[g / 8] & ~(1u << g % 8)) | (idx >> 8) << g % 8);
      break;
    }
    case DType::kIQ1_S: {
      auto* blk = reinterpret_cast<BlockIQ1_S*>(b);
      blk->qs[g] = idx & 255;
      blk->qh[g / 4] = static_cast<uint16_t>((blk->qh[g / 4] & ~(7u << 3 * (g % 4))) | (idx >> 8) << 3 * (g % 4));
      break;
    }
    case DType::kIQ1_M: {
      auto* blk = reinterpret_cast<BlockIQ1_M*>(b);
      blk->qs[g] = idx & 255;
      blk->qh[g / 2] = static_cast<uint8_t>((blk->qh[g / 2] & ~(7u << 4 * (g % 2))) | (idx >> 8) << 4 * (g % 2));
      break;
    }
    default: FAIL() << "no grid: " << dtype_name(dt);
  }
}

// Every grid index of every grid type, in rows of random signs, scales and shifts, through
// every table's vec_dot, gemm tile and panel path: bit for bit the reference.
TEST(IqParity, EveryGridIndexInEveryTable) {
  struct Grid {
    DType dt;
    uint32_t n_entries;
    int groups_per_block;
  };
  const Grid grids[] = {{DType::kIQ2_XXS, 256, 32}, {DType::kIQ2_XS, 512, 32}, {DType::kIQ2_S, 1024, 32},
                        {DType::kIQ3_XXS, 256, 64}, {DType::kIQ3_S, 512, 64},  {DType::kIQ1_S, 2048, 32},
                        {DType::kIQ1_M, 2048, 32}};
  std::mt19937 rng(31);
  const KernelTable& ref = reference_kernel_table();
  for (const Grid& gr : grids) {
    const int64_t n = 4 * kQkK, n_rows = 16;
    const int64_t groups_per_row = 4 * gr.groups_per_block;
    std::vector<std::byte> w = testing::random_weights(rng, gr.dt, n_rows, n);
    const size_t bb = dtype_info(gr.dt).block_bytes;
    for (int64_t k = 0; k < n_rows * groups_per_row; ++k) {
      const int64_t block = k / gr.groups_per_block;
      set_grid_index(gr.dt, w.data() + block * bb, static_cast<int>(k % gr.groups_per_block),
                     static_cast<uint32_t>(k % gr.n_entries));
    }
    ASSERT_GE(n_rows * groups_per_row, gr.n_entries);
    const MatmulKernels* mr = find_matmul_kernels(ref, gr.dt);
    const int64_t n_cols = 9;
    const size_t xs = row_bytes(DType::kQ8_K, n), ws = row_bytes(gr.dt, n);
    std::vector<std::byte> xq(xs * n_cols);
    for (int64_t c = 0; c < n_cols; ++c) mr->quantize_act(testing::random_floats(rng, n).data(), xq.data() + c * xs, n);
    std::vector<float> want(n_rows * n_cols);
    for (int64_t r = 0; r < n_rows; ++r)
      for (int64_t c = 0; c < n_cols; ++c) want[c * n_rows + r] = mr->vec_dot(n, w.data() + r * ws, xq.data() + c * xs);
    for (const KernelTable* t : available_kernel_tables()) {
      const MatmulKernels* mk = find_matmul_kernels(*t, gr.dt);
      std::vector<float> y(n_rows * n_cols);
      mk->gemm(n, w.data(), ws, n_rows, xq.data(), xs, n_cols, y.data(), n_rows);
      EXPECT_EQ(y, want) << t->name << " gemm " << dtype_name(gr.dt);
      if (mk->panel.rows == 0) continue;
      std::vector<std::byte> panel(mk->panel.panel_bytes(n));
      mk->panel.pack(n, w.data(), ws, n_rows, panel.data());
      std::fill(y.begin(), y.end(), 0.0f);
      mk->panel.gemm(n, panel.data(), n_rows, xq.data(), xs, nullptr, 0, n_cols, y.data(), n_rows);
      EXPECT_EQ(y, want) << t->name << " panel " << dtype_name(gr.dt);
    }
  }
}

// Hostile data, any bit pattern: every index field of an i-quant is exactly as wide as its
// grid (iq_grids.h; checked here against the grid sizes), so no pattern indexes past a grid.
// Blocks of random bytes, all ones and all zeros (the block scales kept finite) go through
// the dequantizer and every table's vec_dot and gemm on exactly-sized buffers (ASan sees any
// read past a row, a grid or the sign table) and give finite results.
TEST(IqHostile, EveryBitPatternStaysInBounds) {
  static_assert(std::size(kIq2xxsGrid) == 1u << 8 && std::size(kIq2xsGrid) == 1u << 9 &&
                std::size(kIq2sGrid) == 1u << 10 && std::size(kIq3xxsGrid) == 1u << 8 &&
                std::size(kIq3sGrid) == 1u << 9 && std::size(kIq1sGrid) == 1u << 11);
  std::mt19937 rng(43);
  for (DType dt : kIqTypes) {
    const int64_t n = 2 * kQkK, n_rows = 3;
    const size_t ws = row_bytes(dt, n), bb = dtype_info(dt).block_bytes;
    for (int fill : {-1, 0x00, 0xff}) {  // -1: random bytes
      SCOPED_TRACE(std::string(dtype_name(dt)) + " fill " + std::to_string(fill));
      std::vector<std::byte> w = testing::random_weights(rng, dt, n_rows, n);
      if (fill >= 0) {
        std::fill(w.begin(), w.end(), static_cast<std::byte>(fill));
        for (size_t off = 0; off < w.size(); off += bb) testing::set_block_d(dt, w.data() + off, f32_to_fp16(0.01f));
      }
      const std::vector<float> deq = testing::dequantize(dt, w.data(), n * n_rows);
      for (float v : deq) ASSERT_TRUE(std::isfinite(v));
      for (const KernelTable* t : available_kernel_tables()) {
        const MatmulKernels* mk = find_matmul_kernels(*t, dt);
        const size_t xs = row_bytes(mk->act_dtype, n);
        std::vector<std::byte> xq(xs);
        mk->quantize_act(testing::random_floats(rng, n).data(), xq.data(), n);
        std::vector<float> y(n_rows);
        mk->gemm(n, w.data(), ws, n_rows, xq.data(), xs, 1, y.data(), n_rows);
        for (int64_t r = 0; r < n_rows; ++r) {
          const float v = mk->vec_dot(n, w.data() + r * ws, xq.data());
          EXPECT_TRUE(std::isfinite(v) && v == y[r]) << t->name << " row " << r << ": " << v << " vs " << y[r];
        }
      }
    }
  }
}

// Hostile data: grid indices cannot be out of range (every index field is as wide as its
// grid, iq_grids.h), so the only hostile values are the scales. NaN and inf scales give
// NaN / inf results, the same in every table, and nothing reads outside the rows (ASan).
TEST(IqHostile, NanAndInfScalesPropagate) {
  std::mt19937 rng(41);
  const KernelTable& ref = reference_kernel_table();
  for (DType dt : kIqTypes) {
    const int64_t n = 2 * kQkK, n_rows = 16, n_cols = 9;
    for (uint16_t bad : {uint16_t{0x7e00}, uint16_t{0x7c00}, uint16_t{0xfc00}}) {  // NaN, +inf, -inf
      std::vector<std::byte> w = testing::random_weights(rng, dt, n_rows, n);
      const size_t bb = dtype_info(dt).block_bytes;
      testing::set_block_d(dt, w.data() + bb, bad);  // row 0's second block
      const MatmulKernels* mr = find_matmul_kernels(ref, dt);
      const size_t xs = row_bytes(mr->act_dtype, n), ws = row_bytes(dt, n);
      std::vector<std::byte> xq(xs * n_cols);
      for (int64_t c = 0; c < n_cols; ++c) mr->quantize_act(testing::random_floats(rng, n).data(), xq.data() + c * xs, n);
      const std::vector<float> deq = testing::dequantize(dt, w.data(), n);
      EXPECT_FALSE(std::isfinite(deq[dtype_info(dt).block_size])) << dtype_name(dt);  // the bad block
      const float want = mr->vec_dot(n, w.data(), xq.data());
      EXPECT_FALSE(std::isfinite(want)) << dtype_name(dt);
      for (const KernelTable* t : available_kernel_tables()) {
        const MatmulKernels* mk = find_matmul_kernels(*t, dt);
        std::vector<float> y(n_rows * n_cols);
        mk->gemm(n, w.data(), ws, n_rows, xq.data(), xs, n_cols, y.data(), n_rows);
        const float got = y[0];
        // iq4_nl's AVX2 kernel sums blocks in 8 lanes (not bit-exact): +inf and -inf terms
        // may meet in another order, so only "not finite" is required there.
        const bool exact = dt != DType::kIQ4_NL || t == &ref;
        EXPECT_TRUE(exact ? (got == want || (std::isnan(got) && std::isnan(want))) : !std::isfinite(got))
            << t->name << " " << dtype_name(dt);
        if (mk->panel.rows == 0) continue;
        std::vector<std::byte> panel(mk->panel.panel_bytes(n));
        std::vector<std::byte> side(mk->panel.side_bytes(n) * n_cols + 1);
        if (mk->panel.prepare_side)
          for (int64_t c = 0; c < n_cols; ++c) mk->panel.prepare_side(xq.data() + c * xs, n, side.data() + c * mk->panel.side_bytes(n));
        mk->panel.pack(n, w.data(), ws, n_rows, panel.data());
        mk->panel.gemm(n, panel.data(), n_rows, xq.data(), xs, side.data(), mk->panel.side_bytes(n), n_cols, y.data(),
                       n_rows);
        EXPECT_TRUE(y[0] == want || (std::isnan(y[0]) && std::isnan(want))) << t->name << " panel " << dtype_name(dt);
      }
    }
  }
}

}  // namespace
}  // namespace lumen::kernels
