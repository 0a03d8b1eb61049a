// matmul, rms_norm, rope, silu_mul, add, kv_store and attention against naive double
// references, through the public op API (best table of this host and the scalar table).
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <cmath>
#include <chrono>
#include <numeric>
#include <thread>
#include <random>
#include <span>
#include <vector>

#include "base/fp16.h"
#include "base/thread_pool.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_test_util.h"
#include "kernels/ops.h"

namespace lumen::kernels {
namespace {

TensorView make_weight(DType dt, int64_t n_in, int64_t n_out, const std::vector<std::byte>& data) {
  TensorView w;
  w.dtype = dt;
  w.n_dims = 2;
  w.ne[0] = n_in;
  w.ne[1] = n_out;
  w.data = data.data();
  w.n_bytes = data.size();
  return w;
}

struct MatmulCase {
  DType dtype;
  int64_t n_in;
  int64_t n_out;
  int64_t n_tokens;
};

// y against a double reference on the dequantized weights and the *same* quantized
// activations (so the comparison isolates the kernel), and results must not depend on the
// thread count or on how many tokens share the call.
TEST(KernelsMatmul, MatchesNaiveDoubleReference) {
  std::mt19937 rng(4);
  std::vector<MatmulCase> cases;
  for (DType dt : testing::matmul_types()) {
    if (dtype_info(dt).block_size <= 32) {
      for (int64_t n_tokens : {1, 3, 7, 70}) cases.push_back({dt, 32 * 7, 37, n_tokens});
    } else {
      for (int64_t n_tokens : {1, 5, 67}) cases.push_back({dt, 256 * 3, 19, n_tokens});
    }
  }
  ThreadPool pool1(1), pool3(3);
  for (const KernelTable* table : available_kernel_tables()) {
    for (const MatmulCase& c : cases) {
      SCOPED_TRACE(std::string(table->name) + " " + std::string(dtype_name(c.dtype)) +
                   " n_tokens=" + std::to_string(c.n_tokens));
      const std::vector<std::byte> wdata = testing::random_weights(rng, c.dtype, c.n_out, c.n_in);
      const TensorView w = make_weight(c.dtype, c.n_in, c.n_out, wdata);
      const std::vector<float> x = testing::random_floats(rng, c.n_in * c.n_tokens);
      std::vector<std::byte> scratch(matmul_scratch_bytes(c.dtype, c.n_in, c.n_tokens, 3));
      std::vector<float> y1(c.n_out * c.n_tokens), y3(c.n_out * c.n_tokens);
      matmul(*table, pool1, w, x.data(), c.n_tokens, y1.data(), scratch.data());
      matmul(*table, pool3, w, x.data(), c.n_tokens, y3.data(), scratch.data());
      EXPECT_EQ(y1, y3) << "result depends on the thread count";

      const MatmulKernels* mk = find_matmul_kernels(*table, c.dtype);
      for (int64_t t = 0; t < c.n_tokens; ++t) {
        const float* xt = x.data() + t * c.n_in;
        std::vector<float> xd(xt, xt + c.n_in);
        std::vector<std::byte> xq(row_bytes(mk->act_dtype, c.n_in));
        if (mk->quantize_act) {
          mk->quantize_act(xt, xq.data(), c.n_in);
          xd = testing::dequantize(mk->act_dtype, xq.data(), c.n_in);
        }
        // One token alone gives bit-identical rows (tiling independence).
        std::vector<float> y_single(c.n_out);
        matmul(*table, pool1, w, xt, 1, y_single.data(), scratch.data());
        for (int64_t o = 0; o < c.n_out; ++o) {
          const std::vector<float> wd =
              testing::dequantize(c.dtype, w.row(o), c.n_in);
          const double want = testing::dot_double(wd.data(), xd.data(), c.n_in) +
                              testing::q8_1_sum_correction(c.dtype, w.row(o), mk->act_dtype, xq.data(), c.n_in);
          const double mag = testing::abs_dot_double(wd.data(), xd.data(), c.n_in);
          const float got = y1[t * c.n_out + o];
          ASSERT_NEAR(got, want, 1e-5 * mag + 1e-30) << "t=" << t << " o=" << o;
          ASSERT_EQ(got, y_single[o]) << "t=" << t << " o=" << o;
        }
      }
    }
  }
}

// Through matmul_fused, weights with an interleaved copy (kernel_table.h) give what the file
// layout gives, bit for bit, whatever the thread count and the number of activation rows
// (decode ranges up to 17, prefill group chunks from 18), with row counts that are not a
// multiple of the group and two fused targets.
TEST(KernelsMatmul, InterleavedCopiesEqualTheFileLayout) {
  std::mt19937 rng(41);
  int n_checked = 0;
  ThreadPool pool1(1), pool2(2), pool3(3), pool5(5);
  for (const KernelTable* table : available_kernel_tables()) {
    for (DType dt : testing::matmul_types(/*quantized_only=*/true)) {
      const MatmulKernels* mk = find_matmul_kernels(*table, dt);
      const InterleavedKernels& ik = mk->interleaved;
      if (ik.layout == nullptr) continue;
      // Large enough for several threads and several decode grains (ops.cc).
      const int64_t n_in = dtype_info(dt).block_size == 32 ? 32 * 64 : 256 * 8;
      const int64_t n_out[2] = {40 * ik.rows + 3, ik.rows + 1};
      std::vector<std::byte> wdata[2], copies[2];
      TensorView w[2], wi[2];
      for (int i = 0; i < 2; ++i) {
        wdata[i] = testing::random_weights(rng, dt, n_out[i], n_in);
        w[i] = make_weight(dt, n_in, n_out[i], wdata[i]);
        const size_t bytes = ((n_out[i] + ik.rows - 1) / ik.rows) * ik.group_bytes(n_in);
        copies[i].resize(bytes);
        ik.pack(n_in, wdata[i].data(), row_bytes(dt, n_in), n_out[i], copies[i].data());
        wi[i] = w[i];
        wi[i].interleaved = copies[i].data();
        wi[i].interleaved_layout = ik.layout;
        wi[i].interleaved_n_bytes = bytes;
      }
      for (int64_t n_tokens : {1, 2, 5, 8, 9, 17, 18, 30}) {
        const std::vector<float> x = testing::random_floats(rng, n_in * n_tokens);
        std::vector<std::byte> scratch(matmul_scratch_bytes(dt, n_in, n_tokens, 5));
        std::vector<float> want[2], got[2];
        for (int i = 0; i < 2; ++i) want[i].resize(n_out[i] * n_tokens);
        const MatmulTarget plain[2] = {{&w[0], want[0].data()}, {&w[1], want[1].data()}};
        matmul_fused(*table, pool1, plain, x.data(), n_tokens, scratch.data());
        for (ThreadPool* pool : {&pool1, &pool2, &pool3, &pool5}) {
          SCOPED_TRACE(std::string(table->name) + " " + std::string(dtype_name(dt)) + " n_tokens=" +
                       std::to_string(n_tokens) + " threads=" + std::to_string(pool->n_threads()));
          for (int i = 0; i < 2; ++i) got[i].assign(n_out[i] * n_tokens, -1.0f);
          const MatmulTarget inter[2] = {{&wi[0], got[0].data()}, {&wi[1], got[1].data()}};
          matmul_fused(*table, *pool, inter, x.data(), n_tokens, scratch.data());
          for (int i = 0; i < 2; ++i) EXPECT_EQ(got[i], want[i]) << "target " << i;
          ++n_checked;
        }
      }
    }
  }
  if (best_kernel_table().name != std::string("scalar")) {
    EXPECT_GT(n_checked, 0) << "no interleaved kernels";
  }
}

// matmul_warm: each worker of a decode matmul reads the start of its own range, never past
// a target's bytes, kMatmulWarmBytes at most, the workers' runs disjoint; the caller and
// single-thread or chunked (prefill) calls read nothing. The reads themselves (in the
// background, left to finish before the matmul) stay inside the weights (ASan build) and
// change no result.
TEST(KernelsMatmul, WarmReadsTheStartOfEachWorkersRange) {
  std::mt19937 rng(43);
  int n_checked = 0;
  ThreadPool pool1(1), pool2(2), pool3(3), pool5(5);
  for (const KernelTable* table : available_kernel_tables()) {
    for (DType dt : {DType::kQ4_0, DType::kQ8_0, DType::kQ4_K, DType::kQ6_K}) {
      const MatmulKernels* mk = find_matmul_kernels(*table, dt);
      if (mk == nullptr) continue;
      const InterleavedKernels& ik = mk->interleaved;
      const int64_t n_in = dtype_info(dt).block_size == 32 ? 32 * 64 : 256 * 8;
      const int64_t rows = ik.layout != nullptr ? ik.rows : 16;
      // Big enough that a worker's range holds more than kMatmulWarmBytes, and a second
      // target that a range runs into.
      const int64_t n_out[2] = {(static_cast<int64_t>(3 * kMatmulWarmBytes) / static_cast<int64_t>(row_bytes(dt, n_in))) + 5,
                                rows + 1};
      for (bool interleaved : {false, true}) {
        if (interleaved && ik.layout == nullptr) continue;
        std::vector<std::byte> wdata[2], copies[2];
        TensorView w[2];
        size_t target_bytes[2];
        for (int i = 0; i < 2; ++i) {
          wdata[i] = testing::random_weights(rng, dt, n_out[i], n_in);
          w[i] = make_weight(dt, n_in, n_out[i], wdata[i]);
          target_bytes[i] = wdata[i].size();
          if (!interleaved) continue;
          const size_t bytes = ((n_out[i] + ik.rows - 1) / ik.rows) * ik.group_bytes(n_in);
          copies[i].resize(bytes);
          ik.pack(n_in, wdata[i].data(), row_bytes(dt, n_in), n_out[i], copies[i].data());
          w[i].interleaved = copies[i].data();
          w[i].interleaved_layout = ik.layout;
          w[i].interleaved_n_bytes = bytes;
          target_bytes[i] = bytes;
        }
        for (int64_t n_tokens : {1, 9}) {
          const std::vector<float> x = testing::random_floats(rng, n_in * n_tokens);
          std::vector<std::byte> scratch(matmul_scratch_bytes(dt, n_in, n_tokens, 5));
          std::vector<float> want[2], got[2];
          for (int i = 0; i < 2; ++i) want[i].resize(n_out[i] * n_tokens);
          const bool chunked = !interleaved && mk->panel.rows > 0 && n_tokens >= mk->panel.min_cols;
          const MatmulTarget want_t[2] = {{&w[0], want[0].data()}, {&w[1], want[1].data()}};
          matmul_fused(*table, pool1, want_t, x.data(), n_tokens, scratch.data());
          EXPECT_TRUE(matmul_warm_runs(*table, pool1, want_t, n_tokens, 1).empty());
          for (ThreadPool* pool : {&pool2, &pool3, &pool5}) {
            SCOPED_TRACE(std::string(table->name) + " " + std::string(dtype_name(dt)) +
                         (interleaved ? " interleaved" : " file layout") + " n_tokens=" + std::to_string(n_tokens) +
                         " threads=" + std::to_string(pool->n_threads()));
            for (int i = 0; i < 2; ++i) got[i].assign(n_out[i] * n_tokens, -1.0f);
            const MatmulTarget got_t[2] = {{&w[0], got[0].data()}, {&w[1], got[1].data()}};
            EXPECT_TRUE(matmul_warm_runs(*table, *pool, got_t, n_tokens, 0).empty()) << "the caller reads nothing";
            std::vector<std::pair<size_t, size_t>> seen[2];  // [target]: (begin, end) of every run
            for (int t = 1; t < pool->n_threads(); ++t) {
              const std::vector<MatmulWarmRun> runs = matmul_warm_runs(*table, *pool, got_t, n_tokens, t);
              // Workers past the call's thread count (small work) read nothing.
              if (chunked) {
                EXPECT_TRUE(runs.empty()) << "a prefill-shaped (panel) call";
                continue;
              }
              if (t == 1) {
                ASSERT_FALSE(runs.empty());
              }
              size_t total = 0;
              for (const MatmulWarmRun& r : runs) {
                ASSERT_LT(r.target, 2u);
                EXPECT_GT(r.n_bytes, 0u);
                EXPECT_LE(r.offset + r.n_bytes, target_bytes[r.target]) << "worker " << t << " reads past its target";
                total += r.n_bytes;
                seen[r.target].push_back({r.offset, r.offset + r.n_bytes});
              }
              EXPECT_LE(total, kMatmulWarmBytes);
              if (pool->n_threads() == 2) {  // its range: half of > 3 budgets
                EXPECT_EQ(total, kMatmulWarmBytes) << "a range longer than the budget reads all of it";
              }
            }
            for (auto& s : seen) {
              std::sort(s.begin(), s.end());
              for (size_t i = 1; i < s.size(); ++i) EXPECT_LE(s[i - 1].second, s[i].first) << "workers' runs overlap";
            }
            matmul_warm(*table, *pool, got_t, n_tokens);
            std::this_thread::sleep_for(std::chrono::milliseconds(2));
            matmul_fused(*table, *pool, got_t, x.data(), n_tokens, scratch.data());
            for (int i = 0; i < 2; ++i) EXPECT_EQ(got[i], want[i]) << "target " << i;
            ++n_checked;
          }
          // Many activation rows: chunked or panels when the table has them; no warm-up then.
          if (interleaved) {
            const MatmulTarget t2[2] = {{&w[0], nullptr}, {&w[1], nullptr}};
            EXPECT_TRUE(matmul_warm_runs(*table, pool2, t2, 64, 1).empty());
          }
        }
      }
    }
  }
  EXPECT_GT(n_checked, 0);
}

TEST(KernelsMatmul, ScratchSizes) {
  // At least the quantized activations (Q8_0: 34 bytes per 32, Q8_K: 292 per 256, F16: 2
  // per element), plus alignment; panels only from the tables that have them.
  EXPECT_LE(matmul_scratch_bytes(DType::kF32, 896, 5, 1), 3u * 64);
  EXPECT_GE(matmul_scratch_bytes(DType::kQ4_0, 896, 5, 1), 5u * 28 * 34);
  EXPECT_GE(matmul_scratch_bytes(DType::kQ8_0, 896, 1, 1), 28u * 34);
  EXPECT_GE(matmul_scratch_bytes(DType::kQ4_K, 512, 3, 1), 3u * 2 * 292);
  EXPECT_GE(matmul_scratch_bytes(DType::kQ6_K, 256, 1, 1), 292u);
  EXPECT_GE(matmul_scratch_bytes(DType::kF16, 64, 2, 1), 2u * 128);
  // Decode: the activations and the interleaved path's side data (8 bytes per block), no panels.
  EXPECT_LE(matmul_scratch_bytes(DType::kQ8_0, 896, 1, 4), 28u * 34 + 28u * 8 + 4 * 64);
  EXPECT_TRUE(matmul_supports(DType::kQ6_K));
  EXPECT_FALSE(matmul_supports(DType::kQ8_K));  // an activation type only
  EXPECT_FALSE(matmul_supports(DType::kI32));
}

// The rotation is orthogonal (dot products and norms kept, to rounding), mixes dims (an
// outlier is spread over the block), and its signs are fixed (a cache written by one process
// is read by another).
TEST(KernelsOps, HadamardRotationKeepsDotProductsAndSpreadsOutliers) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  for (int64_t head_dim : {32, 64, 96, 128, 256}) {
    SCOPED_TRACE(head_dim);
    const std::vector<float> signs = hadamard_signs(head_dim);
    EXPECT_EQ(signs, hadamard_signs(head_dim));
    EXPECT_NE(std::count(signs.begin(), signs.end(), -1.0f), 0);
    EXPECT_NE(std::count(signs.begin(), signs.end(), 1.0f), 0);
    const int64_t n_rows = 6;
    std::vector<float> x(n_rows * head_dim);
    for (float& v : x) v = nd(rng);
    x[3] = 40.0f;  // an outlier dim in row 0
    std::vector<float> y = x;
    hadamard_rotate(y.data(), n_rows, head_dim, signs.data());
    for (int64_t a = 0; a < n_rows; ++a)
      for (int64_t b = 0; b < n_rows; ++b) {
        double dx = 0, dy = 0;
        for (int64_t i = 0; i < head_dim; ++i) {
          dx += double{x[a * head_dim + i]} * x[b * head_dim + i];
          dy += double{y[a * head_dim + i]} * y[b * head_dim + i];
        }
        EXPECT_NEAR(dy, dx, 1e-4 * (1.0 + std::abs(dx))) << a << " " << b;
      }
    // Row 0's largest magnitude falls from the outlier's 40 to about 40 / sqrt(B).
    const int64_t block = head_dim & -head_dim;
    float amax = 0;
    for (int64_t i = 0; i < head_dim; ++i) amax = std::max(amax, std::abs(y[i]));
    EXPECT_LT(amax, 40.0f / std::sqrt(static_cast<float>(block)) + 4.0f);
    EXPECT_NE(x, y);
  }
}

TEST(KernelsOps, GetRowsDequantizes) {
  std::mt19937 rng(5);
  const std::vector<std::byte> data = testing::random_weights(rng, DType::kQ4_K, 9, 512);
  const TensorView w = make_weight(DType::kQ4_K, 512, 9, data);
  const int32_t ids[3] = {8, 0, 8};
  std::vector<float> out(3 * 512);
  get_rows(w, ids, 3, out.data());
  for (int i = 0; i < 3; ++i) {
    const std::vector<float> want = testing::dequantize(DType::kQ4_K, w.row(ids[i]), 512);
    EXPECT_TRUE(std::equal(want.begin(), want.end(), out.begin() + i * 512));
  }
}

TEST(KernelsOps, RmsNormMatchesDouble) {
  std::mt19937 rng(6);
  const int64_t n = 896, n_rows = 3;
  const std::vector<float> x = testing::random_floats(rng, n * n_rows, 5.0f);
  const std::vector<float> wt = testing::random_floats(rng, n);
  for (const KernelTable* table : available_kernel_tables()) {
    std::vector<float> out(n * n_rows);
    rms_norm(*table, x.data(), wt.data(), n_rows, n, 1e-6f, out.data());
    for (int64_t r = 0; r < n_rows; ++r) {
      double ss = 0;
      for (int64_t i = 0; i < n; ++i) ss += double(x[r * n + i]) * x[r * n + i];
      const double scale = 1.0 / std::sqrt(ss / n + 1e-6);
      for (int64_t i = 0; i < n; ++i) {
        const double want = x[r * n + i] * scale * wt[i];
        EXPECT_NEAR(out[r * n + i], want, 1e-6 * std::fabs(want) + 1e-7) << table->name;
      }
    }
  }
}

TEST(KernelsOps, SiluMulAndAdd) {
  std::mt19937 rng(7);
  const int64_t n = 1000;
  const std::vector<float> g = testing::random_floats(rng, n, 4.0f);
  const std::vector<float> u = testing::random_floats(rng, n);
  for (const KernelTable* table : available_kernel_tables()) {
    std::vector<float> out = g;
    silu_mul(*table, out.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i) {
      const double want = g[i] / (1.0 + std::exp(-double(g[i]))) * u[i];
      EXPECT_NEAR(out[i], want, 1e-6 * std::fabs(want) + 1e-7) << table->name;
    }
    std::vector<float> a = g;
    add_in_place(*table, a.data(), u.data(), n);
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(a[i], g[i] + u[i]);
  }
  std::vector<float> x = {1, 2, 3, 4, 5, 6};
  const float bias[3] = {10, 20, 30};
  add_bias(x.data(), bias, 2, 3);
  EXPECT_EQ(x, (std::vector<float>{11, 22, 33, 14, 25, 36}));
}

// Direct formula: pair i < r/2 rotates by pos * freq_scale * theta^(-2i/r) / ff[i] (r the
// rotated dims), cos and sin scaled by attn_factor; dims [r, d) are left alone.
void rope_reference(const RopeParams& p, std::vector<double>& x, int64_t n_tokens, int32_t n_heads,
                    const int32_t* pos) {
  const int32_t d = p.head_dim, r = p.rotated_dims();
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int32_t h = 0; h < n_heads; ++h) {
      double* v = x.data() + (t * n_heads + h) * d;
      for (int32_t i = 0; i < r / 2; ++i) {
        const double ff = p.freq_factors ? p.freq_factors[i] : 1.0;
        const double angle = pos[t] * double(p.freq_scale) * std::pow(double(p.theta), -2.0 * i / r) / ff;
        const double c = std::cos(angle) * p.attn_factor, sn = std::sin(angle) * p.attn_factor;
        const int32_t ia = p.layout == RopeLayout::kInterleaved ? 2 * i : i;
        const int32_t ib = p.layout == RopeLayout::kInterleaved ? 2 * i + 1 : i + r / 2;
        const double a = v[ia], b = v[ib];
        v[ia] = a * c - b * sn;
        v[ib] = a * sn + b * c;
      }
    }
  }
}

