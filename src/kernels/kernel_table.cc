// Builds the kernel tables once (function-local statics) and picks the best one for this
// CPU. This is the only place that looks at cpu_features().
#include "kernels/kernel_table.h"

#include "base/check.h"
#include "base/cpu_features.h"
#include "kernels/ops.h"
#include "kernels/type_table.h"

namespace lumen::kernels {
namespace {

const KernelTable& avx2_table() {
  static const KernelTable kTable = [] {
    KernelTable t = make_reference_kernel_table();
    override_kernels_avx2(t);
    fill_matmul_kernels(t, IsaLevel::kAvx2);
    return t;
  }();
  return kTable;
}

KernelTable make_avx512_table(IsaLevel level) {
  KernelTable t = make_reference_kernel_table();
  override_kernels_avx2(t);  // entries without an AVX-512 version keep the AVX2 one
  override_kernels_avx512(t, cpu_features().avx512bf16);
  fill_matmul_kernels(t, level, cpu_features().intel);
  return t;
}

const KernelTable& avx512_table() {
  static const KernelTable kTable =
      make_avx512_table(cpu_features().avx512vbmi ? IsaLevel::kAvx512Vbmi : IsaLevel::kAvx512);
  return kTable;
}

struct TableList {
  const KernelTable* tables[3];
  size_t n = 0;
};

}  // namespace

const KernelTable& reference_kernel_table() {
  static const KernelTable kTable = [] {
    KernelTable t = make_reference_kernel_table();
    fill_matmul_kernels(t, IsaLevel::kScalar);
    return t;
  }();
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

const KernelTable* avx512_table_without_vbmi() {
  const CpuFeatures& f = cpu_features();
  if (!f.has_avx512_vnni() || !f.avx512vbmi) return nullptr;
  static const KernelTable kTable = make_avx512_table(IsaLevel::kAvx512);
  return &kTable;
}

const KernelTable& best_kernel_table() { return *available_kernel_tables().back(); }

std::string_view kernel_table_name(const KernelTable& table) { return table.name; }

const MatmulKernels* find_matmul_kernels(const KernelTable& table, DType w_dtype) {
  const MatmulKernels& mk = table.mm[dtype_index(w_dtype)];
  return mk.vec_dot != nullptr ? &mk : nullptr;
}

// Each row's kernels at `level`: the scalar reference, then each ISA level's fill in turn
// (a level overrides what it implements and keeps the rest). The activation quantizer is
// the activation type's own row's, at the same level.
void fill_matmul_kernels(KernelTable& t, IsaLevel level, bool decode_prefetch) {
  const bool avx2 = level >= IsaLevel::kAvx2, avx512 = level >= IsaLevel::kAvx512;
  const bool vbmi = level >= IsaLevel::kAvx512Vbmi;
  std::array<QuantizeRowFn, kDTypeIdLimit> quantize_act{};
  for (const TypeRow& row : type_rows()) {
    QuantizeRowFn q = row.as_act.scalar;
    if (avx2 && row.as_act.avx2) q = row.as_act.avx2;
    if (avx512 && row.as_act.avx512) q = row.as_act.avx512;
    quantize_act[dtype_index(row.dtype)] = q;
  }
  for (const TypeRow& row : type_rows()) {
    if (!row_can_multiply(row)) continue;
    MatmulKernels mk;
    mk.act_dtype = row.act_dtype;
    mk.quantize_act = quantize_act[dtype_index(row.act_dtype)];
    // f32 activations are used as they are; every other activation type has a quantizer.
    LUMEN_CHECK((row.act_dtype == DType::kF32) == (mk.quantize_act == nullptr));
    mk.vec_dot = row.matmul.vec_dot;
    mk.gemm = row.matmul.gemm;
    if (avx2 && row.matmul.avx2) row.matmul.avx2(mk);
    if (avx512 && row.matmul.avx512) row.matmul.avx512(mk);
    if (avx512 && row.matmul.avx512_interleaved) row.matmul.avx512_interleaved(mk);
    if (vbmi && row.matmul.avx512vbmi_interleaved) row.matmul.avx512vbmi_interleaved(mk);
    // Decode's one-column tiles prefetch their weights in software on Intel, whose L2
    // streamer stops at every 4 KiB boundary, and leave the stream to the hardware on AMD,
    // where the software prefetches held decode back (matmul_interleaved_avx512.cc).
    if (decode_prefetch && mk.interleaved.gemm_prefetch != nullptr) mk.interleaved.gemm = mk.interleaved.gemm_prefetch;
    t.mm[dtype_index(row.dtype)] = mk;
  }
}

}  // namespace lumen::kernels
