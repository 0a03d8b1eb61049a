// Proposers: where speculative tokens come from. One small interface (the plug point for
// n-gram / prompt lookup, a draft model, and later EAGLE-style heads); the engine asks a
// batch of sequences at once so that a model-based proposer can run one forward batch per
// proposed position instead of one per sequence.
//
// Single-threaded by contract (the engine thread).
#pragma once

#include <cstdint>
#include <span>

#include "sample/sampler.h"

namespace lumen::spec {

// One sequence's request for proposals, and the answer.
struct ProposeSeq {
  uint64_t seq_id = 0;
  std::span<const int32_t> tokens = {};  // every committed token (prompt + generated)
  int32_t max_n = 0;                // propose at most this many (> 0)
  // The request's sampler settings (a sampling proposer draws under them); null = greedy.
  const sample::SamplingParams* sampling = nullptr;
  // Output: the proposed tokens in out_tokens[0, n_out). A proposer that samples (a draft
  // model at temperature > 0) writes the distribution it drew token j from into
  // out_probs[j * n_vocab, (j + 1) * n_vocab) and sets probs_valid; a deterministic one
  // leaves probs_valid false (q = one-hot at the token; see rejection.h).
  std::span<int32_t> out_tokens = {};  // [max_n]
  std::span<float> out_probs = {};  // [max_n * n_vocab] or empty
  int32_t n_out = 0;
  bool probs_valid = false;
};

class Proposer {
 public:
  virtual ~Proposer() = default;
  // Fills each request's output. Allocates nothing per call beyond what the proposer
  // sized at creation.
  virtual void propose(std::span<ProposeSeq> seqs) = 0;
  // The sequence ended or restarts from scratch (preemption): forget its state.
  virtual void release(uint64_t seq_id) = 0;
  virtual const char* name() const = 0;
  // Whether it draws proposals from distributions it reports (ProposeSeq::out_probs must
  // then have room for max_n rows of n_vocab).
  virtual bool samples() const { return false; }
};

}  // namespace lumen::spec