// Partial rotary (StableLM: 25% of the head) and a magnitude factor (Phi-3 longrope):
// the first n_rot dims rotate as a head of n_rot would, the rest pass through unchanged.
TEST(KernelsRope, PartialRotaryAndAttnFactor) {
  std::mt19937 rng(18);
  const int32_t n_heads = 3, d = 80;
  const int64_t n_tokens = 3;
  const int32_t pos[3] = {0, 9, 300};
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
    for (int32_t n_rot : {20, 32, 80}) {
      RopeParams p;
      p.head_dim = d;
      p.n_rot = n_rot;
      p.theta = 10000.0f;
      p.attn_factor = n_rot == 32 ? 1.19f : 1.0f;
      p.layout = layout;
      const std::vector<float> x0 = testing::random_floats(rng, n_tokens * n_heads * d);
      std::vector<float> x = x0;
      rope(best_kernel_table(), p, x.data(), n_tokens, n_heads, pos);
      std::vector<double> want(x0.begin(), x0.end());
      rope_reference(p, want, n_tokens, n_heads, pos);
      for (size_t i = 0; i < x.size(); ++i) {
        if (int32_t(i % d) >= n_rot) {
          ASSERT_EQ(x[i], x0[i]) << i;
        }
        EXPECT_NEAR(x[i], want[i], 2e-4) << "n_rot " << n_rot << " i " << i;
      }
    }
  }
}

