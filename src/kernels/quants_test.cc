// Block formats, dequantization, activation quantizers and block dot products of the
// scalar reference.
#include <gtest/gtest.h>

#include <cmath>
#include <cstddef>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/kernels_ref.h"
#include "kernels/kernels_test_util.h"
#include "kernels/ops.h"
#include "kernels/quant_blocks.h"
#include "kernels/type_table.h"

namespace lumen::kernels {
namespace {

using testing::dequantize;

template <typename Block>
std::vector<float> dequantize_blocks(DType dtype, const Block* b, int n_blocks, int block_size) {
  return dequantize(dtype, reinterpret_cast<const std::byte*>(b), n_blocks * block_size);
}

TEST(KernelsDequant, Q8_0KnownValues) {
  BlockQ8_0 b[2];
  b[0].d_f16 = 0x3800;  // 0.5
  b[1].d_f16 = 0xC000;  // -2
  for (int i = 0; i < 32; ++i) {
    b[0].qs[i] = static_cast<int8_t>(i - 16);
    b[1].qs[i] = static_cast<int8_t>(i == 0 ? -128 : 127 - i);
  }
  const std::vector<float> y = dequantize_blocks(DType::kQ8_0, b, 2, 32);
  for (int i = 0; i < 32; ++i) {
    EXPECT_EQ(y[i], 0.5f * (i - 16)) << i;
    EXPECT_EQ(y[32 + i], -2.0f * (i == 0 ? -128 : 127 - i)) << i;
  }
}

TEST(KernelsDequant, Q4_0KnownValues) {
  BlockQ4_0 b;
  b.d_f16 = 0x4000;  // 2
  for (int i = 0; i < 16; ++i) b.qs[i] = static_cast<uint8_t>(i | ((15 - i) << 4));
  const std::vector<float> y = dequantize_blocks(DType::kQ4_0, &b, 1, 32);
  for (int i = 0; i < 16; ++i) {
    EXPECT_EQ(y[i], 2.0f * (i - 8)) << i;            // low nibbles: elements 0..15
    EXPECT_EQ(y[16 + i], 2.0f * (15 - i - 8)) << i;  // high nibbles: elements 16..31
  }
}

TEST(KernelsDequant, Q4_KKnownValues) {
  BlockQ4_K b;
  b.d_f16 = f32_to_fp16(0.5f);
  b.dmin_f16 = f32_to_fp16(0.25f);
  // Scales and mins above 15 exercise the high bits stored in the top of bytes 0..7.
  const uint8_t sc[8] = {1, 17, 33, 63, 5, 48, 20, 60};
  const uint8_t m[8] = {0, 63, 31, 16, 2, 47, 59, 9};
  testing::pack_q4_k_scales(sc, m, b.scales);
  for (int s = 0; s < 8; ++s) {
    uint8_t got_sc, got_m;
    q4_k_scale_min(b.scales, s, &got_sc, &got_m);
    EXPECT_EQ(got_sc, sc[s]);
    EXPECT_EQ(got_m, m[s]);
  }
  // Element e: sub-block s = e / 32, byte qs[32 * (e / 64) + e % 32], low nibble for even s.
  int q[256];
  std::memset(b.qs, 0, sizeof(b.qs));
  for (int e = 0; e < 256; ++e) {
    q[e] = (e * 7 + 3) % 16;
    const int byte = 32 * (e / 64) + e % 32;
    b.qs[byte] |= static_cast<uint8_t>((e / 32) % 2 == 0 ? q[e] : q[e] << 4);
  }
  const std::vector<float> y = dequantize_blocks(DType::kQ4_K, &b, 1, 256);
  for (int e = 0; e < 256; ++e) {
    const int s = e / 32;
    EXPECT_EQ(y[e], 0.5f * sc[s] * q[e] - 0.25f * m[s]) << e;
  }
}

TEST(KernelsDequant, Q4_KPackedScalesAllPatterns) {
  // The 32-bit-mask unpacking used by the SIMD kernels equals the per-index definition.
  std::mt19937 rng(12);
  for (int trial = 0; trial < 2000; ++trial) {
    uint8_t packed[12];
    for (uint8_t& b : packed) b = static_cast<uint8_t>(rng());
    uint8_t sc[8], m[8];
    unpack_q4_k_scales(packed, sc, m);
    for (int j = 0; j < 8; ++j) {
      uint8_t want_sc, want_m;
      q4_k_scale_min(packed, j, &want_sc, &want_m);
      ASSERT_EQ(sc[j], want_sc) << j;
      ASSERT_EQ(m[j], want_m) << j;
    }
  }
}

TEST(KernelsDequant, Q6_KKnownValues) {
  BlockQ6_K b;
  std::memset(&b, 0, sizeof(b));
  b.d_f16 = f32_to_fp16(0.125f);
  for (int s = 0; s < 16; ++s) b.scales[s] = static_cast<int8_t>(s % 2 ? -3 * s : 5 * s + 1);
  // Element e: half h = e / 128, quarter k = (e % 128) / 32, l = e % 32;
  // low 4 bits in ql[64h + 32 (k & 1) + l] (low nibble for k < 2), high 2 bits at
  // qh[32h + l] bits 2k..2k+1; scale index e / 16.
  int q[256];
  for (int e = 0; e < 256; ++e) {
    q[e] = (e * 13 + 5) % 64;
    const int h = e / 128, k = (e % 128) / 32, l = e % 32;
    const int ql_idx = 64 * h + 32 * (k & 1) + l;
    b.ql[ql_idx] |= static_cast<uint8_t>(k < 2 ? (q[e] & 15) : (q[e] & 15) << 4);
    b.qh[32 * h + l] |= static_cast<uint8_t>((q[e] >> 4) << (2 * k));
  }
  const std::vector<float> y = dequantize_blocks(DType::kQ6_K, &b, 1, 256);
  for (int e = 0; e < 256; ++e) EXPECT_EQ(y[e], 0.125f * b.scales[e / 16] * (q[e] - 32)) << e;
}

TEST(KernelsDequant, PlainTypes) {
  const float x[4] = {1.5f, -2.25f, 65504.0f, 1e-7f};
  uint16_t h[4], bf[4];
  for (int i = 0; i < 4; ++i) {
    h[i] = f32_to_fp16(x[i]);
    bf[i] = f32_to_bf16(x[i]);
  }
  float y[4];
  dequantize_row(DType::kF16, reinterpret_cast<const std::byte*>(h), y, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], fp16_to_f32(h[i]));
  dequantize_row(DType::kBF16, reinterpret_cast<const std::byte*>(bf), y, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], bf16_to_f32(bf[i]));
  dequantize_row(DType::kF32, reinterpret_cast<const std::byte*>(x), y, 4);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(y[i], x[i]);
}

