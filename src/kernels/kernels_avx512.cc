// AVX-512 (F/BW/VL/DQ + VNNI, optionally BF16) kernels. Compiled with the AVX-512 flags
// (cmake/lumen.cmake); only reached when cpu_features().has_avx512_vnni().
#include <immintrin.h>

#include "kernels/kernel_table.h"

namespace lumen::kernels {

void override_kernels_avx512(KernelTable& table, bool has_bf16) { table.name = "avx512"; }

}  // namespace lumen::kernels