TEST(KernelsRope, MatchesDirectFormulaBothLayouts) {
  std::mt19937 rng(8);
  const int32_t n_heads = 3, d = 64;
  const int64_t n_tokens = 4;
  const int32_t pos[4] = {0, 1, 17, 150};
  std::vector<float> ff(d / 2);
  for (int i = 0; i < d / 2; ++i) ff[i] = 1.0f + 0.1f * i;
  for (RopeLayout layout : {RopeLayout::kInterleaved, RopeLayout::kNeox}) {
    for (bool use_ff : {false, true}) {
      RopeParams p;
      p.head_dim = d;
      p.theta = 1e6f;
      p.freq_scale = use_ff ? 0.5f : 1.0f;
      p.freq_factors = use_ff ? ff.data() : nullptr;
      p.layout = layout;
      const std::vector<float> x0 = testing::random_floats(rng, n_tokens * n_heads * d);
      std::vector<float> x = x0;
      rope(best_kernel_table(), p, x.data(), n_tokens, n_heads, pos);
      std::vector<double> want(x0.begin(), x0.end());
      rope_reference(p, want, n_tokens, n_heads, pos);
      // ggml builds theta_i by repeated f32 multiplication: relative angle error grows
      // to ~i ulp, i.e. ~1e-5 * pos radians at pos 150.
      for (size_t i = 0; i < x.size(); ++i) EXPECT_NEAR(x[i], want[i], 2e-4) << i;
    }
  }
}

