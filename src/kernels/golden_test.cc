// llama.cpp's own results on the legacy, K and i-quant types, written by
// tools/ggml_kernel_golden.c against a native llama.cpp build (c392e5094): lumen's scalar
// dequantizers and activation quantizers must reproduce them bit for bit, and every table's
// vec_dot must agree with ggml-cpu's to f32 summation-order tolerance.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "kernels/kernel_table.h"
#include "kernels/kernels_test_util.h"
#include "kernels/type_table.h"

namespace lumen::kernels {
namespace {

struct GoldenCase {
  DType dtype;
  uint64_t dequant_hash;  // FNV-1a 64 of to_float's 4096 floats
  DType act_dtype;        // ggml-cpu's vec_dot_type
  uint64_t act_hash;      // FNV-1a 64 of the 1024 activations quantized by its from_float
  uint32_t dots[4];       // f32 bits of vec_dot of weight rows 0..3 (1024 elements each)
};

// Output of tools/ggml_kernel_golden.c.
constexpr GoldenCase kCases[] = {
    {DType::kQ4_0, 0xe5bf544a495a10d7ull, DType::kQ8_0, 0x30b677369aa32b36ull, {0x4164ff1a, 0x41858f6a, 0xc1669ffc, 0xc2856c4b}},
    {DType::kQ4_1, 0x8d1488c271e1cca3ull, DType::kQ8_1, 0x46768434f3459e65ull, {0xc1b9752a, 0xc2bdd244, 0xc10477de, 0xc29b0510}},
    {DType::kQ5_0, 0x2cfe925ab8461067ull, DType::kQ8_0, 0xb74797faca523168ull, {0xc20443ed, 0xc2259576, 0xc148e494, 0xc1a1659f}},
    {DType::kQ5_1, 0x7e02bb184743bb06ull, DType::kQ8_1, 0xf44fe8d2828b0390ull, {0x42c23258, 0x43363028, 0x43308909, 0x432728fc}},
    {DType::kQ8_0, 0xcfb704e89a318da7ull, DType::kQ8_0, 0x35b88bf60dc1de90ull, {0x41a6cac0, 0xc426388c, 0x4433c4bb, 0xc3b548b5}},
    {DType::kQ2_K, 0x649e52aa9a2817e7ull, DType::kQ8_K, 0x41e19129bdd005efull, {0x4261591c, 0xc2928810, 0x4326989f, 0x4081bf00}},
    {DType::kQ3_K, 0x83cb95569cf16532ull, DType::kQ8_K, 0x817d95ad0e974fc9ull, {0xc2b7b990, 0xc33b5586, 0x43248194, 0xc32bd720}},
    {DType::kQ4_K, 0xd7f616323b16725eull, DType::kQ8_K, 0x58803eef96818c3bull, {0xc4f307af, 0x434534f6, 0x4457da6a, 0xc51d360b}},
    {DType::kQ5_K, 0xc6e01ba995e68354ull, DType::kQ8_K, 0xa8e7afdde60d9da1ull, {0xc565f6c1, 0xc63387f1, 0xc5837fa9, 0x45c1e999}},
    {DType::kQ6_K, 0x0dd1ff9db61dcfa7ull, DType::kQ8_K, 0x70c14a3e4bc523cbull, {0x45c8e841, 0xc51cc19e, 0x4620949d, 0xc6a507bd}},
    {DType::kIQ4_NL, 0x1d6e985a1cd13bd6ull, DType::kQ8_0, 0xb3d5244298ff6f30ull, {0xc22dace2, 0x43eb2616, 0x43f714a5, 0x4333697f}},
    {DType::kIQ4_XS, 0x04b87d18cad84c11ull, DType::kQ8_K, 0x4f5dce52340680ffull, {0x465e65fd, 0x44a217a0, 0xc5e53562, 0x43b8f380}},
    {DType::kIQ3_S, 0x90b53753a0d5032aull, DType::kQ8_K, 0x53d191ced5957c04ull, {0x448e29a8, 0xc3267420, 0xc3e0a6e2, 0x453ced1b}},
    {DType::kIQ3_XXS, 0xf8106fc2e2ac8cd1ull, DType::kQ8_K, 0x5393049f02f14414ull, {0x42022fe0, 0x4497b16c, 0xc3edceaf, 0xc44b32aa}},
    {DType::kIQ2_S, 0xbde1fbfc4c7a8108ull, DType::kQ8_K, 0x13e752eee0194d9bull, {0xc3a80c3d, 0x443a0fce, 0xc4216c46, 0x43acbd1d}},
    {DType::kIQ2_XS, 0x5655033ffa90408bull, DType::kQ8_K, 0xa22f701631878f4eull, {0xc3d3439f, 0xc3852235, 0xc1fec9d0, 0xc2ce9c30}},
    {DType::kIQ2_XXS, 0xb563027f5737bebeull, DType::kQ8_K, 0x3320c7bb0ebc682cull, {0x448efffe, 0x42f6765f, 0xc266b658, 0x41951a48}},
    {DType::kIQ1_S, 0x69901317d7a5988aull, DType::kQ8_K, 0x550f3477ee787328ull, {0xc264f18f, 0x41ef03f6, 0x42520b2e, 0xc186a608}},
    {DType::kIQ1_M, 0x9a7867d5293904dbull, DType::kQ8_K, 0x433ec6147cc1aa4bull, {0x407c7474, 0xbf369d61, 0xc31e346e, 0xc0aa3b40}},
};

constexpr int kElems = 4096, kRowElems = 1024;

// The tool's generator: a 64-bit LCG, one byte per step from its top bits.
struct Lcg {
  uint64_t x;
  uint8_t next() {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    return static_cast<uint8_t>(x >> 56);
  }
};

uint64_t fnv(const void* p, size_t n) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t h = 0xcbf29ce484222325ull;
  for (size_t i = 0; i < n; ++i) h = (h ^ b[i]) * 0x100000001b3ull;
  return h;
}

// kElems elements of blocks as the tool makes them: LCG bytes seeded with the type id, the
// fp16 fields set to 0.1 (d) and 0.05 (dmin / m); iq1_m's spread d stays random, made finite
// by clearing bit 6 of the block's last byte (d's exponent MSB).
std::vector<std::byte> golden_blocks(DType dt) {
  const DTypeInfo& info = dtype_info(dt);
  std::vector<std::byte> w(row_bytes(dt, kElems));
  Lcg lcg{static_cast<uint64_t>(dt)};
  for (std::byte& b : w) b = static_cast<std::byte>(lcg.next());
  const uint16_t f16[2] = {0x2e66, 0x2a66};
  for (size_t ib = 0; ib < w.size() / info.block_bytes; ++ib)
    for (int f = 0; f < 2; ++f)
      if (info.f16_offsets[f] >= 0) std::memcpy(w.data() + ib * info.block_bytes + info.f16_offsets[f], &f16[f], 2);
  if (dt == DType::kIQ1_M)
    for (size_t ib = 0; ib < w.size() / info.block_bytes; ++ib) w[(ib + 1) * info.block_bytes - 1] &= std::byte{0xbf};
  return w;
}

std::vector<float> golden_activations(DType dt) {
  Lcg lcg{1000 + static_cast<uint64_t>(dt)};
  std::vector<float> x(kRowElems);
  for (float& v : x) v = (static_cast<int>(lcg.next()) - 128) / 32.0f;
  return x;
}

TEST(KernelsGolden, DequantizeMatchesLlamaCpp) {
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)));
    const TypeRow* row = find_type_row(c.dtype);
    ASSERT_TRUE(row != nullptr && row->dequantize != nullptr);
    const std::vector<std::byte> w = golden_blocks(c.dtype);
    std::vector<float> y(kElems);
    row->dequantize(w.data(), y.data(), kElems);
    EXPECT_EQ(fnv(y.data(), y.size() * sizeof(float)), c.dequant_hash);
  }
}