TEST(KernelsQuantize, Q8_0RoundsHalfToEven) {
  // amax = 127 gives id = 1 exactly, so x * id = x and the ties are visible.
  float x[32] = {};
  x[0] = 127.0f;
  x[1] = 2.5f;   // -> 2 (roundf would give 3)
  x[2] = 3.5f;   // -> 4
  x[3] = -2.5f;  // -> -2
  x[4] = -0.5f;  // -> 0
  x[5] = 0.5f;   // -> 0
  x[6] = 1.5f;   // -> 2
  BlockQ8_0 b;
  ref::quantize_row_q8_0(x, reinterpret_cast<std::byte*>(&b), 32);
  EXPECT_EQ(b.d_f16, f32_to_fp16(1.0f));
  const int expected[7] = {127, 2, 4, -2, 0, 0, 2};
  for (int i = 0; i < 7; ++i) EXPECT_EQ(b.qs[i], expected[i]) << i;
}

TEST(KernelsQuantize, Q8_0ZeroBlock) {
  float x[32] = {};
  BlockQ8_0 b;
  std::memset(&b, 0x55, sizeof(b));
  ref::quantize_row_q8_0(x, reinterpret_cast<std::byte*>(&b), 32);
  EXPECT_EQ(b.d_f16, 0);
  for (int i = 0; i < 32; ++i) EXPECT_EQ(b.qs[i], 0);
}