TEST(KernelsRope, InterleavedEqualsNeoxAfterPermutingPairs) {
  std::mt19937 rng(9);
  const int32_t n_heads = 2, d = 128;
  const int64_t n_tokens = 3;
  const int32_t pos[3] = {5, 1000, 4095};
  const std::vector<float> xi = testing::random_floats(rng, n_tokens * n_heads * d);
  // neox[i] = interleaved[2i], neox[i + d/2] = interleaved[2i + 1]
  std::vector<float> xn(xi.size());
  for (int64_t r = 0; r < n_tokens * n_heads; ++r)
    for (int32_t i = 0; i < d / 2; ++i) {
      xn[r * d + i] = xi[r * d + 2 * i];
      xn[r * d + i + d / 2] = xi[r * d + 2 * i + 1];
    }
  RopeParams p;
  p.head_dim = d;
  p.theta = 10000.0f;
  std::vector<float> yi = xi, yn = xn;
  p.layout = RopeLayout::kInterleaved;
  rope(best_kernel_table(), p, yi.data(), n_tokens, n_heads, pos);
  p.layout = RopeLayout::kNeox;
  rope(best_kernel_table(), p, yn.data(), n_tokens, n_heads, pos);
  for (int64_t r = 0; r < n_tokens * n_heads; ++r)
    for (int32_t i = 0; i < d / 2; ++i) {
      ASSERT_EQ(yn[r * d + i], yi[r * d + 2 * i]);
      ASSERT_EQ(yn[r * d + i + d / 2], yi[r * d + 2 * i + 1]);
    }
}

