// matmul_jobs (ops.h): many independent small matmuls in one parallel job.
//
//   jobs      0: gate_e3 [1 x 1024]   1: up_e3 [1 x 1024]   2: gate_e9 ...   (a decode step)
//   units     |0 1 2 .. 127|128 .. 255|256 ..          one interleaved group (or 16 rows) each
//   threads   thread 0 starts at unit 0, thread 1 at the middle; each claims 1-4 grains of
//             units (~128 KB of weights each) at a time from the front of its range and, when
//             its range is empty, steals a grain at a time from the back of the other's
//             (ThreadPool::for_ranges, ops.h)
//
// So a step with K experts has one dispatch for their gate and up rows and one for their
// down rows, not one per matrix, and a preempted thread holds back at most one claim. The
// activation rows of each job are converted once (a job with the same input as the one
// before it, e.g. an expert's up after its gate, reuses them). Each output row is computed
// by the same kernels as matmul() computes it (the interleaved tiles when the weight has a
// copy in the table's layout, else the plain gemm tiles), so the results are the same bits.
#include "kernels/matmul_jobs.h"

#include <algorithm>
#include <cstring>
#include <new>

#include "base/check.h"
#include "kernels/kernel_table.h"
#include "kernels/ops.h"
#include "kernels/type_table.h"

