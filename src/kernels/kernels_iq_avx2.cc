// AVX2 kernels of the 256-element i-quants (iq_simd.h): the type table's AVX2 entries
// (isa_kernels.h), vec_dot and gemm tiles bit for bit the scalar reference (IQ4_XS's, with its
// interleaved layout, are in matmul_avx2.cc). IQ4_NL
// (32-element blocks, q8_0 activations) is with the other q8_0-style kernels in
// kernels_avx2.cc. Compiled with the AVX2 flags.
#include "kernels/iq_simd.h"
#include "kernels/isa_kernels.h"

namespace lumen::kernels {
namespace {

template <typename W>
void set_iq_k(MatmulKernels& mk) {
  mk.vec_dot = &vec_dot_cols<IqKKernel<W>>;
  mk.gemm = &gemm_cols<IqKKernel<W>>;
}

}  // namespace

void mm_iq3_s_avx2(MatmulKernels& mk) { set_iq_k<WidenIQ3_S>(mk); }
void mm_iq3_xxs_avx2(MatmulKernels& mk) { set_iq_k<WidenIQ3_XXS>(mk); }
void mm_iq2_s_avx2(MatmulKernels& mk) { set_iq_k<WidenIQ2_S>(mk); }
void mm_iq2_xs_avx2(MatmulKernels& mk) { set_iq_k<WidenIQ2_XS>(mk); }
void mm_iq2_xxs_avx2(MatmulKernels& mk) { set_iq_k<WidenIQ2_XXS>(mk); }
void mm_iq1_s_avx2(MatmulKernels& mk) { set_iq_k<WidenIQ1_S>(mk); }
void mm_iq1_m_avx2(MatmulKernels& mk) { set_iq_k<WidenIQ1_M>(mk); }

}  // namespace lumen::kernels