// ---------------------------------------------------------------------------------------
// Attention

struct KvFixture {
  PagedKvView view;
  std::vector<std::byte> k_storage, v_storage;
  std::vector<int32_t> block_table;

  KvFixture(DType dtype, int32_t n_kv_head, int32_t head_dim, int32_t block_size,
            int32_t n_blocks, std::mt19937& rng) {
    view.k_dtype = view.v_dtype = dtype;
    view.block_size = block_size;
    view.n_kv_head = n_kv_head;
    view.head_dim = head_dim;
    view.set_dense_strides();
    // Physical storage has spare blocks; the sequence's blocks are shuffled within it.
    const int32_t n_physical = n_blocks + 3;
    k_storage.assign(view.k_block_stride_bytes * n_physical, std::byte{0x7f});
    v_storage.assign(view.v_block_stride_bytes * n_physical, std::byte{0x7f});
    std::vector<int32_t> perm(n_physical);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    block_table.assign(perm.begin(), perm.begin() + n_blocks);
    view.k_base = k_storage.data();
    view.v_base = v_storage.data();
    view.block_table = block_table;
    // A spare physical block filled with NaN (f16 0x7e00 / f32 0x7fc00000).
    nan_block = perm[n_blocks];
    const size_t elem = dtype == DType::kF32 ? 4 : 2;
    for (size_t i = 0; i < view.k_block_stride_bytes; i += elem) {
      std::byte* kb = k_storage.data() + nan_block * view.k_block_stride_bytes + i;
      std::byte* vb = v_storage.data() + nan_block * view.v_block_stride_bytes + i;
      if (dtype == DType::kF16) {
        const uint16_t h = 0x7e00;
        std::memcpy(kb, &h, 2);
        std::memcpy(vb, &h, 2);
      } else {
        const float f = NAN;
        std::memcpy(kb, &f, 4);
        std::memcpy(vb, &f, 4);
      }
    }
  }
  int32_t nan_block = 0;
};

