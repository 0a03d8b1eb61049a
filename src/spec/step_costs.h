// What a forward step costs by its number of tokens, and the speculation policy that
// follows from it.
//
// The engine measures, at start, the time of a forward pass over n tokens of one sequence
// with a logits row for each (what a verify of n - 1 proposals computes), for n = 1 ..
// 1 + draft_max and a few larger n up to the step-token knee. ms(n) is piecewise linear
// through those points (past the last one: the last segment's slope).
//
// A sequence that proposes k tokens at per-token acceptance a gets on average
//
//   E(a, k) = 1 + a + a^2 + ... + a^k      tokens from one verify step
//
// (the 1: the token the step samples anyway). A step whose committed tokens are n_base
// (decodes and prefill chunks) and in which n_seqs sequences propose k each does
//
//   rate(k) = (n_base + n_seqs * (E(a, k) - 1)) / (ms(n_base + n_seqs * k) + k * propose_ms)
//
// where propose_ms is what proposing one more position costs (a draft model's forward
// step over the speculating sequences, measured as the engine goes; ~0 for n-gram lookup).
//
// tokens of work per ms. best_k() is the k in [0, k_max] with the highest rate: on a
// memory-bound decode (n_base = 1) extra verify tokens are cheap and k is several tokens;
// once the batch is compute-bound (many sequences, or a prefill chunk beside the decode)
// every verify token costs about as much as a committed one and the answer is 0: the
// engine then proposes nothing and the other sequences get the compute.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace lumen::spec {

class StepCosts {
 public:
  struct Point {
    int32_t n_tokens = 0;
    double ms = 0;
  };
  // Empty: nothing measured (best_k then leaves k to the caller's cap).
  StepCosts() = default;
  // Adds a measurement, raised to the previous point's time if below it (costs never fall
  // with more tokens; a dip is noise). Precondition: n_tokens > every earlier point's, ms > 0.
  void add(int32_t n_tokens, double ms);
  bool empty() const { return points_.empty(); }
  std::span<const Point> points() const { return points_; }
  // Estimated forward time of a step of n_tokens (>= 1) tokens.
  double ms(int32_t n_tokens) const;

 private:
  std::vector<Point> points_;  // ascending n_tokens
};

// 1 + a + ... + a^k: expected tokens one verify of k proposals yields at acceptance a.
double expected_tokens(double a, int32_t k);

// The k in [0, k_max] that maximises rate(k) above (ties: the smaller k). k_max when
// `costs` is empty.
int32_t best_k(const StepCosts& costs, int32_t n_base, int32_t n_seqs, double a, int32_t k_max,
               double propose_ms = 0);

}  // namespace lumen::spec
