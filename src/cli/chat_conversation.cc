#include "cli/chat_conversation.h"

#include <nlohmann/json.hpp>

namespace lumen::cli {

std::string conversation_to_json(const std::vector<tok::ChatMessage>& messages) {
  nlohmann::json arr = nlohmann::json::array();
  for (const tok::ChatMessage& m : messages) arr.push_back({{"role", m.role}, {"content", m.content}});
  return nlohmann::json{{"messages", arr}}.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

Result<std::vector<tok::ChatMessage>> conversation_from_json(std::string_view text) {
  const nlohmann::json j = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return error("not valid JSON");
  if (!j.is_object() || !j.contains("messages") || !j["messages"].is_array())
    return error("expected an object with a \"messages\" array");
  std::vector<tok::ChatMessage> out;
  const nlohmann::json& arr = j["messages"];
  for (size_t i = 0; i < arr.size(); ++i) {
    const nlohmann::json& m = arr[i];
    const std::string where = "messages[" + std::to_string(i) + "]";
    if (!m.is_object()) return error(where + ": expected an object");
    if (!m.contains("role") || !m["role"].is_string()) return error(where + ".role: expected a string");
    if (!m.contains("content") || !m["content"].is_string()) return error(where + ".content: expected a string");
    const std::string role = m["role"].get<std::string>();
    if (role != "system" && role != "user" && role != "assistant")
      return error(where + ".role: '" + role + "' is not system, user or assistant");
    if (role == "system" && i != 0) return error(where + ": a system message may only come first");
    out.push_back({role, m["content"].get<std::string>()});
  }
  return out;
}

}  // namespace lumen::cli