// Naive causal attention in double (with the window and soft-capping of p). With round_f16, Q, K, V and the normalised P are
// rounded to f16 (what ggml's F16-cache path does); K and V come from the f32 inputs.
//
// `ambiguous` (with round_f16): per output, how far it may move when a probability lies so
// close to an f16 rounding boundary that the kernel's f32 arithmetic (relative error well
// below kPRel) may round it the other way: sum over such p_j of |the two roundings' gap| *
// |v_j[i]|. An exact bound per output, not a count of outliers.
constexpr double kPRel = 1e-5;
std::vector<double> attention_reference(const AttentionParams& p, const std::vector<float>& q,
                                        const std::vector<float>& k, const std::vector<float>& v,
                                        int64_t pos0, int64_t n_tokens, bool round_f16,
                                        std::vector<double>* ambiguous = nullptr) {
  const int32_t hd = p.head_dim;
  auto r = [&](float f) { return round_f16 ? double(round_fp16(f)) : double(f); };
  std::vector<double> out(n_tokens * p.n_head * hd, 0.0);
  if (ambiguous != nullptr) ambiguous->assign(out.size(), 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t n_kv = pos0 + t + 1;
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, n_kv - p.window) : 0;
    for (int32_t h = 0; h < p.n_head; ++h) {
      const int32_t kvh = h / (p.n_head / p.n_kv_head);
      const float* qv = q.data() + (t * p.n_head + h) * hd;
      std::vector<double> s(n_kv);
      double max = -INFINITY;
      for (int64_t j = lo; j < n_kv; ++j) {
        const float* kj = k.data() + (j * p.n_kv_head + kvh) * hd;
        double dot = 0;
        for (int32_t i = 0; i < hd; ++i) dot += r(qv[i]) * r(kj[i]);
        s[j] = dot * p.scale;
        if (p.softcap > 0) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
        max = std::max(max, s[j]);
      }
      double sum = 0;
      for (int64_t j = lo; j < n_kv; ++j) sum += std::exp(s[j] - max);
      double* o = out.data() + (t * p.n_head + h) * hd;
      for (int64_t j = lo; j < n_kv; ++j) {
        double pj = std::exp(s[j] - max) / sum;
        const double gap = round_f16 ? double(round_fp16(float(pj * (1 + kPRel)))) -
                                           double(round_fp16(float(pj * (1 - kPRel))))
                                     : 0.0;
        if (round_f16) pj = round_fp16(float(pj));
        const float* vj = v.data() + (j * p.n_kv_head + kvh) * hd;
        for (int32_t i = 0; i < hd; ++i) o[i] += pj * r(vj[i]);
        if (ambiguous != nullptr && gap != 0.0) {
          double* a = ambiguous->data() + (t * p.n_head + h) * hd;
          for (int32_t i = 0; i < hd; ++i) a[i] += gap * std::fabs(r(vj[i]));
        }
      }
    }
  }
  return out;
}

