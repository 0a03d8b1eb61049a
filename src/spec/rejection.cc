#include "spec/rejection.h"

#include <algorithm>

#include "base/check.h"

namespace lumen::spec {
namespace {

// First id (ascending) whose running sum of weight(id) exceeds u * total; the last id with
// positive weight when rounding leaves the walk short. Precondition: total > 0.
template <typename Weight>
int32_t draw_ascending(size_t n, Weight weight, double total, double u) {
  const double target = u * total;
  double cum = 0.0;
  int32_t last_positive = 0;
  for (size_t i = 0; i < n; ++i) {
    const double w = weight(i);
    if (w <= 0.0) continue;
    cum += w;
    last_positive = static_cast<int32_t>(i);
    if (cum > target) return last_positive;
  }
  return last_positive;
}

}  // namespace

VerifyDraw verify_draft_token(std::span<const float> p, std::span<const float> q, int32_t d, double u_accept,
                              double u_residual) {
  LUMEN_CHECK(d >= 0 && static_cast<size_t>(d) < p.size());
  LUMEN_CHECK(q.empty() || q.size() == p.size());
  const bool deterministic = q.empty();
  auto q_at = [&](size_t i) -> double {
    if (deterministic) return static_cast<int32_t>(i) == d ? 1.0 : 0.0;
    return q[i];
  };
  const auto di = static_cast<size_t>(d);
  // u * q(d) < p(d) <=> u < p(d) / q(d) without dividing (q(d) == 0 accepts any p(d) > 0).
  if (u_accept * q_at(di) < static_cast<double>(p[di])) return {d, true};
  auto residual = [&](size_t i) { return std::max(0.0, static_cast<double>(p[i]) - q_at(i)); };
  double total = 0.0;
  for (size_t i = 0; i < p.size(); ++i) total += residual(i);
  if (total > 0.0) return {draw_ascending(p.size(), residual, total, u_residual), false};
  // p == q: a rejection has probability 0 and happened only through rounding; p itself is
  // then the residual's limit.
  return {draw_from(p, u_residual), false};
}

int32_t draw_from(std::span<const float> probs, double u) {
  double total = 0.0;
  for (float v : probs) total += v;
  LUMEN_CHECK(total > 0.0);
  const auto at = [&](size_t i) { return static_cast<double>(probs[i]); };
  return draw_ascending(probs.size(), at, total, u);
}

VerifyDraw verify_position(sample::Sampler& sampler, std::span<const float> target_logits, int32_t d,
                           std::span<const float> q, std::span<float> p_work,
                           std::span<const uint64_t> allowed) {
  if (sampler.greedy()) {
    const int32_t t = sampler.sample(target_logits, allowed);
    return {t, t == d};
  }
  sampler.distribution(target_logits, p_work, allowed);
  const double u_accept = sampler.uniform();
  const auto di = static_cast<size_t>(d);
  const double qd = q.empty() ? 1.0 : q[di];
  if (u_accept * qd < static_cast<double>(p_work[di])) return {d, true};
  // Rejected: the same function decides the residual draw (u_accept is below the threshold
  // test there too, so it rejects again and only u_residual matters).
  return verify_draft_token(p_work, q, d, u_accept, sampler.uniform());
}

}  // namespace lumen::spec
