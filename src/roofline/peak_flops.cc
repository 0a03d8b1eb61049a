#include "roofline/peak_flops.h"

#include <algorithm>
#include <vector>

#include "base/cpu_features.h"
#include "base/timer.h"
#include "roofline/peak_flops_isa.h"

namespace lumen::roofline {

namespace {

using LoopFn = double (*)(int64_t n_iter);

// Scalar fallbacks for CPUs without AVX2: eight independent chains each.
double fma_f32_loop_scalar(int64_t n_iter) {
  float acc[8];
  for (int j = 0; j < 8; ++j) acc[j] = static_cast<float>(j);
  for (int64_t i = 0; i < n_iter; ++i)
    for (int j = 0; j < 8; ++j) acc[j] = acc[j] * 0.999999f + 1e-6f;
  float s = 0;
  for (float v : acc) s += v;
  asm volatile("" : : "x"(s));
  return static_cast<double>(n_iter) * 8 * 2;
}

double dot_i8_loop_scalar(int64_t n_iter) {
  uint32_t acc[8];  // unsigned: wrap-around is defined
  for (int j = 0; j < 8; ++j) acc[j] = static_cast<uint32_t>(j);
  for (int64_t i = 0; i < n_iter; ++i)
    for (int j = 0; j < 8; ++j) acc[j] = acc[j] * 3u + static_cast<uint32_t>(j);
  uint32_t s = 0;
  for (uint32_t v : acc) s += v;
  asm volatile("" : : "r"(s));
  return static_cast<double>(n_iter) * 8 * 2;
}

// Runs `fn` on every thread; returns OP/s of the best of `n_runs` runs of about
// `target_ms` each (the first, short run sizes the iteration count).
double measure_rate(ThreadPool& pool, LoopFn fn, double target_ms, int n_runs) {
  std::vector<double> ops(static_cast<size_t>(pool.n_threads()), 0.0);
  auto run = [&](int64_t n_iter) {
    const double t0 = now_ms();
    pool.run([&](int thread_idx, int) { ops[static_cast<size_t>(thread_idx)] = fn(n_iter); });
    const double dt_ms = std::max(now_ms() - t0, 1e-3);
    double total = 0;
    for (double v : ops) total += v;
    return std::pair<double, double>(total / (dt_ms / 1e3), dt_ms);
  };
  int64_t n_iter = 1 << 14;
  auto [rate, dt_ms] = run(n_iter);
  n_iter = std::max<int64_t>(n_iter, static_cast<int64_t>(n_iter * target_ms / dt_ms));
  double best = rate;
  for (int i = 0; i < n_runs; ++i) best = std::max(best, run(n_iter).first);
  return best;
}

}  // namespace

PeakRates measure_peak_rates(ThreadPool& pool) {
  const CpuFeatures& cpu = cpu_features();
  PeakRates r;
  LoopFn f32 = &fma_f32_loop_scalar, i8 = &dot_i8_loop_scalar;
  r.isa = "scalar";
  if (cpu.has_avx512_vnni()) {
    f32 = &detail::fma_f32_loop_avx512;
    i8 = &detail::dot_i8_loop_avx512;
    r.isa = "avx512";
  } else if (cpu.has_avx2_fma()) {
    f32 = &detail::fma_f32_loop_avx2;
    i8 = &detail::dot_i8_loop_avx2;
    r.isa = "avx2";
  }
  r.flops_f32 = measure_rate(pool, f32, 40.0, 3);
  r.ops_int8 = measure_rate(pool, i8, 40.0, 3);
  return r;
}

}  // namespace lumen::roofline
