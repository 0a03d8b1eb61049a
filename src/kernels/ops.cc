// The op API of ops.h except attention (attention.cc): dispatch through the KernelTable
// and, for matmul, the split of work over the thread pool.
#include "kernels/ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

#include "base/check.h"
#include "base/fp16.h"
#include "kernels/kernel_table.h"
#include "kernels/quant_blocks.h"
#include "kernels/type_table.h"

namespace lumen::kernels {
namespace {

// Matmul work split. The output rows of all the weights of one call (a fused matmul: q, k
// and v, or gate and up, share their input) are cut into units of 16 rows (or of one panel)
// which the pool's threads share out.
//
//   decode (few activation rows): each thread starts on its own contiguous range of units
//     (ThreadPool::for_ranges) and claims 1 to kDecodeMaxClaimGrains grains of
//     kDecodeGrainBytes of weights at a time (ops.h; a grain divided by the number of
//     activation rows, up to kGrainMaxCols, so that it is about as much work at 9 columns
//     as at 1); a thread that finishes early steals grains from the back of the other's
//     range. Every weight byte is streamed once from memory by one thread, each thread's
//     stream is one run of memory (the prefetchers need a while to ramp up on a new one),
//     and the threads end within one claim of each other, even when one of them is
//     preempted.
//   prefill (panel path): a chunk is one panel of rows: the thread packs it into its own
//     scratch and sweeps every activation row of the batch against it.
//   interleaved weights (a copy made at load, kernel_table.h): decode as above for few
//     activation rows, up to a speculative verify of 16 proposals (two threads that take
//     turns on small chunks stream the weights slower than two contiguous runs do). For
//     many, a chunk is a few consecutive groups (up to kInterleavedChunkGroups, fewer when
//     there would be too few chunks to share out) that meet the whole batch: the
//     activations stream from L3 once per chunk, and the kernels see several groups at once
//     (the AVX2 q4_0 tile takes two). No packing: the copy is already in the kernels' layout.
//   fallback tiles (tables without a panel path): ranges as in decode; inside, kRowTile
//     weight rows x kColTile activation rows, so a weight tile stays in L1/L2 while it meets
//     the whole batch.
constexpr int64_t kRowTile = 16;
constexpr int64_t kColTile = 64;
constexpr int64_t kRowGroup = 16;
// Interleaved weights: from this many activation rows on, chunks of up to
// kInterleavedChunkGroups groups (above), below it decode-sized ranges: at 8-17 columns
// the ranges take 10-25% less time than the chunks on qwen2.5-0.5b Q4_0 and llama-3.2-1b
// Q4_K_M (docs/perf.md, "The verify step's dispatch").
constexpr int64_t kInterleavedGroupChunkCols = 18;
constexpr int64_t kGrainMaxCols = 16;
constexpr int64_t kInterleavedChunkGroups = 4;

constexpr int kMaxRopeDim = 1024;

constexpr size_t kScratchAlign = 64;
size_t align_up(size_t n) { return (n + kScratchAlign - 1) / kScratchAlign * kScratchAlign; }
std::byte* align_ptr(std::byte* p) {
  return reinterpret_cast<std::byte*>((reinterpret_cast<uintptr_t>(p) + kScratchAlign - 1) / kScratchAlign * kScratchAlign);
}

// Multiply-adds below which a matmul is not worth another thread.
constexpr double kMinMacsPerThread = 256 * 1024;

bool use_panels(const MatmulKernels& mk, int64_t n_tokens) {
  return mk.panel.rows > 0 && n_tokens >= mk.panel.min_cols;
}

// The kernels' interleaved path if w has a copy in their layout, else null.
const InterleavedKernels* interleaved_for(const MatmulKernels& mk, const TensorView& w) {
  const InterleavedKernels& ik = mk.interleaved;
  if (w.interleaved == nullptr || ik.layout == nullptr || w.interleaved_layout == nullptr) return nullptr;
  return std::strcmp(ik.layout, w.interleaved_layout) == 0 ? &ik : nullptr;
}

// Scratch of one matmul call: [act rows][side rows][one panel per thread], each aligned;
// the interleaved path needs [act rows][its side rows]: covered by the larger of the two.
size_t scratch_bytes_for(const MatmulKernels& mk, int64_t n_in, int64_t n_tokens, int n_threads) {
  size_t bytes = 3 * kScratchAlign;
  if (mk.quantize_act) bytes += align_up(static_cast<size_t>(n_tokens) * row_bytes(mk.act_dtype, n_in));
  size_t extra = 0;
  if (use_panels(mk, n_tokens)) {
    extra = align_up(static_cast<size_t>(n_tokens) * mk.panel.side_bytes(n_in));
    extra += static_cast<size_t>(n_threads) * align_up(mk.panel.panel_bytes(n_in));
  }
  if (mk.interleaved.layout != nullptr)
    extra = std::max(extra, align_up(static_cast<size_t>(n_tokens) * mk.interleaved.side_bytes(n_in)));
  return bytes + extra;
}

// How matmul_fused shares one call's output rows out: units of unit_rows rows (a panel, an
// interleaved group, or kRowGroup rows), the targets' back to back (target ti has units
// [unit_begin[ti], unit_begin[ti + 1])), over n_active threads, as ranges (decode) or
// chunks (prefill; see the comment at the top).
struct RowPlan {
  const MatmulKernels* mk = nullptr;
  const InterleavedKernels* ik = nullptr;  // the interleaved copies, if every target has one
  bool panels = false;
  bool ranged = false;
  int n_active = 1;
  int64_t n_in = 0;
  int64_t n_out_total = 0;
  int64_t unit_rows = 0;
  int64_t unit_begin[kMaxFusedTargets + 1] = {};
  int64_t n_units() const { return unit_begin[kMaxFusedTargets]; }
};

RowPlan plan_rows(const KernelTable& k, const ThreadPool& pool, std::span<const MatmulTarget> targets,
                  int64_t n_tokens) {
  LUMEN_CHECK(!targets.empty() && targets.size() <= kMaxFusedTargets);
  RowPlan pl;
  const TensorView& w0 = *targets[0].w;
  pl.mk = find_matmul_kernels(k, w0.dtype);
  LUMEN_CHECK_MSG(pl.mk != nullptr, "matmul: unsupported weight dtype");
  pl.n_in = w0.ne[0];
  for (const MatmulTarget& t : targets) {
    LUMEN_CHECK(t.w->dtype == w0.dtype && t.w->ne[0] == pl.n_in);
    pl.n_out_total += t.w->n_rows();
  }
  LUMEN_DCHECK(pl.n_in % dtype_info(w0.dtype).block_size == 0);
  // The interleaved copies when every target has one in these kernels' layout (the model
  // makes them for all matrices of a dtype or none).
  pl.ik = interleaved_for(*pl.mk, w0);
  for (const MatmulTarget& t : targets)
    if (interleaved_for(*pl.mk, *t.w) != pl.ik) pl.ik = nullptr;
  pl.panels = pl.ik == nullptr && use_panels(*pl.mk, n_tokens);
  pl.ranged = !pl.panels && !(pl.ik != nullptr && n_tokens >= kInterleavedGroupChunkCols);
  const double macs = static_cast<double>(pl.n_out_total) * pl.n_in * std::max<int64_t>(n_tokens, 1);
  pl.n_active = pool.threads_for(macs, kMinMacsPerThread);
  pl.unit_rows = pl.panels ? pl.mk->panel.rows : pl.ik != nullptr ? pl.ik->rows : kRowGroup;
  for (size_t i = 0; i < kMaxFusedTargets; ++i) {
    const int64_t n_rows = i < targets.size() ? targets[i].w->n_rows() : 0;
    pl.unit_begin[i + 1] = pl.unit_begin[i] + (n_rows + pl.unit_rows - 1) / pl.unit_rows;
  }
  return pl;
}

// What a worker of matmul_warm reads: its range's first bytes, target by target.
struct WarmRanges {
  const std::byte* base[kMaxFusedTargets];  // a target's first unit
  size_t unit_bytes[kMaxFusedTargets];
  size_t target_bytes[kMaxFusedTargets];    // all of it (the last unit may be short)
  int64_t unit_begin[kMaxFusedTargets + 1];
  int n_active;
};

// Calls fn(target, offset, n_bytes) for the runs of weight bytes worker thread_idx reads:
// the start of its range (ThreadPool::range_begin), target by target, kMatmulWarmBytes in
// all at most; false as soon as fn does.
template <typename Fn>
void for_warm_runs(const WarmRanges& wr, int thread_idx, Fn&& fn) {
  const int64_t n_units = wr.unit_begin[kMaxFusedTargets];
  int64_t u = ThreadPool::range_begin(n_units, wr.n_active, thread_idx);
  const int64_t u_end = ThreadPool::range_begin(n_units, wr.n_active, thread_idx + 1);
  size_t budget = kMatmulWarmBytes;
  for (size_t ti = 0; ti < kMaxFusedTargets && u < u_end && budget > 0; ++ti) {
    if (u >= wr.unit_begin[ti + 1]) continue;
    const size_t off = static_cast<size_t>(u - wr.unit_begin[ti]) * wr.unit_bytes[ti];
    const size_t end = std::min(wr.target_bytes[ti],
                                static_cast<size_t>(std::min(u_end, wr.unit_begin[ti + 1]) - wr.unit_begin[ti]) *
                                    wr.unit_bytes[ti]);
    if (off >= end) break;
    const size_t n = std::min(budget, end - off);
    if (!fn(ti, off, n)) return;
    budget -= n;
    u = wr.unit_begin[ti + 1];
  }
}

void warm_ranges(const WarmRanges& wr, int thread_idx, const ThreadPool::BackgroundStop& stop) {
  uint64_t sink = 0;
  for_warm_runs(wr, thread_idx, [&](size_t ti, size_t off, size_t n) {
    // One load per cache line, in address order (the out-of-order core keeps a dozen in
    // flight and the L2 streamer joins in); a look at `stop` every 1 KiB.
    const std::byte* p = wr.base[ti] + off;
    for (size_t i = 0; i < n; i += 64) {
      if (i % 1024 == 0 && stop()) return false;
      uint64_t v;
      std::memcpy(&v, p + i, sizeof(v));
      sink ^= v;
    }
    return true;
  });
  asm volatile("" : : "r"(sink));
}

// matmul_warm's plan; false where it does nothing.
bool plan_warm(const KernelTable& k, const ThreadPool& pool, std::span<const MatmulTarget> targets, int64_t n_tokens,
               WarmRanges* wr) {
  const RowPlan pl = plan_rows(k, pool, targets, n_tokens);
  if (!pl.ranged || pl.n_active <= 1) return false;
  *wr = WarmRanges{};
  for (size_t i = 0; i <= kMaxFusedTargets; ++i) wr->unit_begin[i] = pl.unit_begin[i];
  wr->n_active = pl.n_active;
  for (size_t i = 0; i < targets.size(); ++i) {
    const TensorView& w = *targets[i].w;
    wr->base[i] = pl.ik != nullptr ? w.interleaved : w.data;
    wr->unit_bytes[i] = pl.ik != nullptr ? pl.ik->group_bytes(pl.n_in) : pl.unit_rows * w.row_stride_bytes();
    wr->target_bytes[i] = pl.ik != nullptr ? w.interleaved_n_bytes : w.n_rows() * w.row_stride_bytes();
  }
  return true;
}

}  // namespace

void matmul_warm(const KernelTable& k, ThreadPool& pool, std::span<const MatmulTarget> targets, int64_t n_tokens) {
  WarmRanges wr;
  if (plan_warm(k, pool, targets, n_tokens, &wr)) pool.start_background(wr.n_active, &warm_ranges, wr);
}

std::vector<MatmulWarmRun> matmul_warm_runs(const KernelTable& k, const ThreadPool& pool,
                                            std::span<const MatmulTarget> targets, int64_t n_tokens, int thread_idx) {
  std::vector<MatmulWarmRun> runs;
  WarmRanges wr;
  if (thread_idx < 1 || !plan_warm(k, pool, targets, n_tokens, &wr) || thread_idx >= wr.n_active) return runs;
  for_warm_runs(wr, thread_idx, [&](size_t ti, size_t off, size_t n) {
    runs.push_back({ti, off, n});
    return true;
  });
  return runs;
}

void matmul_warm(const KernelTable& k, ThreadPool& pool, const TensorView& w, int64_t n_tokens) {
  const MatmulTarget target{&w, nullptr};
  matmul_warm(k, pool, std::span<const MatmulTarget>(&target, 1), n_tokens);
}

bool matmul_supports(DType w_dtype) {
  const TypeRow* row = find_type_row(w_dtype);
  return row != nullptr && row_can_multiply(*row);
}

std::string matmul_type_names() { return type_names(&row_can_multiply); }

size_t matmul_scratch_bytes(DType w_dtype, int64_t n_in, int64_t n_tokens, int n_threads) {
  size_t bytes = 0;
  for (const KernelTable* t : available_kernel_tables()) {
    const MatmulKernels* mk = find_matmul_kernels(*t, w_dtype);
    LUMEN_CHECK(mk != nullptr);
    // Monotonic in n_tokens, so this covers every smaller batch too.
    bytes = std::max(bytes, scratch_bytes_for(*mk, n_in, n_tokens, n_threads));
  }
  return bytes;
}

void matmul(const KernelTable& k, ThreadPool& pool, const TensorView& w, const float* x,
            int64_t n_tokens, float* y, std::byte* scratch) {
  const MatmulTarget target{&w, y};
  matmul_fused(k, pool, std::span<const MatmulTarget>(&target, 1), x, n_tokens, scratch);
}

void matmul_fused(const KernelTable& k, ThreadPool& pool, std::span<const MatmulTarget> targets,
                  const float* x, int64_t n_tokens, std::byte* scratch) {
  const RowPlan pl = plan_rows(k, pool, targets, n_tokens);
  if (n_tokens <= 0 || pl.n_out_total <= 0) return;
  const TensorView& w0 = *targets[0].w;
  const MatmulKernels* mk = pl.mk;
  const InterleavedKernels* ik = pl.ik;
  const bool panels = pl.panels;
  const int64_t n_in = pl.n_in;
  const int n_active = pl.n_active;

  // 1. Convert every activation row once to the dot-product type (Q8_0 / Q8_K / F16 /
  //    BF16), plus the panel side data, so the weights never have to be touched per token.
  std::byte* base = align_ptr(scratch);
  const std::byte* act = reinterpret_cast<const std::byte*>(x);
  size_t act_stride = static_cast<size_t>(n_in) * sizeof(float);
  if (mk->quantize_act) {
    LUMEN_DCHECK(scratch != nullptr);
    act_stride = row_bytes(mk->act_dtype, n_in);
    act = base;
    base = align_ptr(base + n_tokens * act_stride);
  }
  std::byte* side = base;
  size_t side_stride = 0;
  PrepareSideFn prepare_side = nullptr;
  if (ik != nullptr) {
    side_stride = ik->side_bytes(n_in);
    prepare_side = ik->prepare_side;
  } else if (panels) {
    side_stride = mk->panel.side_bytes(n_in);
    prepare_side = mk->panel.prepare_side;
  }
  base = align_ptr(base + n_tokens * side_stride);
  std::byte* panel_scratch = base;
  const size_t panel_stride = panels ? align_up(mk->panel.panel_bytes(n_in)) : 0;
  if (mk->quantize_act || side_stride > 0) {
    auto prepare_rows = [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        std::byte* xq = const_cast<std::byte*>(act) + t * act_stride;
        if (mk->quantize_act) mk->quantize_act(x + t * n_in, xq, n_in);
        if (side_stride > 0) prepare_side(xq, n_in, side + t * side_stride);
      }
    };
    if (n_tokens < 4 * pool.n_threads() || n_active == 1) {
      prepare_rows(0, n_tokens);
    } else {
      const int64_t per_chunk = (n_tokens + 4 * n_active - 1) / (4 * n_active);
      pool.for_chunks(n_active, (n_tokens + per_chunk - 1) / per_chunk, [&](int64_t c, int) {
        prepare_rows(c * per_chunk, std::min(n_tokens, (c + 1) * per_chunk));
      });
    }
  }

