#include "gguf/json_util.h"

#include <cmath>
#include <exception>

#include "gguf/gguf_util.h"

namespace lumen::gguf {
namespace {

constexpr int kMaxJsonDepth = 64;

}  // namespace

bool json_depth_within(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\') ++i;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth) return false;
    } else if (c == ']' || c == '}') {
      --depth;
    }
  }
  return true;
}

namespace {

std::string type_of(const nlohmann::json& v) { return v.type_name(); }

// A short printable rendering of a value for error messages (never throws: invalid UTF-8
// is replaced).
std::string short_dump(const nlohmann::json& v) {
  return quote(v.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
}

}  // namespace

Result<nlohmann::json> parse_json(std::string_view text, std::string_view what) {
  if (!json_depth_within(text, kMaxJsonDepth))
    return error(std::string(what) + ": JSON nested deeper than " + std::to_string(kMaxJsonDepth) + " levels");
  try {
    return nlohmann::json::parse(text.begin(), text.end());
  } catch (const nlohmann::json::exception& e) {
    return error(std::string(what) + ": invalid JSON: " + quote(e.what()));
  } catch (const std::exception& e) {
    return error(std::string(what) + ": cannot parse JSON: " + quote(e.what()));
  }
}

Result<std::optional<int64_t>> json_int(const nlohmann::json& obj, std::string_view key, std::string_view what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<int64_t>();
  if (it->is_number_unsigned()) {
    const uint64_t u = it->get<uint64_t>();
    if (u > static_cast<uint64_t>(INT64_MAX))
      return error(std::string(what) + ": '" + std::string(key) + "' = " + std::to_string(u) + " is too large");
    return std::optional<int64_t>(static_cast<int64_t>(u));
  }
  if (it->is_number_integer()) return std::optional<int64_t>(it->get<int64_t>());
  if (it->is_number_float()) {  // e.g. 4096.0: accept exact integers only
    const double d = it->get<double>();
    if (std::isfinite(d) && std::floor(d) == d && std::fabs(d) < 9.0e15)
      return std::optional<int64_t>(static_cast<int64_t>(d));
  }
  return error(std::string(what) + ": '" + std::string(key) + "' must be an integer, got " + type_of(*it) + " " +
               short_dump(*it));
}

Result<std::optional<double>> json_number(const nlohmann::json& obj, std::string_view key, std::string_view what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<double>();
  if (it->is_number()) return std::optional<double>(it->get<double>());
  return error(std::string(what) + ": '" + std::string(key) + "' must be a number, got " + type_of(*it) + " " +
               short_dump(*it));
}

Result<std::optional<bool>> json_bool(const nlohmann::json& obj, std::string_view key, std::string_view what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<bool>();
  if (it->is_boolean()) return std::optional<bool>(it->get<bool>());
  return error(std::string(what) + ": '" + std::string(key) + "' must be a boolean, got " + type_of(*it));
}

Result<std::optional<std::string>> json_string(const nlohmann::json& obj, std::string_view key,
                                               std::string_view what) {
  const auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return std::optional<std::string>();
  if (it->is_string()) return std::optional<std::string>(it->get<std::string>());
  return error(std::string(what) + ": '" + std::string(key) + "' must be a string, got " + type_of(*it));
}

}  // namespace lumen::gguf
