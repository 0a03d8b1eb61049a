// The weight-type table (type_table.h): one row per type lumen reads, multiplies or writes.
#include "kernels/type_table.h"

#include <iterator>

#include "kernels/isa_kernels.h"
#include "kernels/kernels_isa_common.h"
#include "kernels/kernels_ref.h"

namespace lumen::kernels {
namespace {

// The scalar reference matmul of a type: its vec_dot, and gemm tiles made of it.
template <VecDotFn kVecDot>
constexpr MatmulIsa scalar_mm(MatmulFillFn avx2 = nullptr, MatmulFillFn avx512 = nullptr,
                              MatmulFillFn avx512_interleaved = nullptr,
                              MatmulFillFn avx512vbmi_interleaved = nullptr) {
  return {kVecDot, &gemm_from_vec_dot<kVecDot>, avx2, avx512, avx512_interleaved, avx512vbmi_interleaved};
}

// In DType id order. Types absent here: lumen neither reads nor multiplies them.
// A row names only the fields it has; the others keep TypeRow's defaults (null: none), which
// GCC's -Wmissing-field-initializers would flag for designated initializers.
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wmissing-field-initializers"
constexpr TypeRow kRows[] = {
    {.dtype = DType::kF32,
     .dequantize = &ref::dequantize_row_f32,
     .act_dtype = DType::kF32,
     .matmul = scalar_mm<&ref::vec_dot_f32_f32>(&mm_f32_avx2)},
    {.dtype = DType::kF16,
     .dequantize = &ref::dequantize_row_f16,
     .act_dtype = DType::kF16,
     .matmul = scalar_mm<&ref::vec_dot_f16_f16>(&mm_f16_avx2),
     .as_act = {&ref::quantize_row_f16, &quantize_row_f16_avx2, nullptr}},
    {.dtype = DType::kQ4_0,
     .dequantize = &ref::dequantize_row_q4_0,
     .act_dtype = DType::kQ8_0,
     .matmul = scalar_mm<&ref::vec_dot_q4_0_q8_0>(&mm_q4_0_avx2, &mm_q4_0_avx512, &mm_q4_0_avx512_interleaved)},
    {.dtype = DType::kQ4_1,
     .dequantize = &ref::dequantize_row_q4_1,
     .act_dtype = DType::kQ8_1,
     .matmul = scalar_mm<&ref::vec_dot_q4_1_q8_1>(&mm_q4_1_avx2, &mm_q4_1_avx512, &mm_q4_1_avx512_interleaved)},
    {.dtype = DType::kQ5_0,
     .dequantize = &ref::dequantize_row_q5_0,
     .act_dtype = DType::kQ8_0,
     .matmul = scalar_mm<&ref::vec_dot_q5_0_q8_0>(&mm_q5_0_avx2, &mm_q5_0_avx512, &mm_q5_0_avx512_interleaved)},
    {.dtype = DType::kQ5_1,
     .dequantize = &ref::dequantize_row_q5_1,
     .act_dtype = DType::kQ8_1,
     .matmul = scalar_mm<&ref::vec_dot_q5_1_q8_1>(&mm_q5_1_avx2, &mm_q5_1_avx512, &mm_q5_1_avx512_interleaved)},
    {.dtype = DType::kQ8_0,
     .dequantize = &ref::dequantize_row_q8_0,
     .act_dtype = DType::kQ8_0,
     .matmul = scalar_mm<&ref::vec_dot_q8_0_q8_0>(&mm_q8_0_avx2, &mm_q8_0_avx512, &mm_q8_0_avx512_interleaved),
     .as_act = {&ref::quantize_row_q8_0, &quantize_row_q8_0_avx2, nullptr}},
    {.dtype = DType::kQ8_1,
     .dequantize = &ref::dequantize_row_q8_1,
     .as_act = {&ref::quantize_row_q8_1, &quantize_row_q8_1_avx2, nullptr}},
    {.dtype = DType::kQ2_K,
     .dequantize = &ref::dequantize_row_q2_k,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_q2_k_q8_k>(&mm_q2_k_avx2)},
    {.dtype = DType::kQ3_K,
     .dequantize = &ref::dequantize_row_q3_k,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_q3_k_q8_k>(&mm_q3_k_avx2)},
    {.dtype = DType::kQ4_K,
     .dequantize = &ref::dequantize_row_q4_k,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_q4_k_q8_k>(&mm_q4_k_avx2, &mm_q4_k_avx512, &mm_q4_k_avx512_interleaved)},
    {.dtype = DType::kQ5_K,
     .dequantize = &ref::dequantize_row_q5_k,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_q5_k_q8_k>(&mm_q5_k_avx2, &mm_q5_k_avx512, &mm_q5_k_avx512_interleaved)},
    {.dtype = DType::kQ6_K,
     .dequantize = &ref::dequantize_row_q6_k,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_q6_k_q8_k>(&mm_q6_k_avx2, &mm_q6_k_avx512, &mm_q6_k_avx512_interleaved)},
    {.dtype = DType::kQ8_K,
     .dequantize = &ref::dequantize_row_q8_k,
     .as_act = {&ref::quantize_row_q8_k, &quantize_row_q8_k_avx2, nullptr}},
    {.dtype = DType::kIQ2_XXS,
     .dequantize = &ref::dequantize_row_iq2_xxs,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_iq2_xxs_q8_k>(&mm_iq2_xxs_avx2, &mm_iq2_xxs_avx512)},
    {.dtype = DType::kIQ2_XS,
     .dequantize = &ref::dequantize_row_iq2_xs,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_iq2_xs_q8_k>(&mm_iq2_xs_avx2, &mm_iq2_xs_avx512)},
    {.dtype = DType::kIQ3_XXS,
     .dequantize = &ref::dequantize_row_iq3_xxs,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_iq3_xxs_q8_k>(&mm_iq3_xxs_avx2, &mm_iq3_xxs_avx512)},
    {.dtype = DType::kIQ1_S,
     .dequantize = &ref::dequantize_row_iq1_s,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_iq1_s_q8_k>(&mm_iq1_s_avx2, &mm_iq1_s_avx512)},
    {.dtype = DType::kIQ4_NL,
     .dequantize = &ref::dequantize_row_iq4_nl,
     .act_dtype = DType::kQ8_0,
     .matmul = scalar_mm<&ref::vec_dot_iq4_nl_q8_0>(&mm_iq4_nl_avx2, &mm_iq4_nl_avx512)},
    {.dtype = DType::kIQ3_S,
     .dequantize = &ref::dequantize_row_iq3_s,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_iq3_s_q8_k>(&mm_iq3_s_avx2, &mm_iq3_s_avx512)},
    {.dtype = DType::kIQ2_S,
     .dequantize = &ref::dequantize_row_iq2_s,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_iq2_s_q8_k>(&mm_iq2_s_avx2, &mm_iq2_s_avx512)},
    {.dtype = DType::kIQ4_XS,
     .dequantize = &ref::dequantize_row_iq4_xs,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_iq4_xs_q8_k>(&mm_iq4_xs_avx2, &mm_iq4_xs_avx512,
                                                    &mm_iq4_xs_avx512_interleaved,
                                                    &mm_iq4_xs_avx512vbmi_interleaved)},
    {.dtype = DType::kIQ1_M,
     .dequantize = &ref::dequantize_row_iq1_m,
     .act_dtype = DType::kQ8_K,
     .matmul = scalar_mm<&ref::vec_dot_iq1_m_q8_k>(&mm_iq1_m_avx2, &mm_iq1_m_avx512)},
    {.dtype = DType::kBF16,
     .dequantize = &ref::dequantize_row_bf16,
     .act_dtype = DType::kBF16,
     .matmul = scalar_mm<&ref::vec_dot_bf16_bf16>(&mm_bf16_avx2),
     .as_act = {&ref::quantize_row_bf16, nullptr, nullptr}},
};
#pragma GCC diagnostic pop

constexpr bool rows_in_id_order() {
  for (size_t i = 1; i < std::size(kRows); ++i)
    if (kRows[i - 1].dtype >= kRows[i].dtype) return false;
  return true;
}
static_assert(rows_in_id_order(), "type rows must be in DType id order, one per type");

}  // namespace

std::span<const TypeRow> type_rows() { return kRows; }

const TypeRow* find_type_row(DType dtype) {
  for (const TypeRow& r : kRows)
    if (r.dtype == dtype) return &r;
  return nullptr;
}

bool can_dequantize(DType dtype) {
  const TypeRow* r = find_type_row(dtype);
  return r != nullptr && row_can_dequantize(*r);
}

std::string type_names(bool (*pred)(const TypeRow&)) {
  std::string out;
  for (const TypeRow& r : kRows) {
    if (!pred(r)) continue;
    if (!out.empty()) out += ", ";
    out += dtype_name(r.dtype);
  }
  return out;
}

}  // namespace lumen::kernels