  // 2. y = act * W^T over output rows of all targets: rows [row_begin, row_end) of target ti.
  auto run_rows = [&](size_t ti, int64_t row_begin, int64_t row_end, int thread_idx) {
    const TensorView& w = *targets[ti].w;
    float* y = targets[ti].y;
    const int64_t n_out = w.n_rows();
    const size_t w_stride = w.row_stride_bytes();
    if (ik != nullptr) {
      const size_t group_bytes = ik->group_bytes(n_in);
      LUMEN_DCHECK(row_begin % ik->rows == 0);
      ik->gemm(n_in, w.interleaved + (row_begin / ik->rows) * group_bytes, row_end - row_begin, act, act_stride,
               side, side_stride, n_tokens, y + row_begin, n_out);
      return;
    }
    if (panels) {
      std::byte* panel = panel_scratch + thread_idx * panel_stride;
      const int64_t n_rows = row_end - row_begin;
      mk->panel.pack(n_in, w.data + row_begin * w_stride, w_stride, n_rows, panel);
      mk->panel.gemm(n_in, panel, n_rows, act, act_stride, side, side_stride, n_tokens, y + row_begin, n_out);
      return;
    }
    for (int64_t r0 = row_begin; r0 < row_end; r0 += kRowTile) {
      const int64_t n_rows = std::min(kRowTile, row_end - r0);
      for (int64_t t0 = 0; t0 < n_tokens; t0 += kColTile) {
        const int64_t n_cols = std::min(kColTile, n_tokens - t0);
        mk->gemm(n_in, w.data + r0 * w_stride, w_stride, n_rows, act + t0 * act_stride, act_stride, n_cols,
                 y + t0 * n_out + r0, n_out);
      }
    }
  };

