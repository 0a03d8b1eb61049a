// Peak arithmetic rates of this CPU, measured: every thread of the pool runs a loop of
// independent multiply-add chains long enough to hide the instruction latency, in the
// widest SIMD the CPU has (AVX-512 -> AVX2+FMA -> scalar), and the best of a few runs
// counts. This is the compute roof for prefill: what the cores can do when the data is in
// registers, which real kernels approach but never pass.
//
//   f32:  FMA on f32 lanes, 2 FLOP per lane per instruction
//   int8: u8 x s8 dot products into i32 (AVX-512 VNNI vpdpbusd; AVX2 vpmaddubsw +
//         vpmaddwd), 2 OP per multiply-add — what lumen's quantized kernels use, since
//         they quantize activations to 8-bit blocks
//
// Each thread's rate is its operations over its own CPU time, so a machine busy with other
// work still reports what its cores can do (the roof), not the share it got; the pool
// should have no more threads than the machine has cores.
//
// Blocking: about 0.3 s of CPU per thread.
#pragma once

#include <string>

#include "base/thread_pool.h"

namespace lumen::roofline {

struct PeakRates {
  double flops_f32 = 0;  // FLOP/s, f32 FMA, all threads
  double ops_int8 = 0;   // OP/s (2 per multiply-add), int8 dot products, all threads
  std::string isa;       // "avx512", "avx2", "scalar"
};

PeakRates measure_peak_rates(ThreadPool& pool);

}  // namespace lumen::roofline