struct AttentionCase {
  int32_t n_head, n_kv_head, head_dim, block_size;
  int64_t pos0, n_tokens;
  int32_t window = 0;
  float softcap = 0.0f;
};

void check_attention_cases(std::span<const AttentionCase> cases, std::mt19937& rng) {
  ThreadPool pool(2);
  for (const KernelTable* table : available_kernel_tables()) {
    for (DType dtype : {DType::kF32, DType::kF16}) {
      for (const AttentionCase& c : cases) {
        SCOPED_TRACE(std::string(table->name) + (dtype == DType::kF16 ? " f16" : " f32") +
                     " n_head=" + std::to_string(c.n_head) + " n_kv_head=" +
                     std::to_string(c.n_kv_head) + " pos0=" + std::to_string(c.pos0) +
                     " n_tokens=" + std::to_string(c.n_tokens) + " window=" + std::to_string(c.window));
        AttentionParams p;
        p.window = c.window;
        p.softcap = c.softcap;
        p.n_head = c.n_head;
        p.n_kv_head = c.n_kv_head;
        p.head_dim = c.head_dim;
        p.scale = 1.0f / std::sqrt(float(c.head_dim));
        const int64_t n_ctx = c.pos0 + c.n_tokens;
        const int32_t n_blocks = int32_t((n_ctx + c.block_size - 1) / c.block_size);
        KvFixture kv(dtype, c.n_kv_head, c.head_dim, c.block_size, n_blocks, rng);
        const std::vector<float> k = testing::random_floats(rng, n_ctx * c.n_kv_head * c.head_dim, 1.5f);
        const std::vector<float> v = testing::random_floats(rng, n_ctx * c.n_kv_head * c.head_dim);
        const std::vector<float> q = testing::random_floats(rng, c.n_tokens * c.n_head * c.head_dim, 1.5f);
        // Earlier positions as one store, the new tokens as another (as the model does).
        kv_store(best_kernel_table(), kv.view, 0, c.pos0, k.data(), v.data());
        const size_t off = size_t(c.pos0) * c.n_kv_head * c.head_dim;
        kv_store(best_kernel_table(), kv.view, c.pos0, c.n_tokens, k.data() + off, v.data() + off);
        // With a window, the blocks no query of the call can see are released: point them
        // at a block of NaNs, which would poison any result that read them (even with p = 0).
        if (c.window > 0) {
          const int64_t first_seen = std::max<int64_t>(0, c.pos0 - c.window + 1);
          for (int64_t b = 0; b < first_seen / c.block_size; ++b) kv.block_table[b] = kv.nan_block;
        }

        std::vector<std::byte> scratch(attention_scratch_bytes(p, c.n_tokens, n_ctx, pool.n_threads()));
        std::vector<float> out(c.n_tokens * c.n_head * c.head_dim);
        attention(*table, pool, p, kv.view, q.data(), c.pos0, c.n_tokens, out.data(), scratch.data());
        std::vector<double> ambiguous;
        const std::vector<double> want =
            attention_reference(p, q, k, v, c.pos0, c.n_tokens, dtype == DType::kF16, &ambiguous);
        // F32: f32 vs double rounding only. F16: the same, plus, per output, the moves that
        // probabilities on an f16 rounding boundary allow (attention_reference's
        // `ambiguous`; one such p moves by 2^-11 relative). (Skipping the P rounding
        // altogether gives errors ~1e-4 almost everywhere, far outside this.)
        double max_err = 0;
        int64_t n_outside = 0;
        for (size_t i = 0; i < out.size(); ++i) {
          const double err = std::fabs(out[i] - want[i]);
          max_err = std::max(max_err, err);
          n_outside += err > 1e-5 + ambiguous[i];
        }
        EXPECT_LE(max_err, dtype == DType::kF32 ? 1e-5 : 1e-3);
        EXPECT_EQ(n_outside, 0);
        // Chunking must not change a token's result: recompute the last token alone.
        std::vector<float> last(c.n_head * c.head_dim);
        attention(*table, pool, p, kv.view, q.data() + (c.n_tokens - 1) * c.n_head * c.head_dim,
                  n_ctx - 1, 1, last.data(), scratch.data());
        EXPECT_TRUE(std::equal(last.begin(), last.end(),
                               out.begin() + (c.n_tokens - 1) * c.n_head * c.head_dim));
      }
    }
  }
}