  // Units (RowPlan): target ti has units [unit_begin[ti], unit_begin[ti + 1]).
  const int64_t unit_rows = pl.unit_rows;
  const int64_t* unit_begin = pl.unit_begin;
  const int64_t n_units = pl.n_units();
  auto run_units = [&](int64_t u0, int64_t u1, int thread_idx) {
    for (size_t ti = 0; ti < targets.size(); ++ti) {
      const int64_t b = std::max(u0, unit_begin[ti]), e = std::min(u1, unit_begin[ti + 1]);
      if (b >= e) continue;
      const int64_t n_out = targets[ti].w->n_rows();
      run_rows(ti, (b - unit_begin[ti]) * unit_rows, std::min(n_out, (e - unit_begin[ti]) * unit_rows), thread_idx);
    }
  };
  if (!pl.ranged) {
    // Many activation rows: one panel, or a few interleaved groups (whole pairs; at least
    // 4 chunks per thread, so that the threads end close together), per chunk, meeting
    // the whole batch while they are in cache.
    int64_t chunk_units = 1;
    if (!panels) {
      chunk_units = std::clamp<int64_t>(n_units / (4 * static_cast<int64_t>(n_active)), 1, kInterleavedChunkGroups);
      if (chunk_units > 1) chunk_units &= ~int64_t{1};
    }
    pool.for_chunks(n_active, (n_units + chunk_units - 1) / chunk_units, [&](int64_t chunk, int thread_idx) {
      run_units(chunk * chunk_units, std::min(n_units, (chunk + 1) * chunk_units), thread_idx);
    });
    return;
  }
  // Few activation rows: a contiguous range of units per thread, claimed 1 to
  // kDecodeMaxClaimGrains grains at a time, the ends stolen a grain at a time by whichever
  // thread finishes first.
  const size_t unit_bytes = static_cast<size_t>(unit_rows) * w0.row_stride_bytes();
  const int64_t grain_bytes = static_cast<int64_t>(kDecodeGrainBytes) / std::min(n_tokens, kGrainMaxCols);
  const int64_t grain = std::max<int64_t>(1, grain_bytes / static_cast<int64_t>(unit_bytes));
  pool.for_ranges(n_active, n_units, grain, kDecodeMaxClaimGrains * grain, run_units);
}

