// Reasoning output of thinking models (DeepSeek-R1 and its distills, Qwen3, QwQ; Command-R7B
// with its own tags <|START_THINKING|> / <|END_THINKING|>): the text between <think> and
// </think> (ReasoningTags) is the model's reasoning, returned apart from the answer as
// `reasoning_content`, as vLLM's and llama.cpp's servers do (llama.cpp: --reasoning-format
// deepseek).
//
//   "<think>\nLet me add.\n</think>\n\n4"   ->  reasoning "Let me add.", content "4"
//
// The reasoning must open the output (after whitespace), or the prompt must have opened it:
// DeepSeek-R1's template ends the generation prompt with "<think>\n", so the output starts
// inside the reasoning. Whitespace around the reasoning and before the answer is dropped.
// An output cut off inside the reasoning is all reasoning; "<think>" anywhere else is text.
//
// Pure functions of their inputs (no engine, no HTTP), tested in reasoning_test.cc.
#pragma once

#include <string>
#include <string_view>

namespace lumen::server {

// The tags around the reasoning: <think> / </think>, or Command-R7B's.
struct ReasoningTags {
  std::string_view open = "<think>";
  std::string_view close = "</think>";
};
// The template's tags (Command-R7B's when it writes them, else <think>).
ReasoningTags reasoning_tags(std::string_view template_source);

// Whether a chat template is a thinking model's (it writes its open tag).
bool template_thinks(std::string_view template_source);

// Whether a rendered prompt leaves the model inside its reasoning (ends with the open tag
// and whitespace).
bool prompt_opens_reasoning(std::string_view prompt_text, ReasoningTags tags = {});

struct ReasoningText {
  std::string reasoning;
  std::string content;
};

// Splits a text as it streams in: each feed() returns what is certain so far (a tail that
// may be the start of a tag, or whitespace that may end the reasoning, is held back);
// finish() returns the rest. The pieces joined equal split_reasoning() of the whole text.
class ReasoningSplitter {
 public:
  explicit ReasoningSplitter(bool starts_inside, ReasoningTags tags = {})
      : tags_(tags), state_(starts_inside ? State::kLead : State::kStart) {}
  ReasoningText feed(std::string_view delta);
  ReasoningText finish();

 private:
  enum class State : uint8_t {
    kStart,      // before the first non-space: is it "<think>"?
    kLead,       // inside the reasoning, before its first non-space
    kReasoning,  // inside the reasoning
    kAfter,      // after "</think>", before the answer's first non-space
    kContent,    // the answer (or plain text from the start)
  };
  ReasoningTags tags_;
  State state_;
  std::string held_;  // text not yet given out
};

ReasoningText split_reasoning(std::string_view text, bool starts_inside, ReasoningTags tags = {});

}  // namespace lumen::server
