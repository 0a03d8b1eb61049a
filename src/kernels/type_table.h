// The weight-type table: one row per type lumen computes with, and everything lumen does
// with that type comes from its row (STYLE 24):
//
//   * its format facts (block size, bytes, name) are the DType table's (tensor/dtype.h);
//   * how it is read: the scalar dequantizer (embedding lookups, norms, `lumen quantize`'s
//     input, tests);
//   * how it is multiplied: the activation type (the activations are converted to it once
//     per matmul, as ggml-cpu does, so results track llama.cpp) and its matmul kernels per
//     ISA level, each level starting from the one below:
//         scalar (the numerical definition) -> avx2 -> avx512 (+ avx512_interleaved)
//     (an avx2 fill may set an interleaved layout too: q8_0 / q4_0's 8-row groups, which
//     the avx512 fills replace with their 16-row ones)
//   * what it is as an activation type (q8_0, q8_1, q8_K, f16, bf16): its quantizer per ISA.
//
// Derived from the rows, never listed elsewhere: KernelTable::mm (kernel_table.cc),
// matmul_supports() and its error message's list (ops.h), dequantize_row(), which types a
// model's embedding table may have, the parity and golden tests' type lists, row sizes
// (tensor/dtype.h).
//
// How a type is written (its reference weight quantizer, with and without an importance
// matrix) is the convert layer's (convert/quantize_ref.h, quantize_types.h): the quantizers
// sit above kernels in the layer DAG, so this table cannot point at them.
//
// Adding a type: its block struct (quant_blocks.h), its row below, its kernels and their
// tests. A row may be partial: a type with a dequantizer but no matmul.vec_dot can be read
// (an embedding table) but not multiplied.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>

#include "kernels/kernel_table.h"
#include "tensor/dtype.h"

namespace lumen::kernels {

// Sets the MatmulKernels entries one ISA level implements for one weight type; entries it
// leaves alone keep the level below's. Defined in the ISA's translation unit; called only
// when the CPU has the ISA.
using MatmulFillFn = void (*)(MatmulKernels& mk);

struct MatmulIsa {
  // Scalar reference (required for a type that can be multiplied): the numerical
  // definition the other levels are tested against.
  VecDotFn vec_dot = nullptr;
  GemmFn gemm = nullptr;
  MatmulFillFn avx2 = nullptr;                // AVX2 + FMA + F16C
  MatmulFillFn avx512 = nullptr;              // AVX-512 F/BW/VL/DQ + VNNI: decode, panels
  MatmulFillFn avx512_interleaved = nullptr;  // the interleaved decode layout
  MatmulFillFn avx512vbmi_interleaved = nullptr;  // its tiles where the CPU also has VBMI
};

struct ActQuantizers {  // QuantizeRowFn per ISA level; null: the level below's
  QuantizeRowFn scalar = nullptr;
  QuantizeRowFn avx2 = nullptr;
  QuantizeRowFn avx512 = nullptr;
};

struct TypeRow {
  DType dtype;
  DequantizeRowFn dequantize = nullptr;  // null: lumen cannot read tensors of this type
  DType act_dtype = DType::kF32;         // activations converted to this for the dot products
  MatmulIsa matmul;                      // matmul.vec_dot null: cannot be multiplied
  ActQuantizers as_act;                  // as an activation type: f32 -> this type
};

// Every row, in DType id order.
std::span<const TypeRow> type_rows();
// The row of dtype, or null when lumen does nothing with the type.
const TypeRow* find_type_row(DType dtype);

bool can_dequantize(DType dtype);
// The names of the types that pass `pred` (a TypeRow predicate), comma-separated in id
// order: what an error message lists as supported.
std::string type_names(bool (*pred)(const TypeRow&));
inline bool row_can_multiply(const TypeRow& r) { return r.matmul.vec_dot != nullptr; }
inline bool row_can_dequantize(const TypeRow& r) { return r.dequantize != nullptr; }

}  // namespace lumen::kernels
