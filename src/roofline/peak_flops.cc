#include "roofline/peak_flops.h"

#include <time.h>

#include <algorithm>
#include <thread>
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
  #pragma GCC unroll 16
  for (int j = 0; j < 8; ++j) acc[j] = static_cast<float>(j);
  for (int64_t i = 0; i < n_iter; ++i)
    #pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) acc[j] = acc[j] * 0.999999f + 1e-6f;
  float s = 0;
  for (float v : acc) s += v;
  asm volatile("" : : "x"(s));
  return static_cast<double>(n_iter) * 8 * 2;
}

double dot_i8_loop_scalar(int64_t n_iter) {
  uint32_t acc[8];  // unsigned: wrap-around is defined
  #pragma GCC unroll 16
  for (int j = 0; j < 8; ++j) acc[j] = static_cast<uint32_t>(j);
  for (int64_t i = 0; i < n_iter; ++i)
    #pragma GCC unroll 16
    for (int j = 0; j < 8; ++j) acc[j] = acc[j] * 3u + static_cast<uint32_t>(j);
  uint32_t s = 0;
  for (uint32_t v : acc) s += v;
  asm volatile("" : : "r"(s));
  return static_cast<double>(n_iter) * 8 * 2;
}

double thread_cpu_seconds() {
  timespec ts{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
  return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) * 1e-9;
}

// Runs `fn` on every thread and returns the sum over threads of each thread's operations
// per second of its own CPU time, best of `n_runs` runs of about `target_ms` each (the
// first, short run sizes the iteration count). CPU time, not wall time: on a machine
// shared with other work a preempted thread would otherwise report a fraction of what its
// core can do. Cores do not share arithmetic units here, so per-thread rates add up (up to
// the number of cores: more threads than cores are scaled down to it).
double measure_rate(ThreadPool& pool, LoopFn fn, double target_ms, int n_runs) {
  std::vector<double> rates(static_cast<size_t>(pool.n_threads()), 0.0);
  auto run = [&](int64_t n_iter) {
    const double t0 = now_ms();
    pool.run([&](int thread_idx, int) {
      const double c0 = thread_cpu_seconds();
      const double ops = fn(n_iter);
      const double dt = std::max(thread_cpu_seconds() - c0, 1e-7);
      rates[static_cast<size_t>(thread_idx)] = ops / dt;
    });
    const double wall_ms = std::max(now_ms() - t0, 1e-3);
    double total = 0;
    for (double v : rates) total += v;
    // More threads than cores share them: count the cores, not the threads.
    const double n_cores = static_cast<double>(std::thread::hardware_concurrency());
    if (n_cores > 0 && pool.n_threads() > n_cores) total *= n_cores / pool.n_threads();
    return std::pair<double, double>(total, wall_ms);
  };
  int64_t n_iter = 1 << 14;
  auto [rate, wall_ms] = run(n_iter);
  n_iter = std::max<int64_t>(n_iter, static_cast<int64_t>(static_cast<double>(n_iter) * target_ms / wall_ms));
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
