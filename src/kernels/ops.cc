// The op API of ops.h except attention (attention.cc): dispatch through the KernelTable
// and, for matmul, the split of work over the thread pool.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/kernels_ref.h"

namespace lumen::kernels {
namespace {

// Matmul tiling. Each thread owns a contiguous range of output rows (so each weight row is
// streamed from memory by exactly one thread, once per matmul). Inside it, tiles of
// kRowTile weight rows x kColTile activation rows: the weight tile (kRowTile rows, a few KiB
// to tens of KiB) stays in L1/L2 while it meets every activation row of the batch, which
// makes prefill read the weights once per layer whatever the number of tokens.
constexpr int64_t kRowTile = 16;
constexpr int64_t kColTile = 64;

constexpr int kMaxRopeDim = 1024;

}  // namespace

bool matmul_supports(DType w_dtype) {
  return find_matmul_kernels(reference_kernel_table(), w_dtype) != nullptr;
}

size_t matmul_scratch_bytes(DType w_dtype, int64_t n_in, int64_t n_tokens) {
  const MatmulKernels* mk = find_matmul_kernels(reference_kernel_table(), w_dtype);
  LUMEN_CHECK(mk != nullptr);
  if (!mk->quantize_act) return 0;
  return static_cast<size_t>(n_tokens) * row_bytes(mk->act_dtype, n_in);
}

// Multiply-adds below which a matmul is not worth another thread.
constexpr double kMinMacsPerThread = 256 * 1024;

void matmul(const KernelTable& k, ThreadPool& pool, const TensorView& w, const float* x,
            int64_t n_tokens, float* y, std::byte* scratch) {
  const MatmulKernels* mk = find_matmul_kernels(k, w.dtype);
  LUMEN_CHECK_MSG(mk != nullptr, "matmul: unsupported weight dtype");
  const int64_t n_in = w.ne[0];
  const int64_t n_out = w.n_rows();
  LUMEN_DCHECK(n_in % dtype_info(w.dtype).block_size == 0);
  if (n_tokens <= 0 || n_out <= 0) return;

  // 1. Convert every activation row once to the dot-product type (Q8_0 / Q8_K / F16 /
  //    BF16) so that the weights never have to be touched per token.
  const std::byte* act = reinterpret_cast<const std::byte*>(x);
  size_t act_stride = static_cast<size_t>(n_in) * sizeof(float);
  if (mk->quantize_act) {
    LUMEN_DCHECK(scratch != nullptr);
    LUMEN_DCHECK(reinterpret_cast<uintptr_t>(scratch) % alignof(float) == 0);
    act_stride = row_bytes(mk->act_dtype, n_in);
    auto quantize_rows = [&](int64_t begin, int64_t end, int) {
      for (int64_t t = begin; t < end; ++t)
        mk->quantize_act(x + t * n_in, scratch + t * act_stride, n_in);
    };
    if (n_tokens < 2 * pool.n_threads()) {
      quantize_rows(0, n_tokens, 0);
    } else {
      pool.parallel_for(n_tokens, quantize_rows);
    }
    act = scratch;
  }

  // 2. y = act * W^T, output rows split over the threads (tiny matrices stay on the
  //    calling thread: waking a worker costs more than they do).
  const size_t w_stride = w.row_stride_bytes();
  const int n_active = pool.threads_for(static_cast<double>(n_out) * n_in * n_tokens, kMinMacsPerThread);
  pool.parallel_for_on(n_active, n_out, [&](int64_t row_begin, int64_t row_end, int) {
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowTile) {
      const int64_t n_rows = std::min(kRowTile, row_end - r0);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kColTile) {
        const int64_t n_cols = std::min(kColTile, n_tokens - t0);
        mk->gemm(n_in, w.data + r0 * w_stride, w_stride, n_rows, act + t0 * act_stride,
                 act_stride, n_cols, y + t0 * n_out + r0, n_out);
      }
    }
  });
}

void get_rows(const TensorView& w, const int32_t* ids, int64_t n_ids, float* out) {
  const int64_t n = w.ne[0];
  for (int64_t i = 0; i < n_ids; ++i) {
    LUMEN_CHECK(ids[i] >= 0 && ids[i] < w.n_rows());
    dequantize_row(w.dtype, w.row(ids[i]), out + i * n, n);
  }
}

