// Activation-aware weight scaling (AWQ) as `lumen quantize --awq` applies it: per input
// channel j of the matrices that read a normed activation, a scale s[j] > 0 is folded into
// the file so that
//
//     norm weight g'[j] = g[j] / s[j]           (the activation x'[j] = x[j] / s[j])
//     matrix      W'[:, j] = W[:, j] * s[j]     (then quantized)
//     W' x' = W x exactly before quantization
//
// Channels with large activations get s > 1: their weights are scaled up before rounding, so
// the quantization error they carry into the output shrinks by 1/s. The file stays a plain
// GGUF that any reader (llama.cpp included) runs. The scales come from a search on
// calibration text (calib/awq.h); this struct is what the writer needs.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace lumen::convert {

struct AwqScales {
  // matrix name -> s, one per input column (ne[0])
  std::map<std::string, std::vector<float>> column_scales;
  // norm weight name -> s (its elements are divided by it)
  std::map<std::string, std::vector<float>> norm_divisors;
};

}  // namespace lumen::convert
