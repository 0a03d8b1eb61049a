#include "convert/quantize_ref.h"

#include <cstring>

#include "base/check.h"
#include "base/fp16.h"
#include "convert/quantize_types.h"

namespace lumen::convert {

bool can_quantize_to(DType dtype) {
  switch (dtype) {
    case DType::kF32:
    case DType::kF16:
    case DType::kBF16:
    case DType::kQ8_0:
      return true;
    default:
      return quantize_uses_imatrix(dtype);
  }
}

bool quantize_uses_imatrix(DType dtype) {
  switch (dtype) {
    case DType::kQ4_0:
    case DType::kQ4_1:
    case DType::kQ5_0:
    case DType::kQ5_1:
    case DType::kQ2_K:
    case DType::kQ3_K:
    case DType::kQ4_K:
    case DType::kQ5_K:
    case DType::kQ6_K:
    case DType::kIQ4_NL:
    case DType::kIQ4_XS:
    case DType::kIQ3_XXS:
    case DType::kIQ3_S:
    case DType::kIQ1_S:
    case DType::kIQ1_M:
    case DType::kIQ2_XXS:
    case DType::kIQ2_XS:
    case DType::kIQ2_S:
      return true;
    default:
      return false;
  }
}

void convert_row_f16(const float* x, std::byte* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_fp16(x[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void convert_row_bf16(const float* x, std::byte* dst, int64_t n) {
  for (int64_t i = 0; i < n; ++i) {
    const uint16_t h = f32_to_bf16(x[i]);
    std::memcpy(dst + 2 * i, &h, 2);
  }
}

void quantize_row(DType dtype, const float* src, std::byte* dst, int64_t n, const float* imatrix) {
  switch (dtype) {
    case DType::kF32: std::memcpy(dst, src, static_cast<size_t>(n) * sizeof(float)); return;
    case DType::kF16: convert_row_f16(src, dst, n); return;
    case DType::kBF16: convert_row_bf16(src, dst, n); return;
    case DType::kQ8_0: quantize_q8_0(src, dst, n); return;
    case DType::kQ4_0: quantize_q4_0(src, dst, n, imatrix); return;
    case DType::kQ4_1: quantize_q4_1(src, dst, n, imatrix); return;
    case DType::kQ5_0: quantize_q5_0(src, dst, n, imatrix); return;
    case DType::kQ5_1: quantize_q5_1(src, dst, n, imatrix); return;
    case DType::kQ2_K: quantize_q2_k(src, dst, n, imatrix); return;
    case DType::kQ3_K: quantize_q3_k(src, dst, n, imatrix); return;
    case DType::kQ4_K: quantize_q4_k(src, dst, n, imatrix); return;
    case DType::kQ5_K: quantize_q5_k(src, dst, n, imatrix); return;
    case DType::kQ6_K: quantize_q6_k(src, dst, n, imatrix); return;
    case DType::kIQ4_NL: quantize_iq4_nl(src, dst, n, imatrix); return;
    case DType::kIQ4_XS: quantize_iq4_xs(src, dst, n, imatrix); return;
    case DType::kIQ3_XXS: quantize_iq3_xxs(src, dst, n, imatrix); return;
    case DType::kIQ3_S: quantize_iq3_s(src, dst, n, imatrix); return;
    case DType::kIQ1_S: quantize_iq1_s(src, dst, n, imatrix); return;
    case DType::kIQ1_M: quantize_iq1_m(src, dst, n, imatrix); return;
    case DType::kIQ2_XXS: quantize_iq2_xxs(src, dst, n, imatrix); return;
    case DType::kIQ2_XS: quantize_iq2_xs(src, dst, n, imatrix); return;
    case DType::kIQ2_S: quantize_iq2_s(src, dst, n, imatrix); return;
    default: break;
  }
  LUMEN_CHECK_MSG(false, "quantize_row: unsupported target type");
}

}  // namespace lumen::convert