void dequantize_row(DType dtype, const std::byte* src, float* dst, int64_t n) {
  LUMEN_CHECK_MSG(ref::dequantize_row(dtype, src, dst, n), "dequantize_row: unsupported dtype");
}

void rms_norm(const KernelTable& k, const float* x, const float* weight, int64_t n_rows,
              int64_t n, float eps, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) k.rms_norm_row(x + r * n, weight, n, eps, out + r * n);
}

// RoPE pair layouts for head_dim d (pair i rotates by angle_i = pos * theta^(-2i/d)):
//
//   kInterleaved:  [x0 x1][x2 x3] ... [x(d-2) x(d-1)]      pair i = (x[2i], x[2i+1])
//   kNeox:         [x0 x1 ... x(d/2-1)][x(d/2) ... x(d-1)]  pair i = (x[i], x[i + d/2])
//
//   (a, b) -> (a cos - b sin, a sin + b cos)
//
// The angles follow ggml's rope cache exactly: theta_i is built by repeated f32
// multiplication (theta_0 = pos, theta_{i+1} = theta_i * powf(base, -2/d)), divided by
// the frequency factor, times freq_scale, then cosf / sinf in f32.
void rope(const KernelTable& k, const RopeParams& p, float* x, int64_t n_tokens,
          int32_t n_heads, const int32_t* pos) {
  const int32_t d = p.head_dim;
  LUMEN_CHECK(d > 0 && d % 2 == 0 && d <= kMaxRopeDim);
  const int32_t half = d / 2;
  const float theta_scale = std::pow(p.theta, -2.0f / static_cast<float>(d));
  float cos_t[kMaxRopeDim / 2];
  float sin_t[kMaxRopeDim / 2];
  for (int64_t t = 0; t < n_tokens; ++t) {
    float theta = static_cast<float>(pos[t]);
    for (int32_t i = 0; i < half; ++i) {
      const float ff = p.freq_factors ? p.freq_factors[i] : 1.0f;
      const float angle = p.freq_scale * (theta / ff);
      cos_t[i] = std::cos(angle);
      sin_t[i] = std::sin(angle);
      theta *= theta_scale;
    }
    for (int32_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * d;
      const int32_t stride = p.layout == RopeLayout::kInterleaved ? 2 : 1;
      const int32_t offset = p.layout == RopeLayout::kInterleaved ? 1 : half;
      for (int32_t i = 0; i < half; ++i) {
        float* a = v + i * stride;
        float* b = a + offset;
        const float x0 = *a, x1 = *b;
        *a = x0 * cos_t[i] - x1 * sin_t[i];
        *b = x0 * sin_t[i] + x1 * cos_t[i];
      }
    }
  }
}

void silu_mul(const KernelTable& k, float* gate, const float* up, int64_t n) {
  k.silu_mul(gate, up, n);
}

void add_in_place(const KernelTable& k, float* x, const float* y, int64_t n) { k.add(x, y, n); }

void add_bias(float* x, const float* bias, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bias[i];
}

// The cache holds what ggml's cache holds: K (after RoPE) and V rounded to nearest-even
// f16 (or exact f32).
void kv_store(const PagedKvView& kv, int64_t pos0, int64_t n_tokens, const float* k,
              const float* v) {
  LUMEN_CHECK(kv.dtype == DType::kF16 || kv.dtype == DType::kF32);
  const int32_t hd = kv.head_dim;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t pos = pos0 + t;
    LUMEN_DCHECK(pos / kv.block_size < static_cast<int64_t>(kv.block_table.size()));
    for (int32_t h = 0; h < kv.n_kv_head; ++h) {
      const float* ks = k + (t * kv.n_kv_head + h) * hd;
      const float* vs = v + (t * kv.n_kv_head + h) * hd;
      if (kv.dtype == DType::kF32) {
        std::memcpy(kv.k_addr(pos, h), ks, hd * sizeof(float));
        std::memcpy(kv.v_addr(pos, h), vs, hd * sizeof(float));
      } else {
        auto* kd = reinterpret_cast<uint16_t*>(kv.k_addr(pos, h));
        auto* vd = reinterpret_cast<uint16_t*>(kv.v_addr(pos, h));
        for (int32_t i = 0; i < hd; ++i) {
          kd[i] = f32_to_fp16(ks[i]);
          vd[i] = f32_to_fp16(vs[i]);
        }
      }
    }
  }
}

}  // namespace lumen::kernels
