// The strict edge of the server (STYLE 19): request bodies of /v1/completions and
// /v1/chat/completions -> plain data, or an error naming the field. No HTTP, no engine
// calls: a pure function, fuzzed by request_parser_fuzz_test.cc.
//
// Rules (the client-facing summary is in src/server/README.md):
//   - The body must be one JSON object, at most ParserLimits::max_body_bytes, nested at most
//     ParserLimits::max_depth deep.
//   - Every known field is type-checked and range-checked; `null` means "absent". A known
//     field of the wrong type is a 400, never coerced (an integer field accepts 3.0, not 3.5
//     or "3").
//   - Unknown fields are ignored (clients send vendor extensions), except OpenAI, llama.cpp
//     and vLLM fields this server does not implement, which are rejected when set to anything
//     but their default (echo, best_of, logit_bias, suffix, tools, functions, mirostat,
//     typical_p, n_probs, ...): silently ignoring them would change what the client gets.
//   - Defaults are OpenAI's: temperature 1, top_p 1, no top-k, no min-p, no penalties.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "engine/request.h"
#include "tokenizer/chat_template.h"

namespace lumen::server {

enum class Endpoint : uint8_t { kCompletions, kChatCompletions };

struct ParserLimits {
  int64_t max_body_bytes = 4 << 20;
  int32_t max_depth = 32;             // JSON nesting
  int32_t n_vocab = 0;                // token ids in [0, n_vocab)
  int32_t n_ctx = 0;                  // prompt token arrays and max_tokens at most this
  int32_t max_n = 1;                  // n at most (the engine's --max-seqs)
  int32_t max_stop = 16;              // stop strings
  int32_t max_stop_bytes = 256;       // bytes per stop string
  int32_t max_messages = 1024;        // chat messages
  int32_t max_logprobs = 20;          // logprobs / top_logprobs
  int32_t max_cache_salt_bytes = 256;
  int32_t max_model_name_bytes = 256;
};

// What the output must look like, from response_format ({"type": "json_object" | "json_schema"}),
// or llama.cpp's `grammar` (GBNF) and `json_schema` fields; at most one of them.
struct OutputConstraint {
  enum class Kind : uint8_t { kNone, kGbnf, kJsonSchema, kJsonObject };
  Kind kind = Kind::kNone;
  std::string text;   // kGbnf: the grammar; kJsonSchema: the schema as JSON text
  std::string field;  // the request field it came from ("response_format.json_schema.schema")
};

// OpenAI function tools (/v1/chat/completions `tools`, `tool_choice`, `parallel_tool_calls`).
struct ToolFunction {
  std::string name;
  std::string parameters = "{}";  // its JSON Schema as JSON text ({}: any arguments object)
};
struct ToolRequest {
  enum class Choice : uint8_t { kNone, kAuto, kRequired, kNamed };
  std::vector<ToolFunction> functions;
  std::string tools_json;         // the `tools` array as given, for the chat template
  Choice choice = Choice::kNone;  // absent: auto when tools are given
  std::string named;              // kNamed: the function that must be called
  bool parallel = true;           // parallel_tool_calls: required may call several
  bool active() const { return choice != Choice::kNone && !functions.empty(); }
};

struct ParsedRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string model;                          // "" when absent
  // /v1/completions: a string, or an array of token ids (used as given: no BOS added).
  std::string prompt_text;
  std::vector<int32_t> prompt_ids;
  bool prompt_is_ids = false;
  // /v1/chat/completions: content of array-of-parts messages is joined text.
  std::vector<tok::ChatMessage> messages;
  // Per message (same index): an assistant turn's tool_calls as JSON array text ("" when
  // none) and a tool turn's tool_call_id.
  struct ToolTurn {
    std::string tool_calls_json;
    std::string tool_call_id;
  };
  std::vector<ToolTurn> tool_turns;
  engine::GenerationParams params;            // max_tokens is only meaningful if given
  OutputConstraint constraint;                // compiled by the handler into params.grammar
  ToolRequest tools;                          // chat only
  // chat_template_kwargs (vLLM's, llama.cpp's): extra template variables as a JSON object's
  // text ("" when none), e.g. {"enable_thinking": false} for Qwen3.
  std::string template_kwargs_json;
  bool max_tokens_given = false;
  bool seed_given = false;                    // else the caller draws a random seed
  bool stream = false;
  bool include_usage = false;                 // stream_options.include_usage
  std::string user;                           // OpenAI's end-user id (a routing key, routing_key.h)
  // Prompts that do not fit the context (README "Context limits"): by default a 400 naming
  // the limit. "truncation": "auto" (the OpenAI Responses API's name; chat only) drops the
  // oldest turns, keeping the system messages and the latest user turn; vLLM's
  // "truncate_prompt_tokens": k keeps the prompt's last k tokens (-1: as many as leave room
  // for max_tokens).
  bool truncate_oldest_turns = false;
  int32_t truncate_prompt_tokens = 0;         // 0: none
};

// Parses and checks one request body. Errors are kInvalidArgument with a message
// "field: what is wrong" (see api_error.h). Never throws.
Result<ParsedRequest> parse_generation_request(std::string_view body, Endpoint endpoint,
                                               const ParserLimits& limits);

// /tokenize: {"content" | "prompt": string, "add_special" | "add_special_tokens": bool}
// or {"messages": [...]} (rendered with the chat template by the caller).
struct TokenizeRequest {
  std::string text;
  bool add_special = true;
  std::vector<tok::ChatMessage> messages;
  bool has_messages = false;
};
Result<TokenizeRequest> parse_tokenize_request(std::string_view body, const ParserLimits& limits);

// /detokenize: {"tokens": [ids]}
Result<std::vector<int32_t>> parse_detokenize_request(std::string_view body, const ParserLimits& limits);

// POST /v1/embeddings: {"input": string | [string] | [id] | [[id]], "model",
// "encoding_format": "float" | "base64", "dimensions", "user"}. Texts are encoded by the
// caller; token id arrays are used as given (no BOS added), like /v1/completions' prompt.
struct EmbeddingInput {
  std::string text;
  std::vector<int32_t> ids;
  bool is_ids = false;
};
struct EmbeddingsRequest {
  std::string model;                  // "" when absent
  std::vector<EmbeddingInput> inputs;  // 1..max_embedding_inputs, none empty
  bool base64 = false;                // encoding_format "base64": little-endian float32, base64
  int64_t dimensions = 0;             // 0: not given (the caller checks it against the model)
  std::string user;
};
constexpr int32_t kMaxEmbeddingInputs = 2048;  // OpenAI's limit on one request's inputs
Result<EmbeddingsRequest> parse_embeddings_request(std::string_view body, const ParserLimits& limits);

// True if the JSON text nests arrays/objects no deeper than max_depth (strings are skipped).
// Cheap pre-check so a hostile body never reaches the parser's recursion.
bool json_depth_within(std::string_view text, int32_t max_depth);

}  // namespace lumen::server