void get_rows(const TensorView& w, const int32_t* ids, int64_t n_ids, float* out) {
  const int64_t n = w.ne[0];
  for (int64_t i = 0; i < n_ids; ++i) {
    LUMEN_CHECK(ids[i] >= 0 && ids[i] < w.n_rows());
    dequantize_row(w.dtype, w.row(ids[i]), out + i * n, n);
  }
}

void dequantize_row(DType dtype, const std::byte* src, float* dst, int64_t n) {
  const TypeRow* row = find_type_row(dtype);
  LUMEN_CHECK_MSG(row != nullptr && row->dequantize != nullptr, "dequantize_row: unsupported dtype");
  row->dequantize(src, dst, n);
}

void rms_norm(const KernelTable& k, const float* x, const float* weight, int64_t n_rows,
              int64_t n, float eps, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) k.rms_norm_row(x + r * n, weight, n, eps, out + r * n);
}

// RoPE pair layouts for r = rotated_dims() (= head_dim d unless partial); pair i rotates by
// angle_i = pos * theta^(-2i/r), dims [r, d) are left as they are:
//
//   kInterleaved:  [x0 x1][x2 x3] ... [x(r-2) x(r-1)] | x(r) .. x(d-1)
//                  pair i = (x[2i], x[2i+1])
//   kNeox:         [x0 x1 ... x(r/2-1)][x(r/2) ... x(r-1)] | x(r) .. x(d-1)
//                  pair i = (x[i], x[i + r/2])
//
//   (a, b) -> (a cos - b sin, a sin + b cos)
//
// The angles follow ggml's rope cache exactly: theta_i is built by repeated f32
// multiplication (theta_0 = pos, theta_{i+1} = theta_i * powf(base, -2/r)), divided by
// the frequency factor, times freq_scale, then cosf / sinf in f32, each times attn_factor.
void rope_angles(const RopeParams& p, const int32_t* pos, int64_t n_tokens, float* cos_out, float* sin_out) {
  const int32_t r = p.rotated_dims();
  LUMEN_CHECK(r > 0 && r % 2 == 0 && r <= p.head_dim && r <= kMaxRopeDim);
  const int32_t half = r / 2;
  const float theta_scale = std::pow(p.theta, -2.0f / static_cast<float>(r));
  float mscale = p.attn_factor;
  if (p.ext_factor != 0.0f) mscale *= 1.0f + 0.1f * std::log(1.0f / p.freq_scale);
  for (int64_t t = 0; t < n_tokens; ++t) {
    float theta = static_cast<float>(pos[t]);
    for (int32_t i = 0; i < half; ++i) {
      const float ff = p.freq_factors ? p.freq_factors[i] : 1.0f;
      const float extrap = theta / ff;
      float angle = p.freq_scale * extrap;
      if (p.ext_factor != 0.0f) {  // YaRN: ramp 1 for the fast pairs (i < corr_low), 0 past corr_high
        const float y = (static_cast<float>(i) - p.corr_low) / std::max(0.001f, p.corr_high - p.corr_low);
        const float mix = (1.0f - std::min(1.0f, std::max(0.0f, y))) * p.ext_factor;
        angle = angle * (1.0f - mix) + extrap * mix;
      }
      cos_out[t * half + i] = std::cos(angle) * mscale;
      sin_out[t * half + i] = std::sin(angle) * mscale;
      theta *= theta_scale;
    }
  }
}

