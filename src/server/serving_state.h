// Internal to the server layer: what the handlers share once the model is loaded, and the
// helpers both handler files (http_server.cc, generation_handler.cc) use.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "engine/async_engine.h"
#include "server/api_error.h"
#include "server/constraint.h"
#include "server/http_message.h"
#include "server/metrics.h"
#include "server/reasoning.h"
#include "server/request_parser.h"
#include "server/tool_calls.h"
#include "server/server.h"
#include "tokenizer/chat_template.h"

namespace lumen::server {

// Immutable once published by HttpServer::attach_engine (the engine itself is thread-safe).
struct ServingState {
  std::unique_ptr<engine::AsyncEngine> engine;
  tok::ChatTemplate chat_template;   // the model's, or ChatML when it has none
  TemplateTools template_tools;      // what the template does with tools (tool_calls.h)
  std::vector<int32_t> tool_markers;  // its format's markers that are control tokens (sorted)
  bool reasoning = false;            // chat output's <think> part -> reasoning_content (reasoning.h)
  ReasoningTags reasoning_tags;      // <think> / </think>, or the template's own (reasoning.h)
  std::vector<int32_t> reasoning_markers;  // those tags that are control tokens (sorted)
  std::string bos_text, eos_text;    // template variables bos_token / eos_token
  ParserLimits limits;
  std::string model_name;            // what /v1/models lists (--alias, else general.name)
  std::vector<std::string> model_names;  // what requests may name: model_name, general.name,
                                         // the file name with and without .gguf
  engine::Pooling embed_pooling = engine::Pooling::kNone;  // /v1/embeddings; kNone: off
  std::unique_ptr<GrammarCache> grammars;  // response_format / grammar / json_schema (thread-safe)
  int64_t created_s = 0;             // unix time the model was attached
};

// What the handlers get from the server besides the serving state.
struct HandlerEnv {
  const ServerConfig* config;
  ServerMetrics* metrics;
  const std::atomic<bool>* stopping;  // set when the server shuts down
};

// Whether a request's `model` names the served model (ServingState::model_names).
bool serves_model(const ServingState& state, std::string_view name);
// The 404 for a model the server does not serve (code model_not_found, param model).
ApiError model_not_found(const ServingState& state, std::string_view name);

// Sets an OpenAI error response (with Retry-After on 503).
void send_error(HttpResponse& res, const ApiError& error);

// The chat prompt: template rendered with the generation prompt, encoded with special
// tokens recognised, BOS prepended when the model wants it and the template did not write it.
Result<std::vector<int32_t>> chat_prompt_ids(const ServingState& state, std::span<const tok::ChatMessage> messages);
// The same for a whole chat request: with tools, tool turns or chat_template_kwargs,
// rendered as tool_calls.h says. *opens_reasoning (if given): the rendered prompt ends
// inside a <think> block (reasoning.h).
Result<std::vector<int32_t>> chat_prompt_ids(const ServingState& state, const ParsedRequest& pr,
                                             bool* opens_reasoning = nullptr);

// POST /v1/embeddings (embeddings_handler.cc).
void handle_embeddings(const ServingState& state, const HandlerEnv& env, const HttpRequest& req, HttpResponse& res);

// POST /v1/completions and /v1/chat/completions.
void handle_generation(const ServingState& state, const HandlerEnv& env, Endpoint endpoint,
                       const HttpRequest& req, HttpResponse& res);

}  // namespace lumen::server
