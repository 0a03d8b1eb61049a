#include "server/openai_response.h"

#include <cmath>

#include <nlohmann/json.hpp>

namespace lumen::server {
namespace {

using Json = nlohmann::json;

// Token texts may be partial UTF-8 (a byte-fallback token): replace, never throw.
std::string dump(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }

// OpenAI reports -9999.0 for probabilities that underflow.
double finite_logprob(double lp) { return std::isfinite(lp) ? lp : -9999.0; }

std::string piece(const tok::Tokenizer& tk, int32_t id) { return tk.token_to_piece(id, /*special=*/true); }

Json bytes_of(const std::string& s) {
  Json b = Json::array();
  for (const unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"}]}]}
Json chat_logprobs(std::span<const engine::TokenLogprob> lps, const tok::Tokenizer& tk) {
  Json content = Json::array();
  for (const engine::TokenLogprob& lp : lps) {
    const std::string text = piece(tk, lp.id);
    Json top = Json::array();
    for (const auto& [id, logprob] : lp.top) {
      const std::string t = piece(tk, id);
      top.push_back({{"token", t}, {"logprob", finite_logprob(logprob)}, {"bytes", bytes_of(t)}});
    }
    content.push_back({{"token", text},
                       {"logprob", finite_logprob(lp.logprob)},
                       {"bytes", bytes_of(text)},
                       {"top_logprobs", std::move(top)}});
  }
  return {{"content", std::move(content)}};
}

// Completions: {"tokens", "token_logprobs", "top_logprobs": [{text: logprob}] | null, "text_offset"}
Json completion_logprobs(std::span<const engine::TokenLogprob> lps, const tok::Tokenizer& tk, int32_t k,
                         int64_t* text_offset) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  for (const engine::TokenLogprob& lp : lps) {
    const std::string text = piece(tk, lp.id);
    tokens.push_back(text);
    token_logprobs.push_back(finite_logprob(lp.logprob));
    offsets.push_back(*text_offset);
    *text_offset += static_cast<int64_t>(text.size());
    Json alts = Json::object();
    for (const auto& [id, logprob] : lp.top) alts[piece(tk, id)] = finite_logprob(logprob);
    top.push_back(std::move(alts));
  }
  Json out = {{"tokens", std::move(tokens)}, {"token_logprobs", std::move(token_logprobs)},
              {"top_logprobs", nullptr}, {"text_offset", std::move(offsets)}};
  if (k > 0) out["top_logprobs"] = std::move(top);
  return out;
}

Json logprobs_json(const ResponseHeader& h, std::span<const engine::TokenLogprob> lps, const tok::Tokenizer& tk,
                   int64_t* text_offset) {
  if (h.logprobs < 0) return nullptr;
  if (h.endpoint == Endpoint::kChatCompletions) return chat_logprobs(lps, tk);
  return completion_logprobs(lps, tk, h.logprobs, text_offset);
}

Json usage_json(const engine::Usage& u) {
  Json j = {{"prompt_tokens", u.prompt_tokens},
            {"completion_tokens", u.completion_tokens},
            {"total_tokens", u.prompt_tokens + u.completion_tokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cached_tokens}}}};
  if (u.spec.proposed > 0)  // the request speculated (lumen's extension)
    j["spec"] = {{"proposed", u.spec.proposed}, {"accepted", u.spec.accepted}, {"target_steps", u.spec.target_steps}};
  return j;
}

Json chunk_base(const ResponseHeader& h) {
  const bool chat = h.endpoint == Endpoint::kChatCompletions;
  Json j = {{"id", h.id},
            {"object", chat ? "chat.completion.chunk" : "text_completion"},
            {"created", h.created_s},
            {"model", h.model},
            {"system_fingerprint", "lumen"}};
  if (h.include_usage) j["usage"] = nullptr;
  return j;
}

Json finish_json(engine::FinishReason reason) {
  if (reason == engine::FinishReason::kNone) return nullptr;
  return openai_finish_reason(reason);
}

std::string sse(const Json& j) { return "data: " + dump(j) + "\n\n"; }

// "tool_calls" for a choice that called and stopped; else the engine's reason.
Json choice_finish_json(const ChoiceResult& c) {
  const bool stopped = c.finish_reason == engine::FinishReason::kStop || c.finish_reason == engine::FinishReason::kEos;
  if (!c.tool_calls.empty() && stopped) return "tool_calls";
  return finish_json(c.finish_reason);
}

std::string call_id(const ResponseHeader& h, size_t choice, size_t k) {
  return "call_" + h.id.substr(h.id.find('-') + 1) + "_" + std::to_string(choice) + "_" + std::to_string(k);
}

Json tool_calls_json(const ResponseHeader& h, size_t choice, std::span<const ToolCall> calls) {
  Json out = Json::array();
  for (size_t k = 0; k < calls.size(); ++k)
    out.push_back({{"id", call_id(h, choice, k)},
                   {"type", "function"},
                   {"function", {{"name", calls[k].name}, {"arguments", calls[k].arguments}}}});
  return out;
}

}  // namespace