void rope_rotate(const RopeParams& p, const float* cos_t, const float* sin_t, float* x, int64_t n_tokens,
                 int32_t n_heads) {
  const int32_t d = p.head_dim;
  const int32_t half = p.rotated_dims() / 2;
  const int32_t stride = p.layout == RopeLayout::kInterleaved ? 2 : 1;
  const int32_t offset = p.layout == RopeLayout::kInterleaved ? 1 : half;
  for (int64_t t = 0; t < n_tokens; ++t) {
    const float* c = cos_t + t * half;
    const float* s = sin_t + t * half;
    for (int32_t h = 0; h < n_heads; ++h) {
      float* v = x + (t * n_heads + h) * d;
      for (int32_t i = 0; i < half; ++i) {
        float* a = v + i * stride;
        float* b = a + offset;
        const float x0 = *a, x1 = *b;
        *a = x0 * c[i] - x1 * s[i];
        *b = x0 * s[i] + x1 * c[i];
      }
    }
  }
}

void rope(const KernelTable& k, const RopeParams& p, float* x, int64_t n_tokens,
          int32_t n_heads, const int32_t* pos) {
  float cos_t[kMaxRopeDim / 2];
  float sin_t[kMaxRopeDim / 2];
  for (int64_t t = 0; t < n_tokens; ++t) {
    rope_angles(p, pos + t, 1, cos_t, sin_t);
    rope_rotate(p, cos_t, sin_t, x + t * n_heads * p.head_dim, 1, n_heads);
  }
}

