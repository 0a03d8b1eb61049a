// AVX-512 (F/BW/VL/DQ + VNNI) table: built on the AVX2 table (kernel_table.cc), then the
// entries that gain from AVX-512 are overridden here. Compiled with the AVX-512 flags
// (cmake/lumen.cmake); only reached when cpu_features().has_avx512_vnni().
//
//   quantized matmuls           matmul_avx512.cc, matmul_interleaved_avx512.cc: VNNI decode
//                               groups, prefill panels and interleaved layouts;
//                               kernels_iq_avx512.cc: the 256-element i-quants' prefill
//                               panels; all bit-exact with the scalar reference
//                               (entries of the type table's rows)
//   attention group kernels     attention_avx512.cc: all query heads of a GQA group per
//                               K/V row, bit for bit the AVX2 single-head kernels;
//                               attention_values_avx512.cc: their P.V straight from
//                               q8_0 / q4_0 / f16 V rows (no dequantize / widening pass)
//                               attention_keys_avx512.cc: flash attention's K scores, q8_0 /
//                               q4_0 16 keys a tile (vpdpbusd), f16 two keys a register, bit
//                               for bit the AVX2 vec_dot
//   f32 / f16 / bf16, row ops   the AVX2 kernels: 16-lane versions measured slower on Zen 4
//                               (512-bit ops are double-pumped there), and vdpbf16ps would
//                               flush subnormals; except exp_sum and silu_mul
//                               (softmax_avx512.cc: bit for bit the AVX2 ones, bound by the
//                               latency of their exp chain)
#include "kernels/kernel_table.h"

namespace lumen::kernels {

void override_kernels_avx512(KernelTable& t, bool /*has_bf16*/) {
  t.name = "avx512";
  override_attention_avx512(t);
  override_attention_values_avx512(t);
  override_attention_keys_avx512(t);
  override_softmax_avx512(t);
}

}  // namespace lumen::kernels
