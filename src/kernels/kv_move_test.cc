// kv_move (the re-RoPE of a context shift) against rows stored at the new positions
// directly: every RoPE variant lumen runs (interleaved / NeoX, partial rotary, linear
// scaling, frequency factors, a magnitude factor), NoPE, F16 and F32 rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"

namespace lumen::kernels {
namespace {

constexpr int32_t kHeads = 2, kDim = 16, kBlock = 4, kBlocks = 8;

// One layer's K/V storage of kBlocks blocks, read through a given block table.
struct Storage {
  std::vector<std::byte> k, v;
  std::vector<int32_t> table;
  PagedKvView view;
  Storage(DType dtype, std::vector<int32_t> ids) : table(std::move(ids)) {
    view.k_dtype = view.v_dtype = dtype;
    view.block_size = kBlock;
    view.n_kv_head = kHeads;
    view.head_dim = kDim;
    view.set_dense_strides();
    k.assign(view.k_block_stride_bytes * kBlocks, std::byte{0});
    v.assign(view.v_block_stride_bytes * kBlocks, std::byte{0});
    view.k_base = k.data();
    view.v_base = v.data();
    view.block_table = table;
  }
  float k_at(int64_t pos, int32_t h, int32_t i) const { return at(view.k_addr(pos, h), i); }
  float v_at(int64_t pos, int32_t h, int32_t i) const { return at(view.v_addr(pos, h), i); }
  float at(const std::byte* p, int32_t i) const {
    if (view.k_dtype == DType::kF32) return reinterpret_cast<const float*>(p)[i];
    return fp16_to_f32(reinterpret_cast<const uint16_t*>(p)[i]);
  }
};

struct RopeCase {
  std::string name;
  RopeParams rope;
  bool nope = false;
};

std::vector<RopeCase> cases() {
  static const std::vector<float> factors = {1.0f, 1.5f, 2.0f, 4.0f, 8.0f, 8.0f, 16.0f, 32.0f};
  RopeParams base;
  base.head_dim = kDim;
  base.theta = 10000.0f;
  std::vector<RopeCase> c;
  c.push_back({"interleaved", base});
  RopeParams neox = base;
  neox.layout = RopeLayout::kNeox;
  c.push_back({"neox", neox});
  RopeParams partial = neox;
  partial.n_rot = 8;
  c.push_back({"neox_partial", partial});
  RopeParams linear = base;
  linear.freq_scale = 0.25f;
  c.push_back({"linear_scaling", linear});
  RopeParams ff = neox;
  ff.freq_factors = factors.data();
  ff.theta = 500000.0f;
  c.push_back({"freq_factors", ff});
  RopeParams mscale = ff;
  mscale.attn_factor = 1.19f;
  c.push_back({"attn_factor", mscale});
  c.push_back({"nope", base, true});
  return c;
}

// Rows stored at position p hold rope(x_t, p); moved by delta they must equal rope(x_t, p + delta).
TEST(KvMove, ReRopeEqualsStoringAtTheNewPosition) {
  const KernelTable& kt = best_kernel_table();
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  const int64_t n_src = 28, src0 = 11, dst0 = 3, n = n_src - src0;  // delta = -8
  std::vector<float> x(static_cast<size_t>(n_src) * kHeads * kDim), vv(x.size());
  for (float& f : x) f = u(rng);
  for (float& f : vv) f = u(rng);
  for (DType dtype : {DType::kF32, DType::kF16}) {
    for (const RopeCase& c : cases()) {
      SCOPED_TRACE(c.name + (dtype == DType::kF16 ? " f16" : " f32"));
      Storage src(dtype, {5, 2, 7, 0, 3, 6, 1}), dst(dtype, {4, 1, 6, 0, 2}), want(dtype, {0, 1, 2, 3, 4});
      // src: token t at position t; want: token src0 + j at position dst0 + j.
      std::vector<float> k_rot = x;
      std::vector<int32_t> pos(n_src);
      for (int32_t t = 0; t < n_src; ++t) pos[t] = t;
      if (!c.nope) rope(kt, c.rope, k_rot.data(), n_src, kHeads, pos.data());
      kv_store(kt, src.view, 0, n_src, k_rot.data(), vv.data());
      std::vector<float> k_want(x.begin() + src0 * kHeads * kDim, x.end());
      std::vector<int32_t> pos_want(n);
      for (int32_t j = 0; j < n; ++j) pos_want[j] = static_cast<int32_t>(dst0 + j);
      if (!c.nope) rope(kt, c.rope, k_want.data(), n, kHeads, pos_want.data());
      kv_store(kt, want.view, dst0, n, k_want.data(), vv.data() + src0 * kHeads * kDim);

      kv_move(kt, src.view, dst.view, src0, dst0, n, c.nope ? nullptr : &c.rope, static_cast<int32_t>(dst0 - src0));
      // F32: rounding of the rotations only; F16: the stored row is rounded once more.
      const float tol = dtype == DType::kF32 ? 2e-5f : 2e-3f;
      float worst = 0;
      for (int64_t j = 0; j < n; ++j)
        for (int32_t h = 0; h < kHeads; ++h)
          for (int32_t i = 0; i < kDim; ++i) {
            worst = std::max(worst, std::fabs(dst.k_at(dst0 + j, h, i) - want.k_at(dst0 + j, h, i)));
            ASSERT_EQ(dst.v_at(dst0 + j, h, i), want.v_at(dst0 + j, h, i)) << "V row " << j;  // copied
          }
      EXPECT_LE(worst, tol);
    }
  }
}

// Moving by 0 positions copies the rows bit for bit (the kept rows of a shift's first block).
TEST(KvMove, ZeroDeltaCopiesExactly) {
  const KernelTable& kt = best_kernel_table();
  std::vector<float> k(static_cast<size_t>(8) * kHeads * kDim), v(k.size());
  for (size_t i = 0; i < k.size(); ++i) {
    k[i] = std::sin(static_cast<float>(i)) * 3.0f;
    v[i] = std::cos(static_cast<float>(i));
  }
  const RopeCase c = cases()[0];
  for (DType dtype : {DType::kF32, DType::kF16}) {
    Storage src(dtype, {3, 1}), dst(dtype, {2, 6});
    kv_store(kt, src.view, 0, 8, k.data(), v.data());
    kv_move(kt, src.view, dst.view, 1, 1, 6, &c.rope, 0);
    for (int64_t p = 1; p < 7; ++p)
      for (int32_t h = 0; h < kHeads; ++h)
        EXPECT_EQ(std::memcmp(src.view.k_addr(p, h), dst.view.k_addr(p, h), src.view.k_row_bytes()), 0);
  }
}

}  // namespace
}  // namespace lumen::kernels
