// Machines for the roofline planner: published figures of named parts, or this machine,
// measured. All fields are in base units (bytes, bytes/s, FLOP/s); a preset's published
// figures are converted with the chosen Units convention (see units.h).
#pragma once

#include <cstddef>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"
#include "base/thread_pool.h"
#include "roofline/units.h"

namespace lumen::roofline {

struct Hardware {
  std::string name;               // "rtx4090", "this"
  std::string description;        // what it is, where the figures come from
  double read_bytes_per_s = 0;    // memory bandwidth
  double memory_bytes = 0;        // memory for weights + KV cache
  double flops_fp16 = 0;          // dense fp16 FLOP/s without matrix units (CPU: f32 FMA,
                                  // which is how lumen multiplies f16/bf16 weights)
  double flops_fp16_tensor = 0;   // dense fp16 FLOP/s on tensor cores (== flops_fp16 without)
  double ops_int8 = 0;            // dense int8 OP/s, 2 per multiply-add
  // Quantized weights multiply at the int8 rate: true for lumen on a CPU (activations are
  // quantized to 8-bit blocks, dot products are integer); false for GPU presets, whose
  // weight-only quantized kernels dequantize to fp16.
  bool int8_for_quantized = false;
  bool measured = false;          // figures measured on this machine
  int n_threads = 0;              // threads the measurement used (measured only)
  std::string isa;                // SIMD the FLOP measurement used (measured only)
  // No bandwidth pass ran undisturbed (the machine is busy): the bandwidth is a lower bound.
  bool bandwidth_disturbed = false;
};

// Which compute roof applies to a matmul with `weight_bits` weights.
double matmul_flop_rate(const Hardware& hw, double weight_bits, bool tensor_cores);
// Attention (QK^T, PV) runs on the activations' float path.
double attention_flop_rate(const Hardware& hw, bool tensor_cores);

struct HardwarePreset {
  const char* name;
  double bandwidth_gb_s;  // published memory bandwidth, "GB/s"
  double memory_gb;       // published memory size, "GB"
  double fp16_tflops;     // dense fp16, no tensor cores (SIMT / vector FMA)
  double fp16_tensor_tflops;  // dense fp16 on tensor cores, fp32 accumulate
  double int8_tops;       // dense int8
  const char* description;
  const char* source;
};
std::span<const HardwarePreset> hardware_presets();
std::string hardware_preset_names();  // "rtx4090, a100-80g, ..., this"

// A named preset read in `units`. Error (naming `flag` and the value) for an unknown name;
// "this" is not a preset (use measure_this_machine).
Result<Hardware> hardware_preset(std::string_view name, Units units, std::string_view flag = "--hw");

// Measures this machine with the pool's threads: read bandwidth over `membw_bytes`
// (membw.h) and peak f32 / int8 rates (peak_flops.h); memory = physical RAM.
// Blocking, ~0.5 s.
Hardware measure_this_machine(ThreadPool& pool, size_t membw_bytes, bool huge_pages);

}  // namespace lumen::roofline
