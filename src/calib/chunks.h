// Running a text through the model the way llama-perplexity (and llama-imatrix) do, for the
// measurements built on it: perplexity, importance matrices, KL-divergence.
//
//   tokens:  |<-------- chunk 0 -------->|<-------- chunk 1 -------->| ... (tail unused)
//            BOS t1 t2 ... t_{n_ctx-1}     BOS ...
//   scored:                |<-- second half -->|   positions n_ctx/2 .. n_ctx-2 of a chunk,
//                                                  each predicting the token after it
//
// Each chunk is evaluated from an empty cache (the engine's prefix cache never matches:
// chunks differ) with its first token replaced by BOS when the model adds one, so every
// scored token sees at least n_ctx/2 tokens of context.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "base/status.h"
#include "engine/engine.h"

namespace lumen::calib {

struct ChunkObserver {
  // Logits at scored position `pos` of chunk `chunk_idx` (pos in [n_ctx/2, n_ctx - 2]);
  // next_token is the token they predict. Optional.
  std::function<void(int64_t chunk_idx, int64_t pos, int32_t next_token, std::span<const float> logits)> on_scored;
  // After each chunk: its summed negative log-likelihood over the scored positions (each term
  // from the engine's log-softmax in double) and their count. Optional.
  std::function<void(int64_t chunk_idx, double nll_sum, int64_t n_scored)> on_chunk_done;
};

// The number of whole chunks of n_ctx in n_tokens, capped by max_chunks (< 0: no cap).
int64_t count_chunks(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks);

// Runs chunks [0, n_chunks) of `tokens` through `eng`. The engine must have been created
// with max_seqs >= 1 and logit rows for a whole chunk (EngineConfig::max_logit_rows >=
// max_batch_tokens). Errors: a chunk the engine rejects or fails.
Status run_chunks(engine::Engine& eng, std::span<const int32_t> tokens, int64_t n_ctx, int64_t n_chunks,
                  const ChunkObserver& observer);

}  // namespace lumen::calib
