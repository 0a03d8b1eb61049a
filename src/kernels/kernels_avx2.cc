// AVX2 + FMA + F16C kernels. Compiled with -mavx2 -mfma -mf16c (cmake/lumen.cmake); only
// reached through the table when cpu_features().has_avx2_fma().
#include <immintrin.h>

#include "kernels/kernel_table.h"

namespace lumen::kernels {

void override_kernels_avx2(KernelTable& table) { table.name = "avx2"; }

}  // namespace lumen::kernels
