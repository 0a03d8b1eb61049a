#include "spec/step_costs.h"

#include <algorithm>

#include "base/check.h"

namespace lumen::spec {

void StepCosts::add(int32_t n_tokens, double ms) {
  LUMEN_CHECK(n_tokens >= 1 && ms > 0 && (points_.empty() || n_tokens > points_.back().n_tokens));
  // More tokens never cost less: a dip is noise (a busy machine slowed the smaller one), and
  // a dip would make a bogus knee.
  points_.push_back({n_tokens, points_.empty() ? ms : std::max(ms, points_.back().ms)});
}

double StepCosts::ms(int32_t n) const {
  LUMEN_CHECK(!points_.empty());
  if (points_.size() == 1 || n <= points_.front().n_tokens) return points_.front().ms;
  size_t i = 1;
  while (i + 1 < points_.size() && points_[i].n_tokens < n) ++i;
  // Between points_[i - 1] and points_[i] (or past the last: that segment's slope).
  const Point& lo = points_[i - 1];
  const Point& hi = points_[i];
  const double slope = (hi.ms - lo.ms) / (hi.n_tokens - lo.n_tokens);
  return lo.ms + slope * (n - lo.n_tokens);
}

double expected_tokens(double a, int32_t k) {
  double e = 1, term = 1;
  for (int32_t j = 0; j < k; ++j) {
    term *= a;
    e += term;
  }
  return e;
}

int32_t best_k(const StepCosts& costs, int32_t n_base, int32_t n_seqs, double a, int32_t k_max, double propose_ms) {
  if (k_max <= 0 || n_seqs <= 0) return 0;
  if (costs.empty()) return k_max;
  LUMEN_DCHECK(n_base >= 1);
  int32_t best = 0;
  double best_rate = n_base / costs.ms(n_base);
  for (int32_t k = 1; k <= k_max; ++k) {
    const double rate = (n_base + n_seqs * (expected_tokens(a, k) - 1)) / (costs.ms(n_base + n_seqs * k) + k * propose_ms);
    if (rate > best_rate) {
      best_rate = rate;
      best = k;
    }
  }
  return best;
}

}  // namespace lumen::spec
