// Non-owning views of tensor data. Dimensions are in GGML order: ne[0] is the innermost
// (contiguous) dimension. A weight matrix W used as y = W x has ne[0] = n_in (row length)
// and ne[1] = n_out (number of rows); rows are contiguous, row_bytes(dtype, ne[0]) apart.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/dtype.h"

namespace lumen {

struct TensorView {
  DType dtype = DType::kF32;
  int n_dims = 0;
  int64_t ne[4] = {1, 1, 1, 1};  // elements per dimension, innermost first
  const std::byte* data = nullptr;  // points into an mmap or an owned buffer
  size_t n_bytes = 0;
  // Optional copy of a matrix in a kernel's row-interleaved layout (kernel_table.h,
  // InterleavedKernels), made by the model at load; `data` stays valid beside it. The
  // layout name says which kernels may read it; null when there is no copy.
  const std::byte* interleaved = nullptr;
  const char* interleaved_layout = nullptr;
  size_t interleaved_n_bytes = 0;

  int64_t n_elements() const { return ne[0] * ne[1] * ne[2] * ne[3]; }
  int64_t n_rows() const { return ne[1] * ne[2] * ne[3]; }
  size_t row_stride_bytes() const { return row_bytes(dtype, ne[0]); }
  const std::byte* row(int64_t row_idx) const { return data + row_idx * row_stride_bytes(); }
  std::string shape_string() const;  // "[896, 151936]"
};

}  // namespace lumen
