// Per-ISA peak-rate loops (internal to peak_flops.cc). Each runs `n_iter` iterations and
// returns the operations it performed (FLOP or int8 OP); the result of the arithmetic goes
// to an asm sink so the loop cannot be removed.
#pragma once

#include <cstdint>

namespace lumen::roofline::detail {

double fma_f32_loop_avx512(int64_t n_iter);
double dot_i8_loop_avx512(int64_t n_iter);  // AVX-512 VNNI
double fma_f32_loop_avx2(int64_t n_iter);
double dot_i8_loop_avx2(int64_t n_iter);

}  // namespace lumen::roofline::detail
