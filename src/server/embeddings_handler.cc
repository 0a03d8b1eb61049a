// POST /v1/embeddings (lumen serve --embeddings): parse -> encode each input -> one
// prefill-only engine request per input (GenerationParams::embed: the prompt's hidden
// states pooled and L2-normalised by the engine, in the same steps as generation) ->
// OpenAI's list of embedding objects.
//
// The inputs go to the engine a window at a time (--max-seqs of them in flight), so a
// 2048-input request neither fills the admission queue nor starves other clients' requests
// for long. The worker thread waits for them in order, checking every idle_poll_ms that the
// client is still there and the server is not stopping; otherwise it cancels the rest.
#include <algorithm>
#include <bit>
#include <cstring>
#include <deque>

#include <nlohmann/json.hpp>

#include "base/log.h"
#include "base/timer.h"
#include "server/serving_state.h"

namespace lumen::server {
namespace {

using Json = nlohmann::json;

// Standard base64 (RFC 4648, with padding) of raw bytes.
std::string base64_encode(const unsigned char* p, size_t n) {
  static constexpr char kAlphabet[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string out;
  out.reserve((n + 2) / 3 * 4);
  for (size_t i = 0; i < n; i += 3) {
    const uint32_t b0 = p[i], b1 = i + 1 < n ? p[i + 1] : 0, b2 = i + 2 < n ? p[i + 2] : 0;
    const uint32_t v = (b0 << 16) | (b1 << 8) | b2;
    out.push_back(kAlphabet[(v >> 18) & 63]);
    out.push_back(kAlphabet[(v >> 12) & 63]);
    out.push_back(i + 1 < n ? kAlphabet[(v >> 6) & 63] : '=');
    out.push_back(i + 2 < n ? kAlphabet[v & 63] : '=');
  }
  return out;
}

// OpenAI's base64 encoding_format: the float32 values' little-endian bytes.
std::string floats_base64(const std::vector<float>& v) {
  std::vector<unsigned char> bytes(v.size() * sizeof(float));
  static_assert(std::endian::native == std::endian::little, "base64 embeddings assume a little-endian host");
  std::memcpy(bytes.data(), v.data(), bytes.size());
  return base64_encode(bytes.data(), bytes.size());
}

// Waits for one input's final event; returns "" on success, else what went wrong. Cancels it (and reports why)
// when the client goes or the server stops.
std::string wait_embedding(engine::RequestStream& stream, const HttpRequest& req, const HandlerEnv& env,
                           std::vector<float>* out) {
  engine::RequestEvent ev;
  for (;;) {
    if (req.client_gone() || env.stopping->load()) {
      stream.cancel();
      return req.client_gone() ? "the client went away" : "the server is shutting down";
    }
    if (!stream.wait_next(&ev, std::chrono::milliseconds(env.config->idle_poll_ms))) continue;
    if (ev.finish_reason == engine::FinishReason::kError) return ev.error.empty() ? "engine error" : ev.error;
    if (ev.finish_reason == engine::FinishReason::kCancelled) return "the server is shutting down";
    if (!ev.embedding.empty()) *out = std::move(ev.embedding);
    if (ev.request_finished) return out->empty() ? "the engine returned no embedding" : "";
  }
}

}  // namespace

void handle_embeddings(const ServingState& state, const HandlerEnv& env, const HttpRequest& req, HttpResponse& res) {
  const double t_arrival = now_ms();
  if (state.embed_pooling == engine::Pooling::kNone)
    return send_error(res, ApiError{404, "embeddings are off: start lumen serve with --embeddings",
                                    "invalid_request_error", "", "embeddings_disabled"});
  auto parsed = parse_embeddings_request(req.body, state.limits);
  if (!parsed.ok()) return send_error(res, api_error_from_status(parsed.status()));
  EmbeddingsRequest& er = *parsed;
  if (!er.model.empty() && !serves_model(state, er.model)) return send_error(res, model_not_found(state, er.model));
  const int32_t n_embd = state.engine->hparams().n_embd;
  if (er.dimensions != 0 && er.dimensions != n_embd)
    return send_error(res, invalid_request("dimensions", "not supported: this model's embeddings have " +
                                                             std::to_string(n_embd) + " dimensions (only " +
                                                             std::to_string(n_embd) + " is accepted)"));
  // Every input encoded and checked before anything runs: a bad one fails the request whole.
  const tok::Tokenizer& tk = state.engine->tokenizer();
  std::vector<std::vector<int32_t>> prompts(er.inputs.size());
  int64_t n_tokens = 0;
  for (size_t i = 0; i < er.inputs.size(); ++i) {
    EmbeddingInput& in = er.inputs[i];
    prompts[i] = in.is_ids ? std::move(in.ids) : tk.encode(in.text, /*add_special=*/true, /*parse_special=*/true);
    const std::string where = er.inputs.size() == 1 && i == 0 ? "input" : "input[" + std::to_string(i) + "]";
    if (prompts[i].empty()) return send_error(res, invalid_request(where, "encodes to no tokens"));
    if (static_cast<int64_t>(prompts[i].size()) > state.limits.n_ctx)
      return send_error(res, invalid_request(where, std::to_string(prompts[i].size()) +
                                                        " tokens do not fit the context of " +
                                                        std::to_string(state.limits.n_ctx)));
    n_tokens += static_cast<int64_t>(prompts[i].size());
  }

  std::vector<std::vector<float>> vectors(prompts.size());
  std::deque<std::pair<size_t, std::shared_ptr<engine::RequestStream>>> in_flight;
  const size_t window = static_cast<size_t>(std::max(1, state.engine->config().max_seqs));
  size_t next = 0;
  auto cancel_all = [&] {
    for (auto& [i, s] : in_flight) s->cancel();
  };
  while (next < prompts.size() || !in_flight.empty()) {
    while (next < prompts.size() && in_flight.size() < window) {
      engine::Request r;
      r.prompt_ids = std::move(prompts[next]);
      r.params.max_tokens = 0;
      r.params.embed = state.embed_pooling;
      auto stream = state.engine->submit(std::move(r));
      if (!stream.ok()) {
        cancel_all();
        env.metrics->count_outcome(Outcome::kRejected);
        return send_error(res, api_error_from_status(stream.status()));
      }
      in_flight.emplace_back(next++, std::move(stream).value());
    }
    auto [i, stream] = std::move(in_flight.front());
    in_flight.pop_front();
    const std::string err = wait_embedding(*stream, req, env, &vectors[i]);
    if (!err.empty()) {
      cancel_all();
      const bool gone = req.client_gone() || env.stopping->load();
      env.metrics->count_outcome(gone ? Outcome::kCancelled : Outcome::kError);
      return send_error(res, ApiError{gone ? 503 : 500, "embeddings: " + err, "server_error", "", ""});
    }
  }
  env.metrics->count_outcome(Outcome::kStop);

  Json data = Json::array();
  for (size_t i = 0; i < vectors.size(); ++i) {
    Json item = {{"object", "embedding"}, {"index", i}};
    if (er.base64) item["embedding"] = floats_base64(vectors[i]);
    else item["embedding"] = vectors[i];
    data.push_back(std::move(item));
  }
  Json body = {{"object", "list"},
               {"data", std::move(data)},
               {"model", state.model_name},
               {"usage", {{"prompt_tokens", n_tokens}, {"total_tokens", n_tokens}}}};
  res.set_content(body.dump(-1, ' ', false, Json::error_handler_t::replace), "application/json");
  if (env.config->log_requests)
    LUMEN_LOG_INFO("server: embeddings: %zu input(s), %lld tokens, pooling %s, %.1f ms", vectors.size(),
                   static_cast<long long>(n_tokens), engine::pooling_name(state.embed_pooling), now_ms() - t_arrival);
}

}  // namespace lumen::server
