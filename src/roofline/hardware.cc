#include "roofline/hardware.h"

#include <unistd.h>

#include <cstdio>

#include "roofline/membw.h"
#include "roofline/peak_flops.h"

namespace lumen::roofline {

double matmul_flop_rate(const Hardware& hw, double weight_bits, bool tensor_cores) {
  if (weight_bits < 16 && hw.int8_for_quantized) return hw.ops_int8;
  return tensor_cores ? hw.flops_fp16_tensor : hw.flops_fp16;
}

double attention_flop_rate(const Hardware& hw, bool tensor_cores) {
  return tensor_cores ? hw.flops_fp16_tensor : hw.flops_fp16;
}

// Published figures. Bandwidth and memory as the vendor states them; FLOP rates dense
// (no 2:4 sparsity).
//
// rtx4090   NVIDIA Ada Lovelace architecture whitepaper (GeForce RTX 4090): 1008 GB/s GDDR6X,
//           24 GB, peak FP16 (non-tensor) 82.58 TFLOPS, FP16 tensor with FP32 accumulate
//           165.2 TFLOPS, INT8 tensor 660.6 TOPS.
// a100-80g  NVIDIA A100 80GB SXM datasheet / Ampere whitepaper: 2039 GB/s HBM2e, 80 GB,
//           FP16 (non-tensor) 78 TFLOPS, FP16 tensor 312 TFLOPS, INT8 tensor 624 TOPS.
// h100-sxm  NVIDIA H100 datasheet / Hopper whitepaper (H100 SXM5): 3.35 TB/s HBM3, 80 GB,
//           FP16 vector FMA 133.8 TFLOPS, FP16 tensor 989.4 TFLOPS, INT8 tensor 1978.9 TOPS.
// h200      NVIDIA H200 datasheet (SXM): 4.8 TB/s HBM3e, 141 GB; the same GH100 compute
//           as the H100 SXM (989.4 TFLOPS FP16 tensor, 1978.9 TOPS INT8; 133.8 non-tensor).
// m2-ultra  Apple M2 Ultra announcement (June 2023): 800 GB/s, up to 192 GB unified
//           memory, 76-core GPU "up to 27.2 teraflops" (FP32; the GPU's FP16 rate is the
//           same, and it has no faster int8 path: the 31.6 TOPS Neural Engine is not what
//           LLM runtimes use).
std::span<const HardwarePreset> hardware_presets() {
  static constexpr HardwarePreset kPresets[] = {
      {"rtx4090", 1008, 24, 82.58, 165.2, 660.6, "NVIDIA GeForce RTX 4090",
       "Ada Lovelace whitepaper"},
      {"a100-80g", 2039, 80, 78, 312, 624, "NVIDIA A100 80GB SXM", "A100 datasheet"},
      {"h100-sxm", 3350, 80, 133.8, 989.4, 1978.9, "NVIDIA H100 SXM5", "H100 datasheet, Hopper whitepaper"},
      {"h200", 4800, 141, 133.8, 989.4, 1978.9, "NVIDIA H200 SXM", "H200 datasheet"},
      {"m2-ultra", 800, 192, 27.2, 27.2, 27.2, "Apple M2 Ultra, 76-core GPU", "Apple M2 Ultra announcement"},
  };
  return kPresets;
}

std::string hardware_preset_names() {
  std::string names;
  for (const HardwarePreset& p : hardware_presets()) names += std::string(p.name) + ", ";
  return names + "this";
}

Result<Hardware> hardware_preset(std::string_view name, Units units, std::string_view flag) {
  for (const HardwarePreset& p : hardware_presets()) {
    if (name != p.name) continue;
    Hardware hw;
    hw.name = p.name;
    hw.description = std::string(p.description) + " (published: " + p.source + ")";
    hw.read_bytes_per_s = p.bandwidth_gb_s * unit_scale(units, 3);
    hw.memory_bytes = p.memory_gb * unit_scale(units, 3);
    hw.flops_fp16 = p.fp16_tflops * unit_scale(units, 4);
    hw.flops_fp16_tensor = p.fp16_tensor_tflops * unit_scale(units, 4);
    hw.ops_int8 = p.int8_tops * unit_scale(units, 4);
    return hw;
  }
  return error(std::string(flag) + ": unknown hardware '" + std::string(name) + "' (known: " +
               hardware_preset_names() + ")");
}

Hardware measure_this_machine(ThreadPool& pool, size_t membw_bytes, bool huge_pages) {
  Hardware hw;
  hw.name = "this";
  hw.measured = true;
  hw.n_threads = pool.n_threads();
  const MembwResult bw = measure_read_bandwidth_detailed(pool, membw_bytes, huge_pages);
  const PeakRates peak = measure_peak_rates(pool);
  hw.read_bytes_per_s = bw.best_bytes_per_s;
  hw.flops_fp16 = peak.flops_f32;
  hw.flops_fp16_tensor = peak.flops_f32;
  hw.ops_int8 = peak.ops_int8;
  hw.int8_for_quantized = true;
  hw.isa = peak.isa;
  hw.bandwidth_disturbed = bw.n_clean_passes == 0;
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page_bytes = sysconf(_SC_PAGE_SIZE);
  hw.memory_bytes = pages > 0 && page_bytes > 0 ? static_cast<double>(pages) * page_bytes : 0.0;
  char clean[96];
  if (bw.n_clean_passes > 0)
    std::snprintf(clean, sizeof clean, "best of %d undisturbed passes (of %d; median %.1f GB/s)", bw.n_clean_passes,
                  bw.n_passes, bw.median_bytes_per_s / 1e9);
  else
    std::snprintf(clean, sizeof clean, "best of %d passes, none undisturbed (busy machine: a lower bound)",
                  bw.n_passes);
  char desc[320];
  std::snprintf(desc, sizeof desc,
                "this machine, measured with %d threads: read bandwidth %s over %zu MiB%s; %s f32 FMA and int8 "
                "dot loops; memory = RAM",
                hw.n_threads, clean, bw.n_bytes >> 20, bw.huge_pages ? " in huge pages" : "", peak.isa.c_str());
  hw.description = desc;
  return hw;
}

}  // namespace lumen::roofline
