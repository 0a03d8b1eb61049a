#include "tensor/dtype.h"

#include <array>
#include <cctype>

#include "base/check.h"

namespace lumen {
namespace {

constexpr DTypeInfo kTable[] = {
    {DType::kF32, "f32", 1, 4, false, true},
    {DType::kF16, "f16", 1, 2, false, true},
    {DType::kQ4_0, "q4_0", 32, 18, true, true},
    {DType::kQ4_1, "q4_1", 32, 20, true, false},
    {DType::kQ5_0, "q5_0", 32, 22, true, false},
    {DType::kQ5_1, "q5_1", 32, 24, true, false},
    {DType::kQ8_0, "q8_0", 32, 34, true, true},
    {DType::kQ8_1, "q8_1", 32, 36, true, false},
    {DType::kQ2_K, "q2_K", 256, 84, true, false},
    {DType::kQ3_K, "q3_K", 256, 110, true, false},
    {DType::kQ4_K, "q4_K", 256, 144, true, true},
    {DType::kQ5_K, "q5_K", 256, 176, true, false},
    {DType::kQ6_K, "q6_K", 256, 210, true, true},
    {DType::kQ8_K, "q8_K", 256, 292, true, false},
    {DType::kI8, "i8", 1, 1, false, false},
    {DType::kI16, "i16", 1, 2, false, false},
    {DType::kI32, "i32", 1, 4, false, false},
    {DType::kI64, "i64", 1, 8, false, false},
    {DType::kF64, "f64", 1, 8, false, false},
    {DType::kBF16, "bf16", 1, 2, false, true},
};

}  // namespace

const DTypeInfo* find_dtype_info(uint32_t ggml_type_id) {
  for (const DTypeInfo& info : kTable)
    if (static_cast<uint32_t>(info.dtype) == ggml_type_id) return &info;
  return nullptr;
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
