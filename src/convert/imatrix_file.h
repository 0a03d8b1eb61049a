// Importance matrices in llama.cpp's file formats: llama-imatrix's imatrix.dat (the format of
// llama.cpp c392e5094; llama-quantize --imatrix reads it) and the GGUF form newer llama-imatrix
// writes by default (imatrix.gguf: NAME.in_sum2 / NAME.counts tensors, see parse_imatrix_gguf
// in the .cc). `lumen imatrix` writes either.
//
// An importance matrix holds, for every weight matrix the model multiplies activations with,
// the mean of x^2 of the activations each of its input columns met (over the calibration
// tokens). The quantizers weigh each weight's error by it (quantize_types.h).
//
// File layout (little-endian, no header):
//   i32 n_entries
//   n_entries x { i32 name_len, name bytes (no NUL), i32 n_calls, i32 n_values,
//                 f32 values[n_values] }      values[j] = sum of x_j^2 / count_j * n_calls
//   then, optionally (newer files): i32 n_chunks, i32 dataset_len, dataset bytes
// A 3-D (MoE) weight has n_experts * n_columns values, expert-major. Readers divide by
// n_calls to get the mean x^2 (llama-quantize's load_imatrix), so the stored form is "sum
// per call"; an entry for each of attn_q, attn_k and attn_v even though they share an input.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"

namespace lumen::convert {

struct ImatrixEntry {
  int32_t n_calls = 0;        // matrix multiplications it was collected over
  std::vector<float> values;  // as stored: mean x^2 per column times n_calls
};

struct Imatrix {
  std::map<std::string, ImatrixEntry> entries;  // by tensor name
  int32_t n_chunks = 0;                         // chunks of calibration text (0: not stored)
  std::string dataset;                          // the calibration file's name, as given

  // The importance weights of tensor `name` as the quantizers use them (values / n_calls,
  // in f32 as llama-quantize computes them), or empty if the matrix has no entry.
  std::vector<float> weights(std::string_view name) const;
};

// Either format (a GGUF file is recognised by its magic). Errors name the file, the entry and
// what is wrong (truncated, negative sizes, non-finite or negative values, duplicate names,
// trailing bytes; in a GGUF file also missing keys, unpaired or mis-shaped tensors).
Result<Imatrix> read_imatrix(const std::string& path);
Result<Imatrix> parse_imatrix(std::string_view bytes);
// Writes atomically (to path + ".tmp", then renamed).
Status write_imatrix(const std::string& path, const Imatrix& imatrix);

// One weight's statistics in the GGUF form, for each of its n_mat matrices (1, or the
// experts of a 3-D weight): per column the sum of x^2 over the rows that met it, and the
// count of those rows (0: an expert no row was routed to).
struct ImatrixSums {
  std::vector<float> in_sum2;  // [n_mat][n_columns]
  std::vector<float> counts;   // [n_mat]
};
// The GGUF form newer llama-imatrix writes (what parse_imatrix reads back; llama-quantize of
// newer llama.cpp reads it, c392e5094's does not). chunk_size: tokens per chunk (-c).
Status write_imatrix_gguf(const std::string& path, const std::map<std::string, ImatrixSums>& sums,
                          const std::string& dataset, int32_t n_chunks, int32_t chunk_size);
std::string serialize_imatrix(const Imatrix& imatrix);

}  // namespace lumen::convert
