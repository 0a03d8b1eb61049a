// Sampling: logits -> next token id. Per-request state (RNG, penalty history) lives in a
// Sampler; buffers are sized once at construction, so sampling allocates nothing per token.
//
// Order of the chain (llama.cpp's default order): penalties (repetition / presence /
// frequency over the last `penalty_last_n` tokens) -> top-k -> top-p -> min-p ->
// temperature -> draw. temperature <= 0 means greedy: argmax, ties to the lowest id.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

namespace lumen::sample {

struct SamplingParams {
  float temperature = 0.8f;
  int32_t top_k = 40;            // <= 0: disabled
  float top_p = 0.95f;           // >= 1: disabled
  float min_p = 0.05f;           // <= 0: disabled
  float repeat_penalty = 1.0f;   // 1: disabled
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;   // window of the penalties; -1: whole history
  uint64_t seed = 0;
};

class Sampler {
 public:
  Sampler(const SamplingParams& params, int32_t n_vocab);

  // Picks the next token. `logits` has n_vocab entries and is left unchanged.
  int32_t sample(std::span<const float> logits);
  // Records a token in the penalty history (prompt tokens and generated tokens).
  void accept(int32_t id);
  void reset_history();

  const SamplingParams& params() const { return params_; }

 private:
  SamplingParams params_;
  int32_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;     // ring of the last penalty_last_n tokens
  std::vector<float> work_logits_;   // [n_vocab]
  std::vector<int32_t> candidates_;  // [n_vocab]
  std::vector<int32_t> counts_;      // [n_vocab] occurrences within the window
};

// argmax with ties to the lowest id.
int32_t argmax(std::span<const float> logits);

// log-softmax helpers used for perplexity and logprobs (double accumulation as
// llama-perplexity: float max, double sum of expf(l - max)).
double log_softmax_at(std::span<const float> logits, int32_t id);
double logsumexp(std::span<const float> logits);

}  // namespace lumen::sample