namespace lumen::kernels {
namespace {

constexpr int64_t kRowTile = 16;    // plain tiles: weight rows x
constexpr int64_t kColTile = 64;    //              activation rows
constexpr int64_t kUnitRows = 16;   // a unit without an interleaved copy
constexpr double kMinMacsPerThread = 256 * 1024;
constexpr size_t kAlign = 64;

size_t align_up(size_t n) { return (n + kAlign - 1) / kAlign * kAlign; }

// Where job j's activation rows are and which kernels read its weight.
struct JobPlan {
  const MatmulKernels* mk = nullptr;
  const InterleavedKernels* ik = nullptr;  // null: plain gemm tiles
  const std::byte* act = nullptr;          // [n_tokens][act_stride]
  size_t act_stride = 0;
  const std::byte* side = nullptr;         // [n_tokens][side_stride] (interleaved side data)
  size_t side_stride = 0;
  int64_t unit_begin = 0;                  // its first unit in the job's numbering
  int64_t unit_rows = 0;
  bool converts = false;                   // converts its rows (false: reuses the previous job's, or f32)
};

const InterleavedKernels* interleaved_for(const MatmulKernels& mk, const TensorView& w) {
  const InterleavedKernels& ik = mk.interleaved;
  if (w.interleaved == nullptr || ik.layout == nullptr || w.interleaved_layout == nullptr) return nullptr;
  return std::strcmp(ik.layout, w.interleaved_layout) == 0 ? &ik : nullptr;
}

// Rows [r0, r1) of job j.
void run_rows(const MatmulJob& job, const JobPlan& jp, int64_t r0, int64_t r1) {
  const TensorView& w = *job.w;
  const int64_t n_in = w.ne[0], n_out = w.n_rows(), n_tok = job.n_tokens;
  if (jp.ik != nullptr) {
    jp.ik->gemm(n_in, w.interleaved + (r0 / jp.ik->rows) * jp.ik->group_bytes(n_in), r1 - r0, jp.act, jp.act_stride,
                jp.side, jp.side_stride, n_tok, job.y + r0, n_out);
    return;
  }
  const size_t w_stride = w.row_stride_bytes();
  for (int64_t r = r0; r < r1; r += kRowTile) {
    const int64_t n_rows = std::min(kRowTile, r1 - r);
    for (int64_t t0 = 0; t0 < n_tok; t0 += kColTile)
      jp.mk->gemm(n_in, w.data + r * w_stride, w_stride, n_rows, jp.act + t0 * jp.act_stride, jp.act_stride,
                  std::min(kColTile, n_tok - t0), job.y + t0 * n_out + r, n_out);
  }
}

}  // namespace

size_t matmul_jobs_scratch_bytes(int64_t n_jobs, std::span<const MatmulJobRows> rows) {
  size_t bytes = align_up(static_cast<size_t>(n_jobs) * sizeof(JobPlan)) + kAlign;
  for (const MatmulJobRows& r : rows) {
    size_t per_row = 0;
    for (const KernelTable* t : available_kernel_tables()) {
      const MatmulKernels* mk = find_matmul_kernels(*t, r.w_dtype);
      LUMEN_CHECK(mk != nullptr);
      size_t b = mk->quantize_act ? row_bytes(mk->act_dtype, r.n_in) : 0;
      if (mk->interleaved.layout != nullptr) b += mk->interleaved.side_bytes(r.n_in);
      per_row = std::max(per_row, b);
    }
    // Each job's rows start aligned (act and side): 2 alignments per job at most.
    bytes += static_cast<size_t>(r.n_rows) * per_row + 2 * kAlign * static_cast<size_t>(n_jobs);
  }
  return bytes;
}

void matmul_jobs(const KernelTable& k, ThreadPool& pool, std::span<const MatmulJob> jobs, std::byte* scratch,
                 size_t scratch_bytes) {
  const int64_t n_jobs = static_cast<int64_t>(jobs.size());
  if (n_jobs == 0) return;
  std::byte* const end = scratch + scratch_bytes;
  std::byte* base = reinterpret_cast<std::byte*>(align_up(reinterpret_cast<uintptr_t>(scratch)));
  JobPlan* plan = reinterpret_cast<JobPlan*>(base);
  base += align_up(static_cast<size_t>(n_jobs) * sizeof(JobPlan));
  auto take = [&](size_t n) {
    std::byte* p = base;
    base += align_up(n);
    LUMEN_CHECK_MSG(base <= end, "matmul_jobs: scratch too small");
    return p;
  };

  // 1. Plan: kernels, activation rows (converted, or shared with the job before), units.
  int64_t n_units = 0;
  double macs = 0.0, weight_bytes = 0.0;
  for (int64_t j = 0; j < n_jobs; ++j) {
    const MatmulJob& job = jobs[j];
    JobPlan& jp = plan[j];
    new (&jp) JobPlan();
    const TensorView& w = *job.w;
    const int64_t n_in = w.ne[0];
    jp.mk = find_matmul_kernels(k, w.dtype);
    LUMEN_CHECK_MSG(jp.mk != nullptr, "matmul_jobs: unsupported weight dtype");
    LUMEN_DCHECK(n_in % dtype_info(w.dtype).block_size == 0);
    jp.ik = interleaved_for(*jp.mk, w);
    const JobPlan* prev = j > 0 ? &plan[j - 1] : nullptr;
    const bool same_input = prev != nullptr && jobs[j - 1].x == job.x && jobs[j - 1].n_tokens == job.n_tokens &&
                            jobs[j - 1].w->ne[0] == n_in && prev->mk == jp.mk && prev->ik == jp.ik;
    if (same_input) {
      jp.act = prev->act, jp.act_stride = prev->act_stride, jp.side = prev->side, jp.side_stride = prev->side_stride;
    } else {
      jp.act = reinterpret_cast<const std::byte*>(job.x);
      jp.act_stride = static_cast<size_t>(n_in) * sizeof(float);
      if (jp.mk->quantize_act) {
        jp.act_stride = row_bytes(jp.mk->act_dtype, n_in);
        jp.act = take(job.n_tokens * jp.act_stride);
      }
      if (jp.ik != nullptr && jp.ik->side_bytes(n_in) > 0) {
        jp.side_stride = jp.ik->side_bytes(n_in);
        jp.side = take(job.n_tokens * jp.side_stride);
      }
      jp.converts = jp.mk->quantize_act != nullptr || jp.side_stride > 0;
    }
    jp.unit_begin = n_units;
    jp.unit_rows = jp.ik != nullptr ? jp.ik->rows : kUnitRows;
    n_units += (w.n_rows() + jp.unit_rows - 1) / jp.unit_rows;
    macs += static_cast<double>(w.n_rows()) * n_in * job.n_tokens;
    weight_bytes += static_cast<double>(w.n_bytes);
  }
  if (n_units == 0) return;
  const int n_active = pool.threads_for(macs, kMinMacsPerThread);

  // 2. Convert the activation rows (a job per chunk when there are enough rows).
  auto convert = [&](int64_t j) {
    const JobPlan& jp = plan[j];
    if (!jp.converts) return;
    const int64_t n_in = jobs[j].w->ne[0];
    for (int64_t t = 0; t < jobs[j].n_tokens; ++t) {
      std::byte* xq = const_cast<std::byte*>(jp.act) + t * jp.act_stride;
      if (jp.mk->quantize_act) jp.mk->quantize_act(jobs[j].x + t * n_in, xq, n_in);
      if (jp.side_stride > 0) jp.ik->prepare_side(xq, n_in, const_cast<std::byte*>(jp.side) + t * jp.side_stride);
    }
  };
  int64_t n_rows_converted = 0;
  for (int64_t j = 0; j < n_jobs; ++j) n_rows_converted += plan[j].converts ? jobs[j].n_tokens : 0;
  if (n_active == 1 || n_rows_converted < 8 * pool.n_threads()) {
    for (int64_t j = 0; j < n_jobs; ++j) convert(j);
  } else {
    pool.for_chunks(n_active, n_jobs, [&](int64_t j, int) { convert(j); });
  }

  // 3. All jobs' units as one ranged job.
  auto run_units = [&](int64_t u0, int64_t u1, int) {
    // The last job starting at or before u0.
    int64_t j = std::upper_bound(plan, plan + n_jobs, u0, [](int64_t u, const JobPlan& p) { return u < p.unit_begin; }) -
                plan - 1;
    for (; j < n_jobs && plan[j].unit_begin < u1; ++j) {
      const JobPlan& jp = plan[j];
      const int64_t n_out = jobs[j].w->n_rows();
      const int64_t j_units = (n_out + jp.unit_rows - 1) / jp.unit_rows;
      const int64_t b = std::max(u0, jp.unit_begin) - jp.unit_begin;
      const int64_t e = std::min(u1, jp.unit_begin + j_units) - jp.unit_begin;
      if (b < e) run_rows(jobs[j], jp, b * jp.unit_rows, std::min(n_out, e * jp.unit_rows));
    }
  };
  const double unit_bytes = weight_bytes / static_cast<double>(n_units);
  const int64_t grain = std::max<int64_t>(1, static_cast<int64_t>(static_cast<double>(kDecodeGrainBytes) / unit_bytes));
  pool.for_ranges(n_active, n_units, grain, kDecodeMaxClaimGrains * grain, run_units);
}

}  // namespace lumen::kernels
