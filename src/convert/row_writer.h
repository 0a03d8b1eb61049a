// Streams one tensor's rows into a TensorSink: rows are made as f32 (by a callback that may
// run on any pool thread) and converted to the target type in chunks of about 4 MiB, so
// writing a tensor needs a chunk of memory, not the tensor.
#pragma once

#include <cstdint>
#include <functional>

#include "base/status.h"
#include "base/thread_pool.h"
#include "convert/gguf_stream.h"
#include "tensor/dtype.h"

namespace lumen::convert {

// Fills out[0 .. n_per_row) with row `row_idx`. Called concurrently for different rows.
using MakeRowFn = std::function<void(int64_t row_idx, float* out)>;
// Returns row `row_idx`'s bytes, already in the target type. Called concurrently.
using RowBytesFn = std::function<const std::byte*(int64_t row_idx)>;

struct RowWriteOptions {
  // Importance weights (n_per_row per slice) for the quantizers, or null. A 3-D tensor (MoE
  // experts) has one slice of weights per rows_per_slice rows.
  const float* imatrix = nullptr;
  int64_t rows_per_slice = 0;
  // Called after each chunk is written with the number of rows written so far.
  std::function<void(int64_t n_rows_done)> on_chunk;
};

// Precondition: can_quantize_to(dtype) and n_per_row is a multiple of its block size.
// Errors: a row with a non-finite value (named by its index; quantizing it would write
// garbage scales), or a failed write.
Status write_rows(ThreadPool& pool, DType dtype, int64_t n_per_row, int64_t n_rows, const MakeRowFn& make_row,
                  TensorSink& sink, const RowWriteOptions& options = {});
// Copies rows that are already in their final type (row_bytes(dtype, n_per_row) each).
Status copy_rows(DType dtype, int64_t n_per_row, int64_t n_rows, const RowBytesFn& row_bytes_of, TensorSink& sink);

}  // namespace lumen::convert
