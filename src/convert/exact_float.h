// Include in a translation unit whose float arithmetic must match ggml's operation by
// operation (the quantizers): every product is rounded on its own, no fused multiply-add.
// GCC contracts a*b+c into an FMA in C++ whenever the target has FMA (-march=native,
// LUMEN_NATIVE), which changes which candidate the quantizers' searches pick (measured: ~1/3
// of q4_K rows differ). This turns contraction off for the rest of the file whatever the flags.
#pragma once

#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
