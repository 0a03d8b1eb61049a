#include "convert/row_writer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cerrno>
#include <cstring>
#include <vector>

#include "convert/quantize_ref.h"

namespace lumen::convert {
namespace {

constexpr size_t kChunkBytes = size_t{4} << 20;

Status write_failed() { return error(std::string("write failed: ") + std::strerror(errno)); }

}  // namespace

Status write_rows(ThreadPool& pool, DType dtype, int64_t n_per_row, int64_t n_rows, const MakeRowFn& make_row,
                  TensorSink& sink, const RowWriteOptions& options) {
  const size_t out_row = row_bytes(dtype, n_per_row);
  const int64_t rows_per_chunk = std::max<int64_t>(1, static_cast<int64_t>(kChunkBytes / std::max<size_t>(out_row, 1)));
  std::vector<std::byte> chunk(static_cast<size_t>(std::min(rows_per_chunk, n_rows)) * out_row);
  // One f32 row buffer per thread.
  std::vector<std::vector<float>> row_buf(pool.n_threads(), std::vector<float>(n_per_row));
  const bool check_finite = dtype != DType::kF32 && dtype != DType::kF16 && dtype != DType::kBF16;
  for (int64_t first = 0; first < n_rows; first += rows_per_chunk) {
    const int64_t n = std::min(rows_per_chunk, n_rows - first);
    std::atomic<int64_t> bad_row{-1};
    pool.parallel_for(n, [&](int64_t begin, int64_t end, int thread_idx) {
      float* buf = row_buf[thread_idx].data();
      for (int64_t r = begin; r < end; ++r) {
        const int64_t row = first + r;
        make_row(row, buf);
        if (check_finite && !std::all_of(buf, buf + n_per_row, [](float v) { return std::isfinite(v); })) {
          bad_row = row;
          continue;
        }
        const float* w = options.imatrix ? options.imatrix + (row / options.rows_per_slice) * n_per_row : nullptr;
        quantize_row(dtype, buf, chunk.data() + r * out_row, n_per_row, w);
      }
    });
    if (bad_row >= 0)
      return error("row " + std::to_string(bad_row.load()) + " has a non-finite value (inf or NaN)");
    if (!sink.write(chunk.data(), static_cast<size_t>(n) * out_row)) return write_failed();
    if (options.on_chunk) options.on_chunk(first + n);
  }
  return Status();
}

Status copy_rows(DType dtype, int64_t n_per_row, int64_t n_rows, const RowBytesFn& row_bytes_of, TensorSink& sink) {
  const size_t n_bytes = row_bytes(dtype, n_per_row);
  for (int64_t r = 0; r < n_rows; ++r)
    if (!sink.write(row_bytes_of(r), n_bytes)) return write_failed();
  return Status();
}

}  // namespace lumen::convert
