// Chat templates: a small interpreter for the Jinja subset real chat templates use
// (for / if / elif / else / set, expressions with filters and tests, loop.*, string
// concatenation, indexing, method calls like .strip()). Anything outside the subset is
// a clear parse or render error naming the construct and its position.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <string_view>

#include "base/status.h"

namespace lumen::tok {

struct ChatMessage {
  std::string role;     // "system", "user", "assistant"
  std::string content;
};

class ChatTemplateProgram;  // parsed template, private to the layer

class ChatTemplate {
 public:
  ChatTemplate();
  ~ChatTemplate();
  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;

  static Result<ChatTemplate> parse(std::string_view source);

  // Renders with the variables messages, add_generation_prompt, bos_token, eos_token.
  Result<std::string> render(std::span<const ChatMessage> messages, bool add_generation_prompt,
                             std::string_view bos_token, std::string_view eos_token) const;

 private:
  std::unique_ptr<ChatTemplateProgram> program_;
};

}  // namespace lumen::tok
