// Builds the kernel tables once (function-local statics) and picks the best one for this
// CPU. This is the only place that looks at cpu_features().
#include "kernels/kernel_table.h"

#include "base/cpu_features.h"
#include "kernels/ops.h"

namespace lumen::kernels {
namespace {

const KernelTable& avx2_table() {
  static const KernelTable kTable = [] {
    KernelTable t = make_reference_kernel_table();
    override_kernels_avx2(t);
    return t;
  }();
  return kTable;
}

const KernelTable& avx512_table() {
  static const KernelTable kTable = [] {
    KernelTable t = make_reference_kernel_table();
    override_kernels_avx2(t);  // entries without an AVX-512 version keep the AVX2 one
    override_kernels_avx512(t, cpu_features().avx512bf16);
    return t;
  }();
  return kTable;
}

struct TableList {
  const KernelTable* tables[3];
  size_t n = 0;
};

}  // namespace

const KernelTable& reference_kernel_table() {
  static const KernelTable kTable = make_reference_kernel_table();
  return kTable;
}

std::span<const KernelTable* const> available_kernel_tables() {
  static const TableList kList = [] {
    TableList list;
    list.tables[list.n++] = &reference_kernel_table();
    const CpuFeatures& f = cpu_features();
    if (f.has_avx2_fma()) list.tables[list.n++] = &avx2_table();
    if (f.has_avx512_vnni()) list.tables[list.n++] = &avx512_table();
    return list;
  }();
  return {kList.tables, kList.n};
}

const KernelTable& best_kernel_table() { return *available_kernel_tables().back(); }

std::string_view kernel_table_name(const KernelTable& table) { return table.name; }

const MatmulKernels* find_matmul_kernels(const KernelTable& table, DType w_dtype) {
  switch (w_dtype) {
    case DType::kF32: return &table.mm_f32;
    case DType::kF16: return &table.mm_f16;
    case DType::kBF16: return &table.mm_bf16;
    case DType::kQ8_0: return &table.mm_q8_0;
    case DType::kQ4_0: return &table.mm_q4_0;
    case DType::kQ4_K: return &table.mm_q4_k;
    case DType::kQ6_K: return &table.mm_q6_k;
    default: return nullptr;
  }
}

}  // namespace lumen::kernels
