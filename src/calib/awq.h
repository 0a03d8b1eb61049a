// AWQ (activation-aware weight quantization) for `lumen quantize --awq TEXT`: the search of
// the per-channel scales that convert/awq_scales.h folds into the file.
//
// Where a norm precedes the matrices (its weight can absorb 1/s):
//   attn_norm -> attn_q, attn_k, attn_v      ffn_norm -> ffn_gate, ffn_up
// For each such group of each layer, from calibration activations X (the norm's output):
//   a[j]   = mean |x_j| over all calibration tokens
//   s(α)   = a^α / sqrt(max(a^α) min(a^α))        (normalized so the scales straddle 1)
//   err(α) = sum over the group's matrices of || X W^T - (X / s) Q(W s)^T ||^2
//            on a sample of X's rows, Q = quantize then dequantize with the tensor's planned
//            type (and the importance matrix, scaled by 1/s^2, when one is given)
//   α*     = argmin over α in {0, 1/n, ..., 1}     (α = 0 is s = 1: plain quantization, so
//            the search never does worse than it on the sample)
// attn_output and ffn_down are not scaled: no norm precedes them. (Their scales could be
// folded into attn_v's rows / ffn_up's rows instead, which changes those matrices'
// quantization too; lumen leaves them as plain quantization.)
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "base/thread_pool.h"
#include "convert/awq_scales.h"
#include "convert/imatrix_file.h"
#include "convert/progress.h"
#include "convert/type_rules.h"
#include "gguf/model_file.h"
#include "kernels/kernel_table.h"

namespace lumen::calib {

// Collects the normed activations of every layer from the model taps (attn_norm, ffn_norm):
// the mean |x| per channel over every token, and up to max_rows rows (evenly spread over the
// passes) for the error search.
class AwqCollector {
 public:
  AwqCollector(int64_t n_embd, int32_t n_layer, int64_t rows_per_pass, int64_t max_rows);
  void on_tap(std::string_view tap_name, int32_t layer_idx, std::span<const float> values);

  struct Group {
    std::vector<double> sum_abs;  // [n_embd]
    int64_t n_tokens = 0;
    std::vector<float> rows;      // [n_rows][n_embd]
    int64_t n_rows() const { return static_cast<int64_t>(rows.size()) / static_cast<int64_t>(sum_abs.size()); }
  };
  // "attn_norm" / "ffn_norm" of layer il (null: not seen).
  const Group* group(std::string_view tap_name, int32_t il) const;
  int64_t n_embd() const { return n_embd_; }

 private:
  int64_t n_embd_;
  int64_t rows_per_pass_;
  int64_t max_rows_;
  std::map<std::pair<std::string, int32_t>, Group> groups_;
};

struct AwqGroupResult {
  std::string norm;                   // "blk.3.attn_norm.weight"
  std::vector<std::string> matrices;  // the scaled matrices
  float alpha = 0;                    // the chosen exponent (0: unscaled)
  double err_plain = 0;               // output error at α = 0 (on the sample)
  double err_best = 0;                // at α*
};

struct AwqResult {
  convert::AwqScales scales;  // only groups with α* > 0
  std::vector<AwqGroupResult> groups;
};

struct AwqSearchOptions {
  int n_grid = 20;                               // α in {0, 1/n_grid, ..., 1}
  const convert::Imatrix* imatrix = nullptr;      // as quantize will use it
  convert::Progress* progress = nullptr;         // groups searched
};

// The architectures whose normed activations feed only the scaled matrices (sequential
// blocks, RMSNorm without bias): llama, mistral, qwen2, qwen3.
bool awq_supports_arch(std::string_view arch);

// `types`: the type each tensor will be written in (convert::plan_tensor_types); groups whose
// matrices are not quantized are skipped. Matrices are read (dequantized) from `file`.
Result<AwqResult> search_awq_scales(const gguf::ModelFile& file, const AwqCollector& acts,
                                    const std::map<std::string, DType>& types, const AwqSearchOptions& options,
                                    const kernels::KernelTable& k, ThreadPool& pool);

// The whole of `--awq`: loads the model at model_path into an engine, runs the calibration
// text through it in chunks of n_ctx (calib/chunks.h) collecting the normed activations,
// plans the tensor types under `rules` as quantize_model will, and searches the scales.
struct AwqRunOptions {
  int32_t n_ctx = 512;
  int64_t max_chunks = 16;
  int64_t max_rows = 512;  // activation rows per group kept for the error search
  int n_threads = 1;
  AwqSearchOptions search;
};
struct AwqRunReport {
  int64_t n_tokens = 0;
  int64_t n_chunks = 0;
};
Result<AwqResult> awq_from_text(const std::string& model_path, const std::string& text,
                                const convert::TypeRules& rules, const AwqRunOptions& options,
                                AwqRunReport* report);

}  // namespace lumen::calib