TEST(KernelsGolden, ActivationQuantizersMatchLlamaCpp) {
  for (const GoldenCase& c : kCases) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + " activations " + std::string(dtype_name(c.act_dtype)));
    const TypeRow* act = find_type_row(c.act_dtype);
    ASSERT_TRUE(act != nullptr && act->as_act.scalar != nullptr);
    const std::vector<float> x = golden_activations(c.dtype);
    std::vector<std::byte> xq(row_bytes(c.act_dtype, kRowElems));
    act->as_act.scalar(x.data(), xq.data(), kRowElems);
    EXPECT_EQ(fnv(xq.data(), xq.size()), c.act_hash);
  }
}

// Every table's vec_dot against ggml-cpu's (AVX-512 build) on the same quantized
// activations: the block sums are exact integers in both, so only the f32 accumulation
// order over blocks differs.
TEST(KernelsGolden, VecDotMatchesLlamaCpp) {
  int n_checked = 0;
  for (const GoldenCase& c : kCases) {
    if (!row_can_multiply(*find_type_row(c.dtype))) continue;
    const std::vector<std::byte> w = golden_blocks(c.dtype);
    const std::vector<float> x = golden_activations(c.dtype);
    for (const KernelTable* t : available_kernel_tables()) {
      SCOPED_TRACE(std::string(t->name) + " " + std::string(dtype_name(c.dtype)));
      const MatmulKernels* mk = find_matmul_kernels(*t, c.dtype);
      ASSERT_NE(mk, nullptr);
      ASSERT_EQ(mk->act_dtype, c.act_dtype);
      std::vector<std::byte> xq(row_bytes(c.act_dtype, kRowElems));
      mk->quantize_act(x.data(), xq.data(), kRowElems);
      const std::vector<float> xd = testing::dequantize(c.act_dtype, xq.data(), kRowElems);
      const size_t ws = row_bytes(c.dtype, kRowElems);
      for (int r = 0; r < kElems / kRowElems; ++r) {
        float want;
        std::memcpy(&want, &c.dots[r], 4);
        const float got = mk->vec_dot(kRowElems, w.data() + r * ws, xq.data());
        const std::vector<float> wd = testing::dequantize(c.dtype, w.data() + r * ws, kRowElems);
        const double mag = testing::abs_dot_double(wd.data(), xd.data(), kRowElems);
        EXPECT_NEAR(got, want, 64 * 0x1p-23 * mag) << "row " << r;
        ++n_checked;
      }
    }
  }
  EXPECT_GT(n_checked, 0);
}

}  // namespace
}  // namespace lumen::kernels
