// Many independent small matmuls in one parallel job (matmul_jobs.cc): the experts of a
// mixture-of-experts decode step, say. Beside ops.h (the same conventions: weights W with
// ne[0] = n_in, ne[1] = n_out, activations row-major f32).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

#include "base/thread_pool.h"
#include "tensor/tensor_view.h"

namespace lumen::kernels {

struct KernelTable;  // kernel_table.h

// Job j computes y [n_tokens][n_out] = x [n_tokens][n_in] * W^T with its own weight (any
// dtype and width), input and output. Every job's output rows are shared out over the threads as one ranged
// job, so K small matmuls (a decode step's experts) cost one dispatch, not K. A job whose
// x, n_tokens and kernels equal the previous job's reuses its converted rows (put an
// expert's up right after its gate). Each row is the same bits as matmul() gives it.
// `scratch` holds scratch_bytes bytes, at least matmul_jobs_scratch_bytes() of the jobs.
struct MatmulJob {
  const TensorView* w;
  const float* x;
  int64_t n_tokens;
  float* y;
};
// The scratch of up to n_jobs jobs whose activation rows, converted once each, are at
// most these (a bound per weight dtype and input width, summed).
struct MatmulJobRows {
  DType w_dtype;
  int64_t n_in;
  int64_t n_rows;
};
size_t matmul_jobs_scratch_bytes(int64_t n_jobs, std::span<const MatmulJobRows> rows);
void matmul_jobs(const KernelTable& k, ThreadPool& pool, std::span<const MatmulJob> jobs, std::byte* scratch,
                 size_t scratch_bytes);

}  // namespace lumen::kernels
