#include "spec/adaptive.h"

namespace lumen::spec {

Status validate(const SpecConfig& c) {
  if (c.kind == ProposerKind::kNone) return Status::ok_status();
  if (c.ngram_min < 1 || c.ngram_max < c.ngram_min || c.ngram_max > 64)
    return error("--ngram-min/--ngram-max: need 1 <= min <= max <= 64, got " + std::to_string(c.ngram_min) + " and " +
                 std::to_string(c.ngram_max));
  if (c.draft_max < 0 || c.draft_max > 64)
    return error("--draft-max: must be in [1, 64] (0: chosen from the measured verify cost), got " + std::to_string(c.draft_max));
  if (c.draft_min < 1 || c.draft_min > (c.draft_max == 0 ? kAutoDraftMax : c.draft_max))
    return error("--draft-min: must be in [1, --draft-max = " + std::to_string(c.draft_max) + "], got " +
                 std::to_string(c.draft_min));
  if (c.max_step_tokens < 0)
    return error("--spec-knee: must be >= 0, got " + std::to_string(c.max_step_tokens));
  for (size_t i = 0; i < c.given_costs.size(); ++i)
    if (c.given_costs[i].first < 1 || !(c.given_costs[i].second > 0) ||
        (i > 0 && c.given_costs[i].first <= c.given_costs[i - 1].first))
      return error("spec: given step costs must have ascending token counts >= 1 and positive times");
  if (c.kind == ProposerKind::kDraft && c.draft_model.empty()) return error("--draft-model: missing path");
  return Status::ok_status();
}

}  // namespace lumen::spec