void silu_mul(const KernelTable& k, float* gate, const float* up, int64_t n) {
  k.silu_mul(gate, up, n);
}

void gelu_mul(const KernelTable& k, float* gate, const float* up, int64_t n) { k.gelu_mul(gate, up, n); }

void layer_norm(const KernelTable& k, const float* x, const float* weight, const float* bias, int64_t n_rows,
                int64_t n, float eps, float* out) {
  for (int64_t r = 0; r < n_rows; ++r) k.layer_norm_row(x + r * n, weight, bias, n, eps, out + r * n);
}

void softcap(const KernelTable& k, float* s, int64_t n, float cap) {
  if (cap > 0.0f) k.softcap(s, n, cap);
}

void scale_in_place(float* x, int64_t n, float scale) {
  for (int64_t i = 0; i < n; ++i) x[i] *= scale;
}

std::vector<float> hadamard_signs(int64_t head_dim) {
  std::mt19937 rng(0x6c756d65u);  // std::mt19937's sequence is fixed by the standard
  std::vector<float> signs(static_cast<size_t>(head_dim));
  for (float& s : signs) s = (rng() >> 31) != 0 ? -1.0f : 1.0f;
  return signs;
}

void hadamard_rotate(float* x, int64_t n_rows, int64_t head_dim, const float* signs) {
  const int64_t block = head_dim & -head_dim;  // the largest power of two dividing head_dim
  const float norm = 1.0f / std::sqrt(static_cast<float>(block));
  for (int64_t r = 0; r < n_rows; ++r) {
    float* row = x + r * head_dim;
    for (int64_t i = 0; i < head_dim; ++i) row[i] *= signs[i];
    for (int64_t b0 = 0; b0 < head_dim; b0 += block) {
      float* v = row + b0;
      // Fast Walsh-Hadamard transform: log2(B) butterfly passes.
      for (int64_t h = 1; h < block; h *= 2)
        for (int64_t i = 0; i < block; i += 2 * h)
          for (int64_t j = i; j < i + h; ++j) {
            const float a = v[j], c = v[j + h];
            v[j] = a + c;
            v[j + h] = a - c;
          }
      for (int64_t i = 0; i < block; ++i) v[i] *= norm;
    }
  }
}