const char* openai_finish_reason(engine::FinishReason reason) {
  switch (reason) {
    case engine::FinishReason::kEos:
    case engine::FinishReason::kStop: return "stop";
    case engine::FinishReason::kLength:
    case engine::FinishReason::kContextFull: return "length";
    case engine::FinishReason::kCancelled: return "cancelled";
    case engine::FinishReason::kError: return "error";
    case engine::FinishReason::kNone: break;
  }
  return "error";
}

std::string completion_response_json(const ResponseHeader& h, std::span<const ChoiceResult> choices,
                                     const engine::Usage& usage, const tok::Tokenizer& tk) {
  const bool chat = h.endpoint == Endpoint::kChatCompletions;
  Json out_choices = Json::array();
  for (size_t i = 0; i < choices.size(); ++i) {
    const ChoiceResult& c = choices[i];
    int64_t text_offset = 0;
    Json choice = {{"index", i}, {"logprobs", logprobs_json(h, c.logprobs, tk, &text_offset)},
                   {"finish_reason", choice_finish_json(c)}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
      if (!c.reasoning.empty()) choice["message"]["reasoning_content"] = c.reasoning;
      if (!c.tool_calls.empty()) {
        if (c.text.empty()) choice["message"]["content"] = nullptr;
        choice["message"]["tool_calls"] = tool_calls_json(h, i, c.tool_calls);
      }
    } else {
      choice["text"] = c.text;
    }
    out_choices.push_back(std::move(choice));
  }
  Json j = {{"id", h.id},
            {"object", chat ? "chat.completion" : "text_completion"},
            {"created", h.created_s},
            {"model", h.model},
            {"system_fingerprint", "lumen"},
            {"choices", std::move(out_choices)},
            {"usage", usage_json(usage)}};
  return dump(j);
}

std::string sse_role_chunk(const ResponseHeader& h, int32_t index) {
  Json j = chunk_base(h);
  Json choice = {{"index", index}, {"delta", {{"role", "assistant"}, {"content", ""}}},
                 {"logprobs", nullptr}, {"finish_reason", nullptr}};
  j["choices"] = Json::array({std::move(choice)});
  return sse(j);
}

std::string sse_token_chunk(const ResponseHeader& h, int32_t index, const std::string& text,
                            std::span<const engine::TokenLogprob> logprobs, engine::FinishReason finish,
                            const tok::Tokenizer& tk, int64_t* text_offset) {
  Json j = chunk_base(h);
  Json choice = {{"index", index}, {"logprobs", logprobs_json(h, logprobs, tk, text_offset)},
                 {"finish_reason", finish_json(finish)}};
  if (h.endpoint == Endpoint::kChatCompletions) {
    choice["delta"] = text.empty() ? Json::object() : Json{{"content", text}};
  } else {
    choice["text"] = text;
  }
  j["choices"] = Json::array({std::move(choice)});
  return sse(j);
}

std::string sse_tool_choice_end(const ResponseHeader& h, int32_t index, const ChoiceResult& c) {
  std::string out;
  auto chunk = [&](Json delta, Json finish) {
    Json j = chunk_base(h);
    j["choices"] = Json::array(
        {Json{{"index", index}, {"delta", std::move(delta)}, {"logprobs", nullptr}, {"finish_reason", std::move(finish)}}});
    out += sse(j);
  };
  if (!c.text.empty()) chunk({{"content", c.text}}, nullptr);
  for (size_t k = 0; k < c.tool_calls.size(); ++k) {
    const ToolCall& call = c.tool_calls[k];
    chunk({{"tool_calls", Json::array({Json{{"index", k},
                                            {"id", call_id(h, static_cast<size_t>(index), k)},
                                            {"type", "function"},
                                            {"function", {{"name", call.name}, {"arguments", ""}}}}})}},
          nullptr);
    chunk({{"tool_calls", Json::array({Json{{"index", k}, {"function", {{"arguments", call.arguments}}}}})}},
          nullptr);
  }
  chunk(Json::object(), choice_finish_json(c));
  return out;
}

std::string sse_reasoning_chunk(const ResponseHeader& h, int32_t index, const std::string& text) {
  Json j = chunk_base(h);
  j["choices"] = Json::array({Json{{"index", index},
                                   {"delta", {{"reasoning_content", text}}},
                                   {"logprobs", nullptr},
                                   {"finish_reason", nullptr}}});
  return sse(j);
}

std::string sse_usage_chunk(const ResponseHeader& h, const engine::Usage& usage) {
  Json j = chunk_base(h);
  j["choices"] = Json::array();
  j["usage"] = usage_json(usage);
  return sse(j);
}

std::string sse_error_event(const std::string& error_json) { return "data: " + error_json + "\n\n"; }

}  // namespace lumen::server
