// LayerNorm, GELU and soft-capping: each table against an independent formula in double
// (through the public ops), and every SIMD table against the scalar one (parity, with the
// tolerances of kernel_table.h).
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <string>
#include <vector>

#include "base/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_test_util.h"
#include "kernels/ops.h"

namespace lumen::kernels {
namespace {

constexpr double kUlp = 1.0 / (1 << 23);

TEST(KernelsActivations, LayerNormMatchesDouble) {
  std::mt19937 rng(31);
  for (int64_t n : {1, 7, 64, 333, 2560}) {
    const int64_t n_rows = 3;
    std::vector<float> x = testing::random_floats(rng, n * n_rows, 4.0f);
    for (int64_t i = 0; i < n; ++i) x[i] += 100.0f;  // a large mean in row 0
    const std::vector<float> w = testing::random_floats(rng, n);
    const std::vector<float> b = testing::random_floats(rng, n);
    for (const KernelTable* table : available_kernel_tables()) {
      for (int with : {0, 1, 2}) {  // neither, weight, weight + bias
        const float* wp = with >= 1 ? w.data() : nullptr;
        const float* bp = with >= 2 ? b.data() : nullptr;
        std::vector<float> out(n * n_rows);
        layer_norm(*table, x.data(), wp, bp, n_rows, n, 1e-5f, out.data());
        for (int64_t r = 0; r < n_rows; ++r) {
          double mean = 0, var = 0;
          for (int64_t i = 0; i < n; ++i) mean += x[r * n + i];
          mean /= n;
          for (int64_t i = 0; i < n; ++i) var += (x[r * n + i] - mean) * (x[r * n + i] - mean);
          var /= n;
          for (int64_t i = 0; i < n; ++i) {
            double want = (x[r * n + i] - mean) / std::sqrt(var + 1e-5);
            if (wp) want *= w[i];
            if (bp) want += b[i];
            ASSERT_NEAR(out[r * n + i], want, 2e-5 * (std::fabs(want) + 1) + 1e-6)
                << table->name << " n=" << n << " row " << r << " i " << i << " with " << with;
          }
        }
      }
    }
  }
}

// GELU with the tanh approximation, evaluated the way ggml-cpu does: on the input rounded
// to fp16, the result rounded to fp16; identity from 10 up, 0 from -10 down.
double gelu_ggml(float x) {
  if (x <= -10.0f) return 0.0;
  if (x >= 10.0f) return x;
  const double h = fp16_to_f32(f32_to_fp16(x));
  const double g = 0.5 * h * (1.0 + std::tanh(std::sqrt(2.0 / M_PI) * h * (1.0 + 0.044715 * h * h)));
  return g;
}

TEST(KernelsActivations, GeluFollowsGgmlsF16Table) {
  std::mt19937 rng(32);
  const int64_t n = 1003;
  std::vector<float> x = testing::random_floats(rng, n, 3.0f);
  x[0] = -10.0f, x[1] = 10.0f, x[2] = -9.99f, x[3] = 9.99f, x[4] = 0.0f, x[5] = -0.0f;
  x[6] = 25.0f, x[7] = -25.0f, x[8] = 1e-6f, x[9] = 65504.0f;
  const std::vector<float> up = testing::random_floats(rng, n);
  for (const KernelTable* table : available_kernel_tables()) {
    for (bool gated : {false, true}) {
      std::vector<float> g = x;
      gelu_mul(*table, g.data(), gated ? up.data() : nullptr, n);
      for (int64_t i = 0; i < n; ++i) {
        // The table holds fp16(gelu) of the f32 evaluation: within an fp16 half-ulp of the
        // double value (plus f32 noise), then the f32 product with up.
        const double want = gelu_ggml(x[i]) * (gated ? up[i] : 1.0);
        const double tol = (std::fabs(want) * (1.0 / 2048) + 1e-7) * (gated ? 1.0 + std::fabs(up[i]) : 1.0);
        ASSERT_NEAR(g[i], want, tol) << table->name << " x=" << x[i];
      }
    }
  }
  // SIMD tables use the same table: bit for bit.
  const KernelTable& ref = reference_kernel_table();
  for (const KernelTable* table : available_kernel_tables()) {
    std::vector<float> a = x, b = x;
    table->gelu_mul(a.data(), up.data(), n);
    ref.gelu_mul(b.data(), up.data(), n);
    for (int64_t i = 0; i < n; ++i) ASSERT_EQ(a[i], b[i]) << table->name << " x=" << x[i];
  }
}

TEST(KernelsActivations, SoftcapMatchesTanh) {
  std::mt19937 rng(33);
  const KernelTable& ref = reference_kernel_table();
  for (int64_t n : {1, 5, 8, 100, 1001}) {
    for (float scale : {0.01f, 1.0f, 30.0f, 1000.0f}) {
      std::vector<float> s = testing::random_floats(rng, n, scale);
      if (n > 4) s[0] = 0.0f, s[1] = -0.0f, s[2] = 1e30f, s[3] = -1e30f;
      for (float cap : {50.0f, 30.0f, 0.5f}) {
        for (const KernelTable* table : available_kernel_tables()) {
          std::vector<float> got = s, want = s;
          softcap(*table, got.data(), n, cap);
          ref.softcap(want.data(), n, cap);
          for (int64_t i = 0; i < n; ++i) {
            const double exact = cap * std::tanh(double(s[i]) / cap);
            ASSERT_NEAR(got[i], exact, 4 * kUlp * cap + 1e-30) << table->name << " s=" << s[i];
            // against the scalar table (libm tanhf): a few ulp of the result
            ASSERT_NEAR(got[i], want[i], 6 * kUlp * std::fabs(want[i]) + 2 * kUlp * std::fabs(s[i]) + 1e-37)
                << table->name << " s=" << s[i] << " cap=" << cap;
          }
        }
      }
    }
  }
  std::vector<float> s = {1.0f, 2.0f};
  softcap(best_kernel_table(), s.data(), 2, 0.0f);  // 0: no capping
  EXPECT_EQ(s, (std::vector<float>{1.0f, 2.0f}));
}

}  // namespace
}  // namespace lumen::kernels
