// nlohmann::json adapter for the gguf layer: parsing never throws out of here.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

#include "base/status.h"

namespace lumen::gguf {

// Parses `text` (`what` names it in errors: "config.json"). Nesting deeper than 64 levels
// is rejected before parsing, so no recursive json operation can exhaust the stack.
Result<nlohmann::json> parse_json(std::string_view text, std::string_view what);

// Parses `text` keeping each object's key order, in time linear in the text (nlohmann's own
// ordered_json::parse looks every key up linearly: 100,000 keys in one object take a
// minute). A key given twice keeps its first place and its last value, as nlohmann's
// parsers do. Errors say "not valid JSON (error at byte N)". Callers bound the nesting
// first (json_depth_within).
Result<nlohmann::ordered_json> parse_ordered_json(std::string_view text);

// Whether `text` nests arrays and objects at most max_depth deep (brackets inside strings do
// not count). A cheap check before parsing untrusted JSON with a recursive parser.
bool json_depth_within(std::string_view text, int max_depth);

// Typed optional fields of a JSON object. Missing or null -> nullopt; wrong type -> error
// naming `what` and the key.
Result<std::optional<int64_t>> json_int(const nlohmann::json& obj, std::string_view key, std::string_view what);
Result<std::optional<double>> json_number(const nlohmann::json& obj, std::string_view key, std::string_view what);
Result<std::optional<bool>> json_bool(const nlohmann::json& obj, std::string_view key, std::string_view what);
Result<std::optional<std::string>> json_string(const nlohmann::json& obj, std::string_view key,
                                               std::string_view what);

}  // namespace lumen::gguf