TEST(KernelsAttention, MatchesNaiveSoftmaxAttention) {
  const AttentionCase cases[] = {
      {4, 4, 32, 16, 0, 37},    // MHA prefill over 3 blocks
      {8, 2, 64, 16, 0, 50},    // GQA
      {6, 1, 64, 8, 0, 21},     // MQA
      {8, 2, 64, 16, 37, 1},    // decode at pos 37
      {8, 2, 64, 16, 20, 13},   // chunked prefill starting mid-block
      {14, 2, 64, 32, 100, 3},  // qwen-like heads, pos0 > 0
  };
  std::mt19937 rng(10);
  check_attention_cases(cases, rng);
}

// Past one 256-key chunk: decode of one token goes through the split (flash-decoding)
// path, and must still equal the same token computed inside a prefill batch (the last
// token alone is checked against the batch in check_attention_cases).
TEST(KernelsAttention, LongContextsAcrossChunks) {
  const AttentionCase cases[] = {
      {14, 2, 64, 16, 600, 1},   // decode over 3 chunks
      {8, 2, 64, 16, 500, 30},   // prefill across a chunk boundary, pos0 > 0
      {4, 1, 128, 32, 1030, 2},  // MQA, two tokens at a long context
  };
  std::mt19937 rng(12);
  check_attention_cases(cases, rng);
}

// Sliding windows (q - window < k <= q) on both paths and across chunk boundaries, and
// soft-capped scores; blocks wholly before every query's window are NaN (never read).
TEST(KernelsAttention, SlidingWindowAndSoftcap) {
  const AttentionCase cases[] = {
      {4, 2, 32, 8, 0, 40, 8},              // prefill longer than the window
      {4, 2, 32, 8, 0, 40, 8, 30.0f},       // ... soft-capped
      {8, 2, 64, 16, 37, 1, 16},            // decode, window = one block
      {8, 2, 64, 16, 100, 13, 20},          // chunked prefill, window not a block multiple
      {4, 1, 64, 16, 0, 30, 0, 5.0f},       // full attention, soft-capped
      {14, 2, 64, 16, 1000, 1, 300},        // decode over 2 chunks (split path) of a window
      {14, 2, 64, 16, 1000, 1, 300, 20.0f},
      {8, 2, 64, 16, 700, 6, 260},          // tile of tokens whose windows straddle chunks
      {4, 2, 32, 16, 50, 3, 1},             // window 1: each token sees only itself
  };
  std::mt19937 rng(14);
  check_attention_cases(cases, rng);
}

TEST(KernelsAttention, KvStoreRoundsToNearestEven) {
  std::mt19937 rng(11);
  KvFixture kv(DType::kF16, 2, 8, 4, 3, rng);
  const std::vector<float> k = testing::random_floats(rng, 10 * 2 * 8);
  const std::vector<float> v = testing::random_floats(rng, 10 * 2 * 8);
  kv_store(best_kernel_table(), kv.view, 0, 10, k.data(), v.data());
  for (int64_t pos = 0; pos < 10; ++pos)
    for (int32_t h = 0; h < 2; ++h)
      for (int32_t i = 0; i < 8; ++i) {
        const auto* kd = reinterpret_cast<const uint16_t*>(kv.view.k_addr(pos, h));
        const auto* vd = reinterpret_cast<const uint16_t*>(kv.view.v_addr(pos, h));
        EXPECT_EQ(kd[i], f32_to_fp16(k[(pos * 2 + h) * 8 + i]));
        EXPECT_EQ(vd[i], f32_to_fp16(v[(pos * 2 + h) * 8 + i]));
      }
}

}  // namespace
}  // namespace lumen::kernels
