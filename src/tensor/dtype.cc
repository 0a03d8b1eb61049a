#include "tensor/dtype.h"

#include <array>
#include <cctype>

#include "base/check.h"

namespace lumen {
namespace {

constexpr DTypeInfo kTable[] = {
    // dtype          name       block bytes quantized fp16 fields (block offsets)
    {DType::kF32, "f32", 1, 4, false, {-1, -1}},
    {DType::kF16, "f16", 1, 2, false, {-1, -1}},
    {DType::kQ4_0, "q4_0", 32, 18, true, {0, -1}},
    {DType::kQ4_1, "q4_1", 32, 20, true, {0, 2}},
    {DType::kQ5_0, "q5_0", 32, 22, true, {0, -1}},
    {DType::kQ5_1, "q5_1", 32, 24, true, {0, 2}},
    {DType::kQ8_0, "q8_0", 32, 34, true, {0, -1}},
    {DType::kQ8_1, "q8_1", 32, 36, true, {0, 2}},
    {DType::kQ2_K, "q2_K", 256, 84, true, {80, 82}},
    {DType::kQ3_K, "q3_K", 256, 110, true, {108, -1}},
    {DType::kQ4_K, "q4_K", 256, 144, true, {0, 2}},
    {DType::kQ5_K, "q5_K", 256, 176, true, {0, 2}},
    {DType::kQ6_K, "q6_K", 256, 210, true, {208, -1}},
    {DType::kQ8_K, "q8_K", 256, 292, true, {-1, -1}},  // d is an f32
    {DType::kIQ2_XXS, "iq2_xxs", 256, 66, true, {0, -1}},
    {DType::kIQ2_XS, "iq2_xs", 256, 74, true, {0, -1}},
    {DType::kIQ3_XXS, "iq3_xxs", 256, 98, true, {0, -1}},
    {DType::kIQ1_S, "iq1_s", 256, 50, true, {0, -1}},
    {DType::kIQ4_NL, "iq4_nl", 32, 18, true, {0, -1}},
    {DType::kIQ3_S, "iq3_s", 256, 110, true, {0, -1}},
    {DType::kIQ2_S, "iq2_s", 256, 82, true, {0, -1}},
    {DType::kIQ4_XS, "iq4_xs", 256, 136, true, {0, -1}},
    {DType::kI8, "i8", 1, 1, false, {-1, -1}},
    {DType::kI16, "i16", 1, 2, false, {-1, -1}},
    {DType::kI32, "i32", 1, 4, false, {-1, -1}},
    {DType::kI64, "i64", 1, 8, false, {-1, -1}},
    {DType::kF64, "f64", 1, 8, false, {-1, -1}},
    {DType::kIQ1_M, "iq1_m", 256, 56, true, {-1, -1}},
    {DType::kBF16, "bf16", 1, 2, false, {-1, -1}},
    {DType::kTQ1_0, "tq1_0", 256, 54, true, {52, -1}},
    {DType::kTQ2_0, "tq2_0", 256, 66, true, {64, -1}},
};

constexpr bool ids_below_limit() {
  for (const DTypeInfo& info : kTable)
    if (static_cast<size_t>(info.dtype) >= kDTypeIdLimit) return false;
  return true;
}
static_assert(ids_below_limit(), "kDTypeIdLimit must exceed every type id");

// kTable's index of each type id (-1: none), so that dtype_info / row_bytes, which the
// kernels call per cache block, are one load instead of a search.
constexpr std::array<int8_t, kDTypeIdLimit> make_index() {
  std::array<int8_t, kDTypeIdLimit> index{};
  for (int8_t& i : index) i = -1;
  for (size_t i = 0; i < std::size(kTable); ++i) index[static_cast<size_t>(kTable[i].dtype)] = static_cast<int8_t>(i);
  return index;
}
constexpr std::array<int8_t, kDTypeIdLimit> kIndex = make_index();

}  // namespace

const DTypeInfo* find_dtype_info(uint32_t ggml_type_id) {
  if (ggml_type_id >= kDTypeIdLimit || kIndex[ggml_type_id] < 0) return nullptr;
  return &kTable[kIndex[ggml_type_id]];
}

const DTypeInfo& dtype_info(DType dtype) {
  const DTypeInfo* info = find_dtype_info(static_cast<uint32_t>(dtype));
  LUMEN_CHECK(info != nullptr);
  return *info;
}

const DTypeInfo* find_dtype_by_name(std::string_view name) {
  for (const DTypeInfo& info : kTable) {
    if (info.name.size() != name.size()) continue;
    bool eq = true;
    for (size_t i = 0; i < name.size() && eq; ++i)
      eq = std::tolower(static_cast<unsigned char>(name[i])) ==
           std::tolower(static_cast<unsigned char>(info.name[i]));
    if (eq) return &info;
  }
  return nullptr;
}

}  // namespace lumen
