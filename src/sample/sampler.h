// Sampling: logits -> next token id. Per-request state (RNG, penalty history) lives in a
// Sampler; buffers are sized once at construction, so sampling allocates nothing per token.
//
// Order of the chain (llama.cpp's default order): penalties (repetition / presence /
// frequency over the last `penalty_last_n` tokens) -> top-k -> top-p -> min-p ->
// temperature -> draw. temperature <= 0 means greedy: argmax, ties to the lowest id.
//
// Each filter sees the distribution left by the one before it, at temperature 1:
//   penalties  for every token t with count c > 0 in the window:
//                l = l > 0 ? l / repeat_penalty : l * repeat_penalty   (llama.cpp's rule)
//                l -= c * frequency_penalty + presence_penalty
//   top-k      keep the k largest logits (ties: lower id first)
//   top-p      softmax over the survivors; keep the shortest prefix (by logit desc, then id
//              asc) whose cumulative probability reaches top_p, at least one token
//   min-p      keep tokens with p >= min_p * p_max, i.e. l >= l_max + log(min_p)
//   draw       w_i = exp((l_i - l_max) / temperature) over the survivors; see sample().
//
// Not thread-safe: one Sampler per request, used by one thread at a time.
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <vector>

#include "base/status.h"

namespace lumen::sample {

struct SamplingParams {
  float temperature = 0.8f;
  int32_t top_k = 40;            // <= 0: disabled
  float top_p = 0.95f;           // >= 1: disabled
  float min_p = 0.05f;           // <= 0: disabled
  float repeat_penalty = 1.0f;   // 1: disabled
  float presence_penalty = 0.0f;
  float frequency_penalty = 0.0f;
  int32_t penalty_last_n = 64;   // window of the penalties; -1: whole history; 0: disabled
  uint64_t seed = 0;
};

// Checks the parameters a request may carry (finite numbers, repeat_penalty > 0,
// top_p in (0, 1] or disabled, penalty_last_n >= -1). The message names the field and value.
Status validate(const SamplingParams& params);

class Sampler {
 public:
  // Precondition: validate(params).ok() and n_vocab > 0. Holds ~16 bytes per vocab entry,
  // so it is move-only.
  Sampler(const SamplingParams& params, int32_t n_vocab);
  Sampler(Sampler&&) noexcept = default;
  Sampler& operator=(Sampler&&) noexcept = default;
  Sampler(const Sampler&) = delete;
  Sampler& operator=(const Sampler&) = delete;

  // Picks the next token. `logits` has n_vocab entries and is left unchanged; NaN logits
  // count as -inf. Allocates nothing.
  //
  // `allowed` (optional, words of 64 ids, bit id % 64 of word id / 64): a constraint such
  // as a grammar's token mask. Tokens outside it are -inf before every filter, so the chain
  // (penalties, top-k, top-p, min-p, temperature) works on the allowed tokens only; when no
  // allowed token has a finite logit, the lowest allowed id is returned. Precondition: at
  // least one bit set among the first n_vocab.
  //
  // The draw (temperature > 0) is defined exactly, so a seed reproduces a sequence:
  //   u = (rng() >> 11) * 2^-53, one 64-bit mt19937_64 output per call (also when only
  //   one candidate survives); the survivors are walked in ascending token id, adding
  //   w_i = expf((l_i - l_max) / temperature) (float) into a double running sum, and the
  //   first id whose running sum exceeds u * sum(w) is returned.
  int32_t sample(std::span<const float> logits, std::span<const uint64_t> allowed = {});
  // The distribution sample() draws from, as dense probabilities: probs[id] for every id
  // (0 for the ids the chain filtered out), computed with the same penalties, filters and
  // weights as sample() and normalised by their double sum. Greedy (temperature <= 0): 1 at
  // the argmax. Consumes no random numbers. probs.size() == n_vocab; allocates nothing.
  // Speculative verification applies the chain through this, so that a verified token has
  // exactly the distribution sample() would have drawn it from. `allowed`: as in sample().
  void distribution(std::span<const float> logits, std::span<float> probs, std::span<const uint64_t> allowed = {});
  // One uniform number in [0, 1) from the request's stream: (rng() >> 11) * 2^-53.
  double uniform();
  // Whether sample() is an argmax (temperature <= 0, or so small that 1/T overflows).
  bool greedy() const;
  // Records a token in the penalty history (prompt tokens and generated tokens).
  // Allocates nothing (the window ring is reserved at construction).
  void accept(int32_t id);
  void reset_history();

  const SamplingParams& params() const { return params_; }
  // Tokens whose count in the penalty window is > 0 (any order); for tests and logging.
  std::span<const int32_t> penalized_ids() const { return active_ids_; }
  int32_t penalty_count(int32_t id) const { return counts_[static_cast<size_t>(id)]; }

 private:
  bool penalties_enabled() const;
  void count_add(int32_t id);
  void count_remove(int32_t id);
  void apply_penalties();                       // on work_logits_
  // Each filter returns the new candidate count.
  size_t apply_top_k();
  size_t apply_top_p_sorted(size_t n_cand, float max_logit);
  size_t apply_top_p_unsorted(float max_logit);
  size_t apply_min_p(size_t n_cand, bool sorted, float max_logit);
  int32_t draw(size_t n_cand, bool sorted, float max_logit);
  // The token when filter() leaves no candidate (a logit is infinite): the argmax, or with
  // a mask whose ids are all -inf, the lowest allowed id.
  int32_t pick_without_candidates(std::span<const uint64_t> allowed, float max_logit);
  // Penalties and filters into work_logits_ / candidates_ (see sample()). Returns the
  // candidate count; *sorted and *max_logit describe the list. Precondition: !greedy().
  // A return of 0 means a logit is infinite (nothing possible, or a certain token): the
  // caller reads argmax(work_logits_).
  size_t filter(std::span<const float> logits, std::span<const uint64_t> allowed, bool* sorted, float* max_logit);
  void copy_logits(std::span<const float> logits, std::span<const uint64_t> allowed);
  size_t allowed_ids(std::span<const uint64_t> allowed);  // into candidates_, ascending

  SamplingParams params_;
  int32_t n_vocab_;
  std::mt19937_64 rng_;
  std::vector<int32_t> history_;     // ring of the last penalty_last_n tokens (window > 0)
  size_t history_head_ = 0;          // index of the oldest entry once the ring is full
  std::vector<float> work_logits_;   // [n_vocab] penalized logits, then draw weights
  std::vector<int32_t> candidates_;  // [n_vocab] surviving token ids
  std::vector<int32_t> counts_;      // [n_vocab] occurrences within the window
  std::vector<int32_t> active_ids_;  // ids with counts_ > 0; capacity n_vocab
  std::vector<int32_t> active_idx_;  // [n_vocab] position in active_ids_, or -1
};

// argmax with ties to the lowest id. NaN entries never win. Precondition: non-empty.
int32_t argmax(std::span<const float> logits);
// The same with NaN entries read as -inf (what greedy sampling sees): when nothing is above
// -inf, id 0.
int32_t argmax_nan_as_neg_inf(std::span<const float> logits);

// log-softmax helpers used for perplexity and logprobs (double accumulation as
// llama-perplexity: float max, double sum of expf(l - max)).
double log_softmax_at(std::span<const float> logits, int32_t id);
double logsumexp(std::span<const float> logits);

// The k most likely tokens of the raw distribution (for OpenAI-style logprobs), sorted by
// logprob descending, ties by id ascending. O(n log k); allocates only the k results.
struct TokenLogprob {
  int32_t id;
  double logprob;
};
std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int32_t k);

}  // namespace lumen::sample