TEST(KernelsQuantize, Q8_0ErrorBound) {
  std::mt19937 rng(1);
  const int64_t n = 32 * 40;
  std::vector<float> x = testing::random_floats(rng, n, 3.0f);
  std::vector<BlockQ8_0> b(n / 32);
  ref::quantize_row_q8_0(x.data(), reinterpret_cast<std::byte*>(b.data()), n);
  const std::vector<float> y = dequantize_blocks(DType::kQ8_0, b.data(), n / 32, 32);
  for (int64_t ib = 0; ib < n / 32; ++ib) {
    float amax = 0;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(x[ib * 32 + i]));
    // Half a step plus the fp16 rounding of d (relative 2^-11) over the full range.
    const float bound = amax / 127 * 0.5f + amax * 0.0005f;
    for (int i = 0; i < 32; ++i) EXPECT_LE(std::fabs(y[ib * 32 + i] - x[ib * 32 + i]), bound);
  }
}

TEST(KernelsQuantize, Q8_KSignedMaxAndBsums) {
  std::mt19937 rng(2);
  for (float sign : {-1.0f, 1.0f}) {
    std::vector<float> x = testing::random_floats(rng, 512);
    x[7] = 10.0f * sign;  // largest magnitude in block 0
    x[300] = 0.0f;
    BlockQ8_K b[2];
    ref::quantize_row_q8_k(x.data(), reinterpret_cast<std::byte*>(b), 512);
    // iscale = -127 / max: the largest-magnitude value maps to exactly -127.
    EXPECT_EQ(b[0].qs[7], -127);
    EXPECT_EQ(b[0].d, 1.0f / (-127.0f / x[7]));
    for (int ib = 0; ib < 2; ++ib) {
      for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += b[ib].qs[16 * j + i];
        EXPECT_EQ(b[ib].bsums[j], sum);
      }
      for (int i = 0; i < 256; ++i) {
        EXPECT_GE(b[ib].qs[i], -127);
        EXPECT_LE(std::fabs(b[ib].d * b[ib].qs[i] - x[ib * 256 + i]),
                  std::fabs(b[ib].d) * 0.5001f);
      }
    }
  }
}

TEST(KernelsQuantize, Q8_KZeroBlock) {
  std::vector<float> x(256, 0.0f);
  BlockQ8_K b;
  std::memset(&b, 0x55, sizeof(b));
  ref::quantize_row_q8_k(x.data(), reinterpret_cast<std::byte*>(&b), 256);
  EXPECT_EQ(b.d, 0.0f);
  for (int i = 0; i < 256; ++i) EXPECT_EQ(b.qs[i], 0);
  for (int j = 0; j < 16; ++j) EXPECT_EQ(b.bsums[j], 0);
}

// Every block struct matches the DType table's format facts: its size, and where its fp16
// scale fields are (f16_offsets, which the tests and benchmarks use to make sane blocks).
template <typename Block>
void expect_block(DType dt, int f16_a, int f16_b) {
  const DTypeInfo& info = dtype_info(dt);
  EXPECT_EQ(sizeof(Block), info.block_bytes) << info.name;
  EXPECT_EQ(info.f16_offsets[0], f16_a) << info.name;
  EXPECT_EQ(info.f16_offsets[1], f16_b) << info.name;
}

