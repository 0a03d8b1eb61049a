// OpenAI response bodies for /v1/completions and /v1/chat/completions: whole responses,
// server-sent-event chunks, usage and logprobs. Pure formatting: engine events in, text out.
//
// Streaming, per request (n choices):
//   chat:        data: {"choices":[{"index":i,"delta":{"role":"assistant","content":""}}]}  (each i)
//   both:        data: {... text / delta.content, logprobs, "finish_reason": null}          (tokens)
//                data: {... the last text of choice i, "finish_reason": "stop" | "length"}
//   include_usage: data: {..., "choices": [], "usage": {...}}
//                data: [DONE]
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "engine/request.h"
#include "server/request_parser.h"
#include "server/tool_calls.h"
#include "tokenizer/tokenizer.h"

namespace lumen::server {

// What every chunk / response of one request shares.
struct ResponseHeader {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id;            // "cmpl-..." or "chatcmpl-..."
  int64_t created_s = 0;     // unix seconds
  std::string model;
  int32_t logprobs = -1;     // the request's logprobs: -1 none, else top-K
  bool include_usage = false;
  bool tools = false;        // tool calling is on: completions are parsed for calls
  bool reasoning = false;    // chat: <think> text goes to reasoning_content (reasoning.h)
  bool reasoning_open = false;  // ... and the prompt opened the <think> block
};

// OpenAI's finish_reason for an engine reason: "stop" (EOS or stop string), "length"
// (max_tokens or the context), "cancelled", "error". A choice that made tool calls and
// stopped says "tool_calls".
const char* openai_finish_reason(engine::FinishReason reason);

// One choice of a non-streaming response, accumulated from its events.
struct ChoiceResult {
  std::string text;
  engine::FinishReason finish_reason = engine::FinishReason::kNone;
  std::vector<engine::TokenLogprob> logprobs;
  std::vector<ToolCall> tool_calls;  // with tools: the calls parsed from text (text: the rest)
  std::string reasoning;             // with reasoning: the <think> part (text: the answer)
};

std::string completion_response_json(const ResponseHeader& header, std::span<const ChoiceResult> choices,
                                     const engine::Usage& usage, const tok::Tokenizer& tokenizer);

// Streaming. Each returns one whole SSE event ("data: ...\n\n").
std::string sse_role_chunk(const ResponseHeader& header, int32_t index);
// `text_offset`: bytes of this choice's text before `text` (completions logprobs), advanced.
std::string sse_token_chunk(const ResponseHeader& header, int32_t index, const std::string& text,
                            std::span<const engine::TokenLogprob> logprobs, engine::FinishReason finish,
                            const tok::Tokenizer& tokenizer, int64_t* text_offset);
// With tools, a choice's text is held back until it ends, then parsed: the calls go out as
// OpenAI streams them (per call, a chunk with index, id, type and name and empty arguments,
// then one with the arguments), any content before them as one content chunk, then the
// finish chunk ("tool_calls" when there were calls and the choice stopped).
std::string sse_tool_choice_end(const ResponseHeader& header, int32_t index, const ChoiceResult& choice);
// A chat delta of reasoning text: {"reasoning_content": text}.
std::string sse_reasoning_chunk(const ResponseHeader& header, int32_t index, const std::string& text);
std::string sse_usage_chunk(const ResponseHeader& header, const engine::Usage& usage);
std::string sse_error_event(const std::string& error_json);
inline constexpr const char* kSseDone = "data: [DONE]\n\n";

}  // namespace lumen::server
