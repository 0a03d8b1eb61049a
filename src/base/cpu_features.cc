#include "base/cpu_features.h"

#include <cpuid.h>

#include <cstdint>
#include <cstring>

namespace lumen {
namespace {

uint64_t read_xcr0() {
  uint32_t eax, edx;
  __asm__ volatile("xgetbv" : "=a"(eax), "=d"(edx) : "c"(0));
  return (static_cast<uint64_t>(edx) << 32) | eax;
}

CpuFeatures detect() {
  CpuFeatures f;
  unsigned a, b, c, d;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  f.sse42 = c & (1u << 20);
  const bool osxsave = c & (1u << 27);
  const bool avx_hw = c & (1u << 28);
  const bool fma_hw = c & (1u << 12);
  const bool f16c_hw = c & (1u << 29);
  uint64_t xcr0 = osxsave ? read_xcr0() : 0;
  const bool os_avx = (xcr0 & 0x6) == 0x6;            // XMM + YMM state
  const bool os_avx512 = (xcr0 & 0xe6) == 0xe6;       // + opmask, ZMM_Hi256, Hi16_ZMM
  f.avx = avx_hw && os_avx;
  f.fma = fma_hw && os_avx;
  f.f16c = f16c_hw && os_avx;
  unsigned max_leaf = __get_cpuid_max(0, nullptr);
  {
    unsigned vendor[3];
    __cpuid(0, a, vendor[0], vendor[2], vendor[1]);  // EBX, EDX, ECX spell the vendor
    f.intel = std::memcmp(vendor, "GenuineIntel", 12) == 0;
  }
  if (max_leaf >= 7) {
    __cpuid_count(7, 0, a, b, c, d);
    f.avx2 = (b & (1u << 5)) && os_avx;
    f.bmi2 = (b & (1u << 8)) != 0;
    f.avx512f = (b & (1u << 16)) && os_avx512;
    f.avx512dq = (b & (1u << 17)) && os_avx512;
    f.avx512bw = (b & (1u << 30)) && os_avx512;
    f.avx512vl = (b & (1u << 31)) && os_avx512;
    f.avx512vnni = (c & (1u << 11)) && os_avx512;
    f.avx512vbmi = (c & (1u << 1)) && os_avx512;
    __cpuid_count(7, 1, a, b, c, d);
    f.avx_vnni = (a & (1u << 4)) && os_avx;
    f.avx512bf16 = (a & (1u << 5)) && os_avx512;
  }
  return f;
}

}  // namespace

const CpuFeatures& cpu_features() {
  static const CpuFeatures kFeatures = detect();
  return kFeatures;
}

std::string CpuFeatures::describe() const {
  std::string s;
  auto add = [&](bool on, const char* name) {
    if (!on) return;
    if (!s.empty()) s += ' ';
    s += name;
  };
  add(sse42, "sse4.2");
  add(avx, "avx");
  add(avx2, "avx2");
  add(bmi2, "bmi2");
  add(fma, "fma");
  add(f16c, "f16c");
  add(avx512f, "avx512f");
  add(avx512bw, "avx512bw");
  add(avx512vl, "avx512vl");
  add(avx512dq, "avx512dq");
  add(avx512vnni, "avx512vnni");
  add(avx512bf16, "avx512bf16");
  add(avx512vbmi, "avx512vbmi");
  add(avx_vnni, "avxvnni");
  add(intel, "intel");
  return s.empty() ? "baseline x86-64" : s;
}

}  // namespace lumen