TEST(KernelsTypes, BlockStructsMatchTheDTypeTable) {
  expect_block<BlockQ4_0>(DType::kQ4_0, offsetof(BlockQ4_0, d_f16), -1);
  expect_block<BlockQ4_1>(DType::kQ4_1, offsetof(BlockQ4_1, d_f16), offsetof(BlockQ4_1, m_f16));
  expect_block<BlockQ5_0>(DType::kQ5_0, offsetof(BlockQ5_0, d_f16), -1);
  expect_block<BlockQ5_1>(DType::kQ5_1, offsetof(BlockQ5_1, d_f16), offsetof(BlockQ5_1, m_f16));
  expect_block<BlockQ8_0>(DType::kQ8_0, offsetof(BlockQ8_0, d_f16), -1);
  expect_block<BlockQ8_1>(DType::kQ8_1, offsetof(BlockQ8_1, d_f16), offsetof(BlockQ8_1, s_f16));
  expect_block<BlockQ2_K>(DType::kQ2_K, offsetof(BlockQ2_K, d_f16), offsetof(BlockQ2_K, dmin_f16));
  expect_block<BlockQ3_K>(DType::kQ3_K, offsetof(BlockQ3_K, d_f16), -1);
  expect_block<BlockQ4_K>(DType::kQ4_K, offsetof(BlockQ4_K, d_f16), offsetof(BlockQ4_K, dmin_f16));
  expect_block<BlockQ5_K>(DType::kQ5_K, offsetof(BlockQ5_K, d_f16), offsetof(BlockQ5_K, dmin_f16));
  expect_block<BlockQ6_K>(DType::kQ6_K, offsetof(BlockQ6_K, d_f16), -1);
  expect_block<BlockQ8_K>(DType::kQ8_K, -1, -1);
  expect_block<BlockIQ2_XXS>(DType::kIQ2_XXS, offsetof(BlockIQ2_XXS, d_f16), -1);
  expect_block<BlockIQ2_XS>(DType::kIQ2_XS, offsetof(BlockIQ2_XS, d_f16), -1);
  expect_block<BlockIQ2_S>(DType::kIQ2_S, offsetof(BlockIQ2_S, d_f16), -1);
  expect_block<BlockIQ3_XXS>(DType::kIQ3_XXS, offsetof(BlockIQ3_XXS, d_f16), -1);
  expect_block<BlockIQ3_S>(DType::kIQ3_S, offsetof(BlockIQ3_S, d_f16), -1);
  expect_block<BlockIQ1_S>(DType::kIQ1_S, offsetof(BlockIQ1_S, d_f16), -1);
  expect_block<BlockIQ1_M>(DType::kIQ1_M, -1, -1);
  expect_block<BlockIQ4_NL>(DType::kIQ4_NL, offsetof(BlockIQ4_NL, d_f16), -1);
  expect_block<BlockIQ4_XS>(DType::kIQ4_XS, offsetof(BlockIQ4_XS, d_f16), -1);
}

// The rows are consistent: a multipliable type can be read and its activation type has a
// quantizer; every table has a matmul entry exactly for the multipliable rows; the support
// list in error messages comes from the rows.
TEST(KernelsTypes, TableIsDerivedFromTheRows) {
  for (const TypeRow& r : type_rows()) {
    SCOPED_TRACE(std::string(dtype_name(r.dtype)));
    if (!row_can_multiply(r)) continue;
    EXPECT_NE(r.dequantize, nullptr);
    EXPECT_NE(r.matmul.gemm, nullptr);
    EXPECT_EQ(dtype_info(r.dtype).block_size % dtype_info(r.act_dtype).block_size, 0u);
    if (r.act_dtype != DType::kF32) {
      EXPECT_NE(find_type_row(r.act_dtype)->as_act.scalar, nullptr);
    }
  }
  for (const KernelTable* t : available_kernel_tables()) {
    for (size_t i = 0; i < kDTypeIdLimit; ++i) {
      const TypeRow* r = find_dtype_info(static_cast<uint32_t>(i)) ? find_type_row(static_cast<DType>(i)) : nullptr;
      EXPECT_EQ(t->mm[i].vec_dot != nullptr, r != nullptr && row_can_multiply(*r)) << t->name << " id " << i;
    }
  }
  const std::string names = type_names(&row_can_multiply);
  EXPECT_NE(names.find("q4_K"), std::string::npos) << names;
  EXPECT_EQ(names.find("q8_K"), std::string::npos) << names;  // an activation type only
  EXPECT_TRUE(can_dequantize(DType::kQ5_K));
  EXPECT_FALSE(can_dequantize(DType::kI32));
}

