// `lumen imatrix`: an importance matrix (convert/imatrix_file.h) from running calibration
// text through the model, as llama-imatrix makes one.
//
// For every weight matrix in a layer (blk.*; not the output matrix, as llama-imatrix without
// --process-output) and every forward pass with at least 16 tokens, the mean of x^2 of its
// input activations per column (over the tokens) is accumulated, from the model's matmul
// input taps (model.h):
//   attn_norm -> attn_q, attn_k, attn_v (or attn_qkv)   attn_out -> attn_output
//   ffn_norm  -> ffn_gate, ffn_up                         ffn_act  -> ffn_down
// A pass is one chunk of n_ctx tokens when the batch holds a chunk (n_calls counts passes,
// as llama-imatrix's ncall). Sums are kept in double; the file stores f32.
#pragma once

#include <cstdint>
#include <map>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "convert/imatrix_file.h"
#include "gguf/model_file.h"

namespace lumen::calib {

class ImatrixCollector {
 public:
  // The matrices to collect for: every layer matrix of `file` that a tap feeds.
  explicit ImatrixCollector(const gguf::ModelFile& file);

  // The model tap (Engine::set_model_tap): accumulates the taps that feed matrices.
  void on_tap(std::string_view tap_name, int32_t layer_idx, std::span<const float> values);

  // Matrices that were fed at least once, for imatrix_file.h.
  convert::Imatrix result(int32_t n_chunks, std::string dataset) const;
  // The same statistics in the GGUF form (sums of x^2 and token counts, convert::ImatrixSums).
  std::map<std::string, convert::ImatrixSums> sums() const;
  size_t n_matrices() const { return stats_.size(); }

 private:
  struct Stat {
    int64_t n_in = 0;             // columns (the matrix's input width)
    std::vector<double> sum_x2;   // [n_in]
    int64_t n_rows = 0;           // activation rows summed
    int32_t n_calls = 0;          // passes
  };
  // (tap name, layer) -> the matrices its activations are the input of.
  std::map<std::pair<std::string, int32_t>, std::vector<std::string>> targets_;
  std::map<std::string, Stat> stats_;
};

}  // namespace lumen::calib
