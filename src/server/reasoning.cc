#include "server/reasoning.h"

#include <algorithm>

namespace lumen::server {
namespace {

constexpr ReasoningTags kCommandR{"<|START_THINKING|>", "<|END_THINKING|>"};

bool is_space(char c) { return c == ' ' || c == '\n' || c == '\t' || c == '\r'; }

size_t leading_space(std::string_view s) {
  size_t i = 0;
  while (i < s.size() && is_space(s[i])) ++i;
  return i;
}

// The length of the longest end of `s` that is the start of `tag` (not all of it).
size_t partial_tag(std::string_view s, std::string_view tag) {
  for (size_t n = std::min(s.size(), tag.size() - 1); n > 0; --n)
    if (s.substr(s.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

}  // namespace

ReasoningTags reasoning_tags(std::string_view source) {
  return source.find(kCommandR.open) != std::string_view::npos ? kCommandR : ReasoningTags{};
}

bool template_thinks(std::string_view source) {
  return source.find(reasoning_tags(source).open) != std::string_view::npos;
}

bool prompt_opens_reasoning(std::string_view prompt, ReasoningTags tags) {
  while (!prompt.empty() && is_space(prompt.back())) prompt.remove_suffix(1);
  return prompt.ends_with(tags.open);
}

ReasoningText ReasoningSplitter::feed(std::string_view delta) {
  held_ += delta;
  ReasoningText out;
  for (;;) {
    switch (state_) {
      case State::kStart: {
        const std::string_view rest = std::string_view(held_).substr(leading_space(held_));
        if (rest.empty() || (rest.size() < tags_.open.size() && tags_.open.starts_with(rest))) return out;  // undecided
        if (rest.starts_with(tags_.open)) {
          held_.erase(0, held_.size() - rest.size() + tags_.open.size());
          state_ = State::kLead;
        } else {
          state_ = State::kContent;
        }
        break;
      }
      case State::kLead:
      case State::kAfter:
        held_.erase(0, leading_space(held_));
        if (held_.empty()) return out;
        state_ = state_ == State::kLead ? State::kReasoning : State::kContent;
        break;
      case State::kReasoning: {
        const size_t close = held_.find(tags_.close);
        size_t end = close == std::string::npos ? held_.size() - partial_tag(held_, tags_.close) : close;
        while (end > 0 && is_space(held_[end - 1])) --end;  // may end the reasoning: held
        out.reasoning.append(held_, 0, end);
        if (close == std::string::npos) {
          held_.erase(0, end);
          return out;
        }
        held_.erase(0, close + tags_.close.size());
        state_ = State::kAfter;
        break;
      }
      case State::kContent:
        out.content += held_;
        held_.clear();
        return out;
    }
  }
}

ReasoningText ReasoningSplitter::finish() {
  ReasoningText out;
  if (state_ == State::kStart || state_ == State::kContent) {
    out.content = std::move(held_);  // "  <thi" at the end is text
  } else if (state_ == State::kReasoning) {  // cut off while reasoning
    size_t end = held_.size();
    while (end > 0 && is_space(held_[end - 1])) --end;
    out.reasoning = held_.substr(0, end);
  }
  held_.clear();
  return out;
}

ReasoningText split_reasoning(std::string_view text, bool starts_inside, ReasoningTags tags) {
  ReasoningSplitter s(starts_inside, tags);
  ReasoningText out = s.feed(text);
  ReasoningText rest = s.finish();
  out.reasoning += rest.reasoning;
  out.content += rest.content;
  return out;
}

}  // namespace lumen::server
