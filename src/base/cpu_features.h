// CPU feature snapshot (CPUID + XCR0), taken once; the only process-wide state besides
// the log threshold. Kernels choose their dispatch table from it.
#pragma once

#include <string>

namespace lumen {

struct CpuFeatures {
  bool sse42 = false;
  bool avx = false;
  bool avx2 = false;
  bool bmi2 = false;
  bool fma = false;
  bool f16c = false;
  bool avx512f = false;
  bool avx512bw = false;
  bool avx512vl = false;
  bool avx512dq = false;
  bool avx512vnni = false;
  bool avx512bf16 = false;
  bool avx512vbmi = false;
  bool avx_vnni = false;
  bool intel = false;  // CPUID vendor "GenuineIntel" (the decode tiles' prefetch choice)

  bool has_avx2_fma() const { return avx2 && fma && f16c; }
  bool has_avx512_vnni() const {
    // bmi2: the AVX-512 translation units are compiled with -mbmi2 too (every CPU with
    // AVX-512 VNNI has it).
    return avx512f && avx512bw && avx512vl && avx512dq && avx512vnni && bmi2 && has_avx2_fma();
  }
  std::string describe() const;
};

// Detected once on first call (thread-safe), immutable afterwards.
const CpuFeatures& cpu_features();

}  // namespace lumen