void add_in_place(const KernelTable& k, float* x, const float* y, int64_t n) { k.add(x, y, n); }

void add_bias(float* x, const float* bias, int64_t n_rows, int64_t n) {
  for (int64_t r = 0; r < n_rows; ++r)
    for (int64_t i = 0; i < n; ++i) x[r * n + i] += bias[i];
}

// The cache holds what ggml's cache holds: K (after RoPE) and V converted as ggml-cpu's
// from_float of the cache type converts them: f16 / bf16 rounded to nearest even, q8_0 by
// the activation quantizer (the same function on x86), q4_0 by ggml's reference quantizer;
// f32 exact.
void kv_store(const KernelTable& kt, const PagedKvView& kv, int64_t pos0, int64_t n_tokens, const float* k,
              const float* v) {
  const int32_t hd = kv.head_dim;
  auto store = [&](DType dtype, const float* x, std::byte* dst) {
    switch (dtype) {
      case DType::kF32: std::memcpy(dst, x, hd * sizeof(float)); return;
      case DType::kF16: kt.f32_to_f16(x, reinterpret_cast<uint16_t*>(dst), hd); return;
      case DType::kQ4_0: quantize_row_q4_0_kv(x, dst, hd); return;
      default: {
        const MatmulKernels* mk = find_matmul_kernels(kt, dtype);
        LUMEN_CHECK(kv_cache_supports(dtype) && mk != nullptr && mk->act_dtype == dtype && mk->quantize_act);
        mk->quantize_act(x, dst, hd);
      }
    }
  };
  for (int64_t t = 0; t < n_tokens; ++t) {
    const int64_t pos = pos0 + t;
    LUMEN_DCHECK(pos / kv.block_size < static_cast<int64_t>(kv.block_table.size()));
    for (int32_t h = 0; h < kv.n_kv_head; ++h) {
      store(kv.k_dtype, k + (t * kv.n_kv_head + h) * hd, kv.k_addr(pos, h));
      if (v != nullptr) store(kv.v_dtype, v + (t * kv.n_kv_head + h) * hd, kv.v_addr(pos, h));  // null: K-only
    }
  }
}

