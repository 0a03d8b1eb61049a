// Predicted speed of lumen itself on this machine, for `lumen bench --vs-roofline`:
// the roofline of one model file at its stored tensor types, with the machine's measured
// rates, for the same tests bench runs (pp N, tg N at depth d).
//
//   MachineRates rates = measure_machine_rates(pool);           // once, same threads as the run
//   Result<Prediction> p = predict_lumen(file, rates, {.n_prompt = 512, .n_gen = 128});
//   printf("tg128 %.1f tok/s (%.0f%% of %.1f predicted, %s-bound)\n",
//          measured, 100 * measured / p->tg_tok_s, p->tg_tok_s, p->binding_roof);
//
// What it counts, per generated token: every byte of every matrix and norm as stored,
// one row of the embedding table, the KV cache of the context read once (and the new
// token's K, V written); multiply-adds of quantized matrices at the int8 dot-product rate
// (lumen quantizes activations to 8-bit blocks), of float matrices and attention at the
// f32 FMA rate. A decode step is two phases, each at its own roof, and takes their sum:
// the matrices (weights read, matmul arithmetic) then attention (KV read, Q.K and P.V
// arithmetic). Prompt processing reads the weights once for the whole prompt and
// computes lm_head for the last token only. The predictions are upper bounds: a kernel
// at 80% of the memory roof is doing well.
#pragma once

#include <cstddef>
#include <cstdint>

#include "base/status.h"
#include "base/thread_pool.h"
#include "gguf/model_file.h"
#include "roofline/membw.h"
#include "roofline/shape.h"

namespace lumen::roofline {

// The machine's roofs, at the thread count the run uses.
struct MachineRates {
  double read_bytes_per_s = 0;  // e.g. measure_read_bandwidth(pool, ...) * 1e9
  double flops_f32 = 0;         // f32 FMA FLOP/s
  double ops_int8 = 0;          // int8 dot-product OP/s (2 per multiply-add)
};
// Measures all three with the pool's threads (membw.h, peak_flops.h). Blocking, ~0.5 s.
MachineRates measure_machine_rates(ThreadPool& pool, size_t membw_bytes = kDefaultMembwBytes,
                                   bool huge_pages = false);

struct PredictOptions {
  int64_t n_prompt = 512;         // pp test: prompt tokens in one pass
  int64_t n_gen = 128;            // tg test: tokens generated one at a time
  int64_t n_depth = 0;            // tokens already in the KV cache before either test (-d)
  double kv_bytes_per_elem = 2;   // 2 for an f16 KV cache, 4 for f32
};

struct Prediction {
  double tg_tok_s = 0;                 // generation rate over the n_gen tokens
  double pp_tok_s = 0;                 // prompt tokens per second for one n_prompt pass
  const char* binding_roof = "";       // tg: "memory" or "compute"
  const char* pp_binding_roof = "";    // pp: "memory" or "compute"
  double weight_bytes_per_token = 0;   // bytes of weights read per generated token
  double kv_bytes_per_token = 0;       // KV bytes one context token adds
  double tg_bytes_per_s = 0;           // the bandwidth tg_tok_s implies (bytes moved / time)
  double tg_ms = 0;                    // predicted time of the whole tg test
  double pp_ms = 0;                    // predicted time of the pp pass
};

// The prefill knee for lumen on this machine: the smallest prompt length whose pass is
// compute-bound at these rates (the pp formulas above, no cached context). Below it a
// pass costs about one read of the weights, the price of a decode step, whatever its
// length; above it every token adds arithmetic. 1 when even one token is compute-bound;
// capped at 65536. The server's default token budget per step is built from it.
int64_t prefill_knee_tokens(const ModelShape& shape, const FileWeights& weights, const MachineRates& rates,
                            double kv_bytes_per_elem = 2);
Result<int64_t> prefill_knee_tokens(const gguf::ModelFile& file, const MachineRates& rates,
                                    double kv_bytes_per_elem = 2);

// From a file: its shape (metadata) and its tensors' stored types. Error when the file
// has no usable shape. Preconditions on the options: n_prompt, n_gen >= 1, n_depth >= 0.
Result<Prediction> predict_lumen(const gguf::ModelFile& file, const MachineRates& rates,
                                 const PredictOptions& options);
// The same from a shape and counted weights (what the file overload calls).
Prediction predict_lumen(const ModelShape& shape, const FileWeights& weights, const MachineRates& rates,
                         const PredictOptions& options);

}  // namespace lumen::roofline
