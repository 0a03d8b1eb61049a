// How much to speculate: the engine's speculation settings and each sequence's adaptive
// draft length.
//
// A verify of k proposed tokens costs about one decode step while decode is memory-bound
// (the weights are read once for all k + 1 positions), so a proposal that fails costs
// little, but not nothing: attention and the output head grow with k, and a draft model
// runs k forward passes. Per sequence, k therefore follows what was accepted:
//
//   all k accepted        -> k + 2 (up to draft_max): proposals are good, reach further
//   a of k accepted       -> a + 1: propose about as far as the last run of good guesses
//   0 accepted, 3 in a row-> pause for `backoff` steps (8, doubling to 256), then probe
//                            once with k = 1: a failed probe pauses again at once (backoff
//                            doubled); any acceptance resets the backoff
//
// and it estimates the per-token acceptance a (decayed counts of accepted proposals and of
// rejections, from a prior of 0.8): the engine caps k where the measured verify cost says
// more proposals stop paying at that acceptance (step_costs.h), and proposes nothing in a
// step whose batch is already compute-bound. It also proposes nothing once a step already
// holds max_step_tokens tokens.
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace lumen::spec {

// kCustom: a Proposer handed to Engine::create (tests; the bench's replay proposer).
enum class ProposerKind : uint8_t { kNone, kNgram, kDraft, kCustom };

struct SpecConfig {
  ProposerKind kind = ProposerKind::kNone;
  int32_t ngram_min = 2;        // n-gram lookup: shortest match tried
  int32_t ngram_max = 4;        // longest match tried (first)
  // Proposed tokens per step at most; 0: chosen by the engine from the verify cost it
  // measures at start (the largest k that can still pay, kAutoDraftMax at most).
  int32_t draft_max = 0;
  int32_t draft_min = 1;        // fewer proposals than this are not verified
  // Speculation pauses while a step already has this many tokens before proposals (the
  // batch is compute-bound: `lumen roofline` prints the prefill knee). 0: 64.
  int32_t max_step_tokens = 0;
  std::string draft_model;      // kDraft: the draft model's path
  // Measure the verify cost at start (step_costs.h) and let it cap k and pause speculation
  // in compute-bound steps. false: k follows acceptance alone up to draft_max (8 when 0),
  // limited only by max_step_tokens (exactness tests, and bench sweeps of a fixed k).
  bool measure_cost = true;
  // With measure_cost: (tokens, ms) points to use instead of measuring (tests).
  std::vector<std::pair<int32_t, double>> given_costs;
};

inline constexpr int32_t kAutoDraftMax = 16;

// Checks the settings a user gives (flags); the message names the flag and the value.
Status validate(const SpecConfig& config);

// Counters of one sequence (or request, summed), reported with `lumen run --json`.
struct SpecCounts {
  int64_t proposed = 0;      // proposed tokens that were verified
  int64_t accepted = 0;      // of those, accepted
  int64_t target_steps = 0;  // target forward steps that produced tokens for it
};

class AdaptiveK {
 public:
  explicit AdaptiveK(int32_t draft_max = 8) : draft_max_(draft_max), k_(draft_max) {}

  // Draft length for this step: 0 while paused. Call once per step the sequence could
  // speculate in.
  int32_t next_k() {
    if (pause_ > 0) {
      --pause_;
      if (pause_ == 0) {
        k_ = 1;
        n_fail_streak_ = 2;  // probe: one more failure pauses again
      }
      return 0;
    }
    return k_;
  }
  void update(int32_t n_proposed, int32_t n_accepted) {
    if (n_proposed <= 0) return;
    if (n_accepted == 0) {
      n_accepted_ = kDecay * n_accepted_;
      n_rejected_ = kDecay * n_rejected_ + 1;
      k_ = 1;
      if (++n_fail_streak_ >= 3) {
        pause_ = backoff_;
        backoff_ = std::min(backoff_ * 2, 256);
        n_fail_streak_ = 0;
      }
      return;
    }
    n_fail_streak_ = 0;
    backoff_ = 8;
    n_accepted_ = kDecay * n_accepted_ + n_accepted;
    n_rejected_ = kDecay * n_rejected_ + (n_accepted < n_proposed ? 1 : 0);
    k_ = n_accepted == n_proposed ? std::min(draft_max_, k_ + 2) : std::min(draft_max_, n_accepted + 1);
  }
  // A step in which the sequence could have proposed but the verify cost said no: the
  // acceptance estimate drifts back toward its prior, so that a sequence that stopped
  // speculating after rejections tries again later.
  void idle() {
    n_accepted_ = kDecay * n_accepted_ + (1 - kDecay) * kPriorAccepted;
    n_rejected_ = kDecay * n_rejected_ + (1 - kDecay) * kPriorRejected;
  }
  int32_t k() const { return k_; }
  // Per-token acceptance: accepted / (accepted + rejections), each proposal chunk being a
  // run of accepted tokens ended by at most one rejection (the geometric model of
  // step_costs.h), over decayed counts.
  double acceptance() const { return n_accepted_ / (n_accepted_ + n_rejected_); }
  bool paused() const { return pause_ > 0; }

 private:
  int32_t draft_max_;
  int32_t k_;
  int32_t n_fail_streak_ = 0;
  int32_t pause_ = 0;
  int32_t backoff_ = 8;
  static constexpr double kDecay = 0.9;
  static constexpr double kPriorAccepted = 4, kPriorRejected = 1;  // acceptance 0.8
  double n_accepted_ = kPriorAccepted;
  double n_rejected_ = kPriorRejected;
};

}  // namespace lumen::spec