// ggml's quantize_row_q4_0_ref: per 32 values, m = the value of largest magnitude (its
// sign kept), d = m / -8, q = min(15, (int8)(x / d + 8.5)).
void quantize_row_q4_0_kv(const float* x, std::byte* y, int64_t n) {
  constexpr int kBlock = 32;
  LUMEN_CHECK(n % kBlock == 0);
  for (int64_t b = 0; b < n / kBlock; ++b) {
    const float* xb = x + b * kBlock;
    float amax = 0.0f, m = 0.0f;
    for (int i = 0; i < kBlock; ++i) {
      if (std::fabs(xb[i]) > amax) {
        amax = std::fabs(xb[i]);
        m = xb[i];
      }
    }
    const float d = m / -8.0f;
    const float id = d != 0.0f ? 1.0f / d : 0.0f;
    BlockQ4_0 blk{};
    blk.d_f16 = f32_to_fp16(d);
    for (int i = 0; i < kBlock / 2; ++i) {
      const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(xb[i] * id + 8.5f)));
      const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(xb[i + kBlock / 2] * id + 8.5f)));
      blk.qs[i] = static_cast<uint8_t>(q0 | (q1 << 4));
    }
    std::memcpy(y + b * sizeof(BlockQ4_0), &blk, sizeof(BlockQ4_0));
  }
}

void kv_move(const KernelTable& kt, const PagedKvView& src, const PagedKvView& dst, int64_t src_pos0,
             int64_t dst_pos0, int64_t n_tokens, const RopeParams* rope, int32_t delta) {
  LUMEN_CHECK(src.k_dtype == dst.k_dtype && src.v_dtype == dst.v_dtype);
  LUMEN_CHECK(src.head_dim == dst.head_dim && src.n_kv_head == dst.n_kv_head && src.head_dim <= kMaxRopeDim);
  const int32_t hd = src.head_dim;
  const size_t k_bytes = src.k_row_bytes(), v_bytes = src.v_row_bytes();
  const bool rotate = rope != nullptr && delta != 0;
  // Only an f16 / f32 K can be rotated in place (a quantized K recomputes instead).
  LUMEN_CHECK(!rotate || src.k_dtype == DType::kF16 || src.k_dtype == DType::kF32);
  RopeParams unit;
  float cos_t[kMaxRopeDim / 2];
  float sin_t[kMaxRopeDim / 2];
  if (rotate) {
    unit = *rope;
    unit.attn_factor = 1.0f;  // a pure rotation: the stored rows already carry the factor
    LUMEN_CHECK(unit.head_dim == hd);
    rope_angles(unit, &delta, 1, cos_t, sin_t);
  }
  float row[kMaxRopeDim];
  for (int64_t t = 0; t < n_tokens; ++t) {
    for (int32_t h = 0; h < src.n_kv_head; ++h) {
      // (src and dst may be the same block: a row copied onto itself is left as it is)
      std::memmove(dst.v_addr(dst_pos0 + t, h), src.v_addr(src_pos0 + t, h), v_bytes);
      std::byte* to = dst.k_addr(dst_pos0 + t, h);
      const std::byte* from = src.k_addr(src_pos0 + t, h);
      if (!rotate) {
        std::memmove(to, from, k_bytes);
        continue;
      }
      if (src.k_dtype == DType::kF32) {
        std::memcpy(row, from, k_bytes);
      } else {
        for (int32_t i = 0; i < hd; ++i) row[i] = fp16_to_f32(reinterpret_cast<const uint16_t*>(from)[i]);
      }
      rope_rotate(unit, cos_t, sin_t, row, 1, 1);
      if (src.k_dtype == DType::kF32) {
        std::memcpy(to, row, k_bytes);
      } else {
        kt.f32_to_f16(row, reinterpret_cast<uint16_t*>(to), hd);
      }
    }
  }
}

}  // namespace lumen::kernels
