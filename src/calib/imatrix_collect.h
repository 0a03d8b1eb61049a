// `lumen imatrix`: an importance matrix (convert/imatrix_file.h) from running calibration
// text through the model, as llama-imatrix (llama.cpp c392e5094) makes one.
//
// For every weight matrix in a layer (blk.*; not the output matrix, as llama-imatrix without
// --process-output) the sum of x^2 of its input activations per column is accumulated, with
// the count of rows summed, from the model's matmul input taps (model.h):
//   attn_norm -> attn_q, attn_k, attn_v (or attn_qkv)   attn_out -> attn_output
//   ffn_norm  -> ffn_gate, ffn_up, and in a mixture-of-experts layer the router
//                ffn_gate_inp and the shared expert's ffn_gate_shexp, ffn_up_shexp,
//                ffn_gate_inp_shexp
//   ffn_act   -> ffn_down                             ffn_act_shexp -> ffn_down_shexp
// These are dense matrices: a forward pass of fewer than 16 tokens is not collected, and
// n_calls counts the passes that were (one chunk of n_ctx tokens when the batch holds one).
//
// The 3-D expert weights ffn_gate_exps / ffn_up_exps / ffn_down_exps [n_expert][rows][cols]
// are collected per expert, over the rows routed to it (taps ffn_moe_in -> gate and up,
// ffn_moe_act -> down): n_expert x n_columns sums, expert-major, and a row count per expert.
// As llama-imatrix collects its indirect products (MUL_MAT_ID), every pass counts a call
// (the layer's ffn_moe_logits tap), whatever its size and whether or not an expert got rows.
// Sums are kept in double; the files store f32.
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
  // expert_idx: the expert of a per-expert tap, -1 otherwise (model.h).
  void on_tap(std::string_view tap_name, int32_t layer_idx, int32_t expert_idx, std::span<const float> values);

  // Matrices that were fed at least once, in the .dat form of imatrix_file.h. As
  // c392e5094's llama-imatrix, an expert weight some expert of which got no row is left out
  // (the format has one call count per matrix, no row count per expert): see partial().
  convert::Imatrix result(int32_t n_chunks, std::string dataset) const;
  // The expert weights result() leaves out: some of their experts got no row.
  std::vector<std::string> partial() const;
  // The same statistics in the GGUF form (sums of x^2 and row counts per expert,
  // convert::ImatrixSums); this form keeps the partial ones (count 0 for an unused expert),
  // as newer llama-imatrix does.
  std::map<std::string, convert::ImatrixSums> sums() const;
  size_t n_matrices() const { return stats_.size(); }

 private:
  struct Stat {
    int64_t n_in = 0;               // columns (the matrix's input width)
    int32_t n_mat = 1;              // experts of a 3-D weight, 1 for a dense matrix
    std::vector<double> sum_x2;     // [n_mat][n_in]
    std::vector<int64_t> n_rows;    // [n_mat] activation rows summed
    int32_t n_calls = 0;            // passes
    bool fed = false;               // a tap fed it at least once
  };
  // (tap name, layer) -> the matrices its activations are the input of.
  std::map<std::pair<std::string, int32_t>, std::vector<std::string>> targets_;
  std::map<std::string, Stat> stats_;
};

}  // namespace lumen::calib
