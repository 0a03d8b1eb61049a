// Flash attention (flash_attention.cc) against a double-precision reference, on every
// kernel table the host has, every KV cache type (K and V independently), GQA ratios,
// sliding windows, soft-capping, odd lengths and paged blocks out of order; plus the
// invariances its chunked merge promises (a token's result does not depend on the batch,
// the path or the thread count) and scalar / SIMD parity.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <random>
#include <string>

#include <gtest/gtest.h>

#include "base/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_test_util.h"
#include "kernels/ops.h"

namespace lumen::kernels {
namespace {

// One sequence's paged cache of the given types; blocks shuffled in a larger storage, a
// spare block filled with NaN (every 2-byte pair 0x7fc0: NaN as f16, bf16, the fp16 scale
// of a q8_0 / q4_0 block, and as f32 0x7fc07fc0).
struct TypedKv {
  PagedKvView view;
  std::vector<std::byte> k_storage, v_storage;
  std::vector<int32_t> block_table;
  int32_t nan_block = 0;

  TypedKv(KvDTypes t, int32_t n_kv_head, int32_t head_dim, int32_t block_size, int32_t n_blocks, std::mt19937& rng) {
    view.k_dtype = t.k;
    view.v_dtype = t.v;
    view.block_size = block_size;
    view.n_kv_head = n_kv_head;
    view.head_dim = head_dim;
    view.set_dense_strides();
    const int32_t n_physical = n_blocks + 3;
    k_storage.resize(view.k_block_stride_bytes * n_physical);
    v_storage.resize(view.v_block_stride_bytes * n_physical);
    for (auto* s : {&k_storage, &v_storage})
      for (size_t i = 0; i < s->size(); ++i) (*s)[i] = std::byte(i % 2 == 0 ? 0xc0 : 0x7f);
    std::vector<int32_t> perm(n_physical);
    std::iota(perm.begin(), perm.end(), 0);
    std::shuffle(perm.begin(), perm.end(), rng);
    block_table.assign(perm.begin(), perm.begin() + n_blocks);
    nan_block = perm[n_blocks];
    view.k_base = k_storage.data();
    view.v_base = v_storage.data();
    view.block_table = block_table;
  }
};

std::vector<float> dequant(DType t, const std::byte* src, int32_t n) {
  std::vector<float> out(n);
  dequantize_row(t, src, out.data(), n);
  return out;
}

// The query as the K type's dot product sees it: converted to its activation type and
// back (exact for f32; f16 / bf16 rounding; q8_0 blocks).
std::vector<float> query_as_dotted(DType k_dtype, const float* q, int32_t hd) {
  const MatmulKernels* mk = find_matmul_kernels(reference_kernel_table(), k_dtype);
  if (mk->quantize_act == nullptr) return std::vector<float>(q, q + hd);
  std::vector<std::byte> qq(row_bytes(mk->act_dtype, hd));
  mk->quantize_act(q, qq.data(), hd);
  return dequant(mk->act_dtype, qq.data(), hd);
}

// Exact attention in double over the values the cache holds (read back through the view)
// and the queries as converted for the K type's dot product.
std::vector<double> flash_reference(const AttentionParams& p, const PagedKvView& kv, const std::vector<float>& q,
                                    int64_t pos0, int64_t n_tokens) {
  const int32_t hd = p.head_dim;
  std::vector<double> out(n_tokens * p.n_head * hd, 0.0);
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t pos = pos0 + t;
    const int64_t lo = p.window > 0 ? std::max<int64_t>(0, pos - p.window + 1) : 0;
    for (int32_t h = 0; h < p.n_head; ++h) {
      const int32_t kvh = h / (p.n_head / p.n_kv_head);
      const std::vector<float> qv = query_as_dotted(kv.k_dtype, q.data() + (t * p.n_head + h) * hd, hd);
      std::vector<double> s(pos + 1, 0.0);
      double max = -INFINITY;
      for (int64_t j = lo; j <= pos; ++j) {
        const std::vector<float> kj = dequant(kv.k_dtype, kv.k_addr(j, kvh), hd);
        double dot = 0;
        for (int32_t i = 0; i < hd; ++i) dot += double(qv[i]) * kj[i];
        s[j] = dot * p.scale;
        if (p.softcap > 0) s[j] = p.softcap * std::tanh(s[j] / p.softcap);
        max = std::max(max, s[j]);
      }
      double sum = 0;
      for (int64_t j = lo; j <= pos; ++j) sum += std::exp(s[j] - max);
      double* o = out.data() + (t * p.n_head + h) * hd;
      for (int64_t j = lo; j <= pos; ++j) {
        const std::vector<float> vj = dequant(kv.v_dtype, kv.v_addr(j, kvh), hd);
        const double pj = std::exp(s[j] - max) / sum;
        for (int32_t i = 0; i < hd; ++i) o[i] += pj * vj[i];
      }
    }
  }
  return out;
}

struct FlashCase {
  int32_t n_head, n_kv_head, head_dim, block_size;
  int64_t pos0, n_tokens;
  int32_t window = 0;
  float softcap = 0.0f;
};

std::string describe(const KernelTable& table, KvDTypes t, const FlashCase& c) {
  return std::string(table.name) + " k=" + std::string(dtype_name(t.k)) + " v=" + std::string(dtype_name(t.v)) +
         " heads " + std::to_string(c.n_head) + "/" + std::to_string(c.n_kv_head) + " hd " +
         std::to_string(c.head_dim) + " bs " + std::to_string(c.block_size) + " pos0 " + std::to_string(c.pos0) +
         " n " + std::to_string(c.n_tokens) + " window " + std::to_string(c.window) + " softcap " +
         std::to_string(c.softcap);
}

struct Prepared {
  AttentionParams p;
  TypedKv kv;
  std::vector<float> q;
};

Prepared prepare(KvDTypes t, const FlashCase& c, std::mt19937& rng) {
  AttentionParams p;
  p.n_head = c.n_head;
  p.n_kv_head = c.n_kv_head;
  p.head_dim = c.head_dim;
  p.scale = 1.0f / std::sqrt(float(c.head_dim));
  p.window = c.window;
  p.softcap = c.softcap;
  p.flash = true;
  const int64_t n_ctx = c.pos0 + c.n_tokens;
  const int32_t n_blocks = int32_t((n_ctx + c.block_size - 1) / c.block_size);
  TypedKv kv(t, c.n_kv_head, c.head_dim, c.block_size, n_blocks, rng);
  const std::vector<float> k = testing::random_floats(rng, n_ctx * c.n_kv_head * c.head_dim, 1.5f);
  const std::vector<float> v = testing::random_floats(rng, n_ctx * c.n_kv_head * c.head_dim);
  std::vector<float> q = testing::random_floats(rng, c.n_tokens * c.n_head * c.head_dim, 1.5f);
  kv_store(best_kernel_table(), kv.view, 0, n_ctx, k.data(), v.data());
  // With a window, blocks no query of the call can see point at the NaN block: reading one
  // would poison the result (even with p = 0).
  if (c.window > 0) {
    const int64_t first_seen = std::max<int64_t>(0, c.pos0 - c.window + 1);
    for (int64_t b = 0; b < first_seen / c.block_size; ++b) kv.block_table[b] = kv.nan_block;
  }
  return {p, std::move(kv), std::move(q)};
}

std::vector<float> run(const KernelTable& table, ThreadPool& pool, const Prepared& pr, int64_t pos0, int64_t n_tokens,
                       const float* q) {
  const int64_t n_ctx = pos0 + n_tokens;
  std::vector<std::byte> scratch(attention_scratch_bytes(pr.p, n_tokens, n_ctx, pool.n_threads()));
  std::vector<float> out(n_tokens * pr.p.n_head * pr.p.head_dim, -1.0f);
  attention(table, pool, pr.p, pr.kv.view, q, pos0, n_tokens, out.data(), scratch.data());
  return out;
}

const KvDTypes kTypePairs[] = {
    {DType::kF32, DType::kF32},   {DType::kF16, DType::kF16},   {DType::kBF16, DType::kBF16},
    {DType::kQ8_0, DType::kQ8_0}, {DType::kQ4_0, DType::kQ4_0}, {DType::kQ8_0, DType::kF16},
    {DType::kF16, DType::kQ4_0},  {DType::kQ4_0, DType::kQ8_0},
};

// Shapes: GQA ratios 1, 2, 3, 4, 7, 8; head sizes 32..128 (and 40 / 24 for the float
// types, which the group kernels do not take); prefill, chunked prefill, decode over one and
// over several 256-key chunks (the split path with 2 threads); windows, soft-capping; key
// counts that end inside an 8-key score tile and inside a cache block.
const FlashCase kCases[] = {
    {4, 4, 32, 16, 0, 37},  {8, 2, 64, 16, 0, 19},   {14, 2, 64, 16, 300, 1}, {7, 1, 32, 8, 529, 1},
    {8, 4, 64, 16, 250, 9}, {4, 2, 96, 32, 0, 70, 24}, {8, 2, 64, 16, 700, 1, 300}, {4, 1, 128, 16, 40, 5, 0, 8.0f},
    {8, 8, 32, 16, 600, 3, 100, 5.0f}, {6, 2, 40, 16, 270, 1}, {2, 1, 24, 4, 0, 13, 5},
    {6, 2, 64, 16, 300, 1}, {16, 2, 128, 16, 530, 2}, {3, 1, 128, 16, 0, 21}, {8, 1, 64, 16, 0, 13},
};

bool type_fits(KvDTypes t, int32_t hd) {
  return hd % dtype_info(t.k).block_size == 0 && hd % dtype_info(t.v).block_size == 0;
}

TEST(FlashAttention, MatchesDoubleReferenceForEveryTypeAndTable) {
  std::mt19937 rng(7);
  ThreadPool pool(2);
  for (const KvDTypes& t : kTypePairs) {
    for (const FlashCase& c : kCases) {
      if (!type_fits(t, c.head_dim)) continue;
      const Prepared pr = prepare(t, c, rng);
      const std::vector<double> want = flash_reference(pr.p, pr.kv.view, pr.q, c.pos0, c.n_tokens);
      for (const KernelTable* table : available_kernel_tables()) {
        SCOPED_TRACE(describe(*table, t, c));
        const std::vector<float> got = run(*table, pool, pr, c.pos0, c.n_tokens, pr.q.data());
        double max_err = 0;
        for (size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, std::fabs(got[i] - want[i]));
        // f32 arithmetic against double: exponentials, f32 sums of up to ~700 terms, the
        // merge's rescaling. Outputs are convex combinations of values in [-1, 1].
        EXPECT_LE(max_err, 2e-5);
      }
    }
  }
}

// The reference is sensitive enough to see what the cache holds: attention over the f32
// values the quantized cache was written from differs by far more than the tolerance.
TEST(FlashAttention, ReferenceSeesTheCacheQuantization) {
  std::mt19937 rng(11);
  ThreadPool pool(2);
  const FlashCase c{8, 2, 64, 16, 0, 40};
  std::mt19937 rng_a(3), rng_b(3);
  const Prepared q4 = prepare({DType::kQ4_0, DType::kQ4_0}, c, rng_a);
  const Prepared f32 = prepare({DType::kF32, DType::kF32}, c, rng_b);
  const std::vector<float> a = run(best_kernel_table(), pool, q4, 0, c.n_tokens, q4.q.data());
  const std::vector<float> b = run(best_kernel_table(), pool, f32, 0, c.n_tokens, f32.q.data());
  double max_diff = 0;
  for (size_t i = 0; i < a.size(); ++i) max_diff = std::max(max_diff, double(std::fabs(a[i] - b[i])));
  EXPECT_GT(max_diff, 1e-2);
}

// A token's result is the same bits alone or in a batch, on one thread or two (per-token
// path vs flash decoding's split path), whatever the table.
TEST(FlashAttention, ResultDependsOnlyOnTheContext) {
  std::mt19937 rng(5);
  ThreadPool one(1), two(2);
  const FlashCase cases[] = {{8, 2, 64, 16, 600, 5}, {4, 4, 32, 16, 1030, 3, 0, 6.0f}, {8, 2, 64, 16, 700, 4, 300}};
  for (const KvDTypes& t : {KvDTypes{DType::kF16, DType::kF16}, KvDTypes{DType::kQ8_0, DType::kQ4_0}}) {
    for (const FlashCase& c : cases) {
      const Prepared pr = prepare(t, c, rng);
      for (const KernelTable* table : available_kernel_tables()) {
        SCOPED_TRACE(describe(*table, t, c));
        const std::vector<float> batch = run(*table, two, pr, c.pos0, c.n_tokens, pr.q.data());
        const int64_t stride = int64_t{c.n_head} * c.head_dim;
        for (int64_t i = 0; i < c.n_tokens; ++i) {
          const float* qi = pr.q.data() + i * stride;
          const std::vector<float> alone1 = run(*table, one, pr, c.pos0 + i, 1, qi);
          const std::vector<float> alone2 = run(*table, two, pr, c.pos0 + i, 1, qi);
          EXPECT_EQ(0, std::memcmp(alone1.data(), batch.data() + i * stride, stride * sizeof(float))) << "token " << i;
          EXPECT_EQ(0, std::memcmp(alone2.data(), alone1.data(), stride * sizeof(float))) << "token " << i;
        }
      }
    }
  }
}

// SIMD tables against the scalar reference (the parity the other kernels have).
TEST(FlashAttention, SimdTablesAgreeWithScalar) {
  std::mt19937 rng(9);
  ThreadPool pool(2);
  const auto tables = available_kernel_tables();
  for (const KvDTypes& t : kTypePairs) {
    for (const FlashCase& c : kCases) {
      if (!type_fits(t, c.head_dim)) continue;
      const Prepared pr = prepare(t, c, rng);
      const std::vector<float> ref = run(*tables[0], pool, pr, c.pos0, c.n_tokens, pr.q.data());
      for (size_t ti = 1; ti < tables.size(); ++ti) {
        SCOPED_TRACE(describe(*tables[ti], t, c));
        const std::vector<float> got = run(*tables[ti], pool, pr, c.pos0, c.n_tokens, pr.q.data());
        double max_err = 0;
        for (size_t i = 0; i < got.size(); ++i) max_err = std::max(max_err, double(std::fabs(got[i] - ref[i])));
        EXPECT_LE(max_err, 2e-5);
      }
    }
  }
}

// The cache writes: q4_0 as ggml's reference quantizer (d = the signed value of largest
// magnitude / -8, q = min(15, trunc(x / d + 8.5))), checked on hand-picked values.
TEST(FlashAttention, Q4_0CacheRowsFollowGgmlsQuantizer) {
  float x[32];
  for (int i = 0; i < 32; ++i) x[i] = 0.25f * (i - 12);  // largest magnitude: 19 * 0.25 = 4.75 (positive)
  std::byte blk[18];
  quantize_row_q4_0_kv(x, blk, 32);
  uint16_t d_bits;
  std::memcpy(&d_bits, blk, 2);
  const float d = fp16_to_f32(d_bits);
  EXPECT_EQ(d, fp16_to_f32(f32_to_fp16(4.75f / -8.0f)));
  const float id = 1.0f / (4.75f / -8.0f);
  for (int i = 0; i < 16; ++i) {
    const uint8_t b = static_cast<uint8_t>(blk[2 + i]);
    EXPECT_EQ(b & 15, std::min(15, int(int8_t(x[i] * id + 8.5f)))) << i;
    EXPECT_EQ(b >> 4, std::min(15, int(int8_t(x[i + 16] * id + 8.5f)))) << i + 16;
  }
}

}  // namespace
}  // namespace lumen::kernels
