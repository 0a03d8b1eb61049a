// A `lumen chat` conversation as a file (/save, /load):
//
//   {"messages": [{"role": "system", "content": "..."}, {"role": "user", ...}, ...]}
//
// the same message objects as the OpenAI chat API. Loading checks every field and names the
// first bad one; it never throws.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "tokenizer/chat_template.h"

namespace lumen::cli {

std::string conversation_to_json(const std::vector<tok::ChatMessage>& messages);
// Roles: system (first message only), user, assistant; content: a string.
Result<std::vector<tok::ChatMessage>> conversation_from_json(std::string_view text);

}  // namespace lumen::cli
