#include "calib/chunks.h"

#include <algorithm>
#include <utility>

namespace lumen::calib {

int64_t count_chunks(int64_t n_tokens, int64_t n_ctx, int64_t max_chunks) {
  const int64_t n = n_ctx > 0 ? n_tokens / n_ctx : 0;
  return max_chunks >= 0 ? std::min(n, max_chunks) : n;
}

Status run_chunks(engine::Engine& eng, std::span<const int32_t> tokens, int64_t n_ctx, int64_t n_chunks,
                  const ChunkObserver& observer) {
  const tok::Tokenizer& tk = eng.tokenizer();
  const int64_t first = n_ctx / 2;
  int64_t chunk_idx = 0;
  engine::RequestId current = 0;
  if (observer.on_scored) {
    eng.set_prompt_logits_observer([&](engine::RequestId id, int64_t pos, std::span<const float> logits) {
      if (id != current || pos < first || pos > n_ctx - 2) return;
      observer.on_scored(chunk_idx, pos, tokens[chunk_idx * n_ctx + pos + 1], logits);
    });
  }
  Status status;
  for (; chunk_idx < n_chunks && status.ok(); ++chunk_idx) {
    engine::Request req;
    req.prompt_ids.assign(tokens.begin() + chunk_idx * n_ctx, tokens.begin() + (chunk_idx + 1) * n_ctx);
    if (tk.add_bos() && tk.bos_id() >= 0) req.prompt_ids[0] = tk.bos_id();
    req.params.max_tokens = 0;
    req.params.prompt_logprobs = true;
    req.params.sampling.temperature = 0;
    auto id = eng.add_request(std::move(req));
    if (!id.ok()) {
      status = error("chunk " + std::to_string(chunk_idx) + ": " + id.message());
      break;
    }
    current = *id;
    double nll_sum = 0;
    int64_t n_scored = 0;
    while (eng.has_work()) {
      for (engine::RequestEvent& ev : eng.step()) {
        if (ev.finish_reason == engine::FinishReason::kError) status = error("chunk " + std::to_string(chunk_idx) + ": " + ev.error);
        // prompt_logprobs[k] = log p(token k + 1 | tokens <= k).
        for (size_t k = static_cast<size_t>(first); k < ev.prompt_logprobs.size(); ++k) {
          nll_sum -= ev.prompt_logprobs[k];
          ++n_scored;
        }
      }
    }
    if (status.ok() && observer.on_chunk_done) observer.on_chunk_done(chunk_idx, nll_sum, n_scored);
  }
  if (observer.on_scored) eng.set_prompt_logits_observer(nullptr);
  return status;
}

}  // namespace lumen::calib
