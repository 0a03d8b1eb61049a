// `lumen quantize`: any container lumen reads (GGUF with f32/f16/bf16 tensors, a Hugging
// Face directory, a llama2.c checkpoint) -> a GGUF v3 file with quantized weight matrices
// that both lumen and llama.cpp load.
//
//   metadata   copied in GGUF naming; general.file_type = llama.cpp's LLAMA_FTYPE for the
//              type, general.quantization_version = 2; lumen-only keys that describe the
//              input layout (lumen.rope_layout, lumen.tie_word_embeddings) are dropped
//   tokenizer  GGUF / llama2.c: the tokenizer.ggml.* arrays already in the metadata;
//              Hugging Face: tokenizer.json converted (tokenizer_to_gguf.h)
//   tensors    types by type_rules.h (llama-quantize's mixes, same type per tensor; 1-D
//              tensors F32); a tied model's output.weight alias of token_embd.weight is not
//              written (a GGUF without output.weight is tied); a tensor already in its target
//              type is copied
//   imatrix    with an importance matrix (imatrix_file.h) each quantized tensor that has an
//              entry is quantized under its weights (the same bytes as llama-quantize
//              --imatrix); the low-bit types that need one refuse to go without (as
//              llama-quantize); quantize.imatrix.* keys record it as llama-quantize does
//   awq        with AWQ scales (awq_scales.h), the listed matrices' columns are multiplied
//              and the listed norm weights divided before writing (quantize.awq.* keys)
//   RoPE       a Hugging Face llama keeps q/k rows in the NeoX ("rotate half") layout, which
//              lumen reads zero-copy with lumen.rope_layout = "neox". llama.cpp's llama arch
//              rotates interleaved pairs, so q and k rows (and biases) are permuted per head
//              the way convert_hf_to_gguf.py does:
//
//                  HF row in head:   s * (head_dim/2) + i      (s = 0: first half, 1: second)
//                  GGUF row in head: 2 * i + s
//
//              qwen2 is NeoX in both, so its rows are left alone.
//
// Input weights must be f32 / f16 / bf16 (or already in the target type); requantizing
// q8_0 / q4_0 / q4_K / q6_K weights needs allow_requantize (quality loss, as llama-quantize's
// --allow-requantize).
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "base/status.h"
#include "convert/awq_scales.h"
#include "convert/imatrix_file.h"
#include "convert/progress.h"
#include "convert/type_rules.h"
#include "gguf/model_file.h"
#include "tensor/dtype.h"

namespace lumen::convert {

struct QuantizeOptions {
  TypeRules rules;                  // rules.has_imatrix is set from `imatrix`
  bool allow_requantize = false;
  int n_threads = 1;
  const Imatrix* imatrix = nullptr;  // importance weights by tensor name, or null
  std::string imatrix_path;          // recorded as quantize.imatrix.file
  Progress* progress = nullptr;      // weights written so far, by tensor
  const AwqScales* awq = nullptr;    // activation-aware scales to fold in, or null
};

struct TensorReport {
  std::string name;
  DType from = DType::kF32;
  DType to = DType::kF32;
  std::vector<int64_t> ne;
  uint64_t n_bytes = 0;
  bool used_imatrix = false;
};

struct QuantizeReport {
  std::string container;           // of the input: "gguf", "safetensors", "llama2c"
  std::string arch;
  std::vector<TensorReport> tensors;
  uint64_t n_bytes_in = 0;         // tensor bytes read
  uint64_t file_bytes = 0;         // size of the written file
  bool permuted_qk = false;        // HF llama q/k rows -> interleaved RoPE layout
  bool dropped_tied_output = false;
  std::string tokenizer;           // "from metadata" or "tokenizer.json -> gpt2/qwen2 (151665 tokens)"
  std::vector<std::string> no_imatrix_entry;  // quantized tensors the importance matrix does not cover
};

// The type quantize_model() gives each tensor of `file` under `rules` (by name).
Result<std::map<std::string, DType>> plan_quantized_types(const gguf::ModelFile& file, const TypeRules& rules);

Status quantize_model(const std::string& in_path, const std::string& out_path, const QuantizeOptions& options,
                      QuantizeReport* report);

}  // namespace lumen::convert