// Hostile blocks: NaN and infinite fp16 scales (with random quant bytes) in every type lumen
// reads give defined results in every table's entries: no crash and no read past the row,
// and a product that cannot be finite is not reported as finite.
TEST(KernelsHostile, NanAndInfScalesGiveNonFiniteResults) {
  std::mt19937 rng(7);
  int n_checked = 0;
  for (const TypeRow& row : type_rows()) {
    const DTypeInfo& info = dtype_info(row.dtype);
    if (!info.is_quantized || row.dequantize == nullptr || !testing::has_block_d(row.dtype)) continue;
    const int64_t n = info.block_size * 3;
    for (uint16_t bad : {uint16_t{0x7e00}, uint16_t{0x7c00}, uint16_t{0xfc00}}) {  // nan, +inf, -inf
      SCOPED_TRACE(std::string(info.name) + " scale bits " + std::to_string(bad));
      std::vector<std::byte> w = testing::random_weights(rng, row.dtype, 2, n);
      testing::set_f16_scales(row.dtype, w, bad, bad);
      std::vector<float> y(n);
      row.dequantize(w.data(), y.data(), n);
      if (!row_can_multiply(row)) continue;
      const std::vector<float> x = testing::random_floats(rng, n);
      for (const KernelTable* t : available_kernel_tables()) {
        const MatmulKernels* mk = find_matmul_kernels(*t, row.dtype);
        std::vector<std::byte> xq(row_bytes(mk->act_dtype, n));
        mk->quantize_act(x.data(), xq.data(), n);
        const float v = mk->vec_dot(n, w.data(), xq.data());
        EXPECT_FALSE(std::isfinite(v)) << t->name << ": " << v;
        float g[2];
        mk->gemm(n, w.data(), row_bytes(row.dtype, n), 2, xq.data(), 0, 1, g, 1);
        EXPECT_FALSE(std::isfinite(g[0]) || std::isfinite(g[1])) << t->name;
        ++n_checked;
      }
    }
  }
  EXPECT_GT(n_checked, 0);
}

// vec_dot(w, quantize(x)) against a double dot of the dequantized operands: the only
// differences are f32 scale products and f32 accumulation over blocks.
TEST(KernelsVecDot, MatchesDequantizedDoubleReference) {
  std::mt19937 rng(3);
  const KernelTable& table = reference_kernel_table();
  for (DType dt : testing::matmul_types()) {
    const MatmulKernels* mk = find_matmul_kernels(table, dt);
    ASSERT_NE(mk, nullptr);
    for (int64_t n : {256, 768, 4096}) {
      const std::vector<std::byte> w = testing::random_weights(rng, dt, 1, n);
      const std::vector<float> x = testing::random_floats(rng, n);
      std::vector<std::byte> xq(row_bytes(mk->act_dtype, n));
      const std::byte* xp = reinterpret_cast<const std::byte*>(x.data());
      if (mk->quantize_act) {
        mk->quantize_act(x.data(), xq.data(), n);
        xp = xq.data();
      }
      const std::vector<float> wd = dequantize(dt, w.data(), n);
      const std::vector<float> xd = dequantize(mk->act_dtype, xp, n);
      const double want = testing::dot_double(wd.data(), xd.data(), n) +
                          testing::q8_1_sum_correction(dt, w.data(), mk->act_dtype, xp, n);
      const double mag = testing::abs_dot_double(wd.data(), xd.data(), n);
      const float got = mk->vec_dot(n, w.data(), xp);
      EXPECT_NEAR(got, want, 2e-6 * mag + 1e-30) << dtype_name(dt) << " n=" << n;
      // And against the unquantized activations: the activation rounding error only.
      const double want_f32 = testing::dot_double(wd.data(), x.data(), n);
      const double tol = dt == DType::kF32 ? 1e-5 : (dt == DType::kBF16 ? 1e-2 : 2e-2);
      EXPECT_NEAR(got, want_f32, tol * testing::abs_dot_double(wd.data(), x.data(), n))
          << dtype_name(dt) << " n=" << n;
    }
  }
}

}  // namespace
}  // namespace lumen::kernels
