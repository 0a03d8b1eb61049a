#include "server/api_error.h"

#include <nlohmann/json.hpp>

namespace lumen::server {

std::string_view status_field(std::string_view message) {
  // A field path: name, then any of .name / [index]; followed by ": ".
  const size_t colon = message.find(": ");
  if (colon == std::string_view::npos || colon == 0) return {};
  const std::string_view field = message.substr(0, colon);
  const char first = field[0];
  if (!((first >= 'a' && first <= 'z') || (first >= 'A' && first <= 'Z') || first == '_')) return {};
  for (const char c : field) {
    const bool ok = (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
                    c == '_' || c == '.' || c == '[' || c == ']';
    if (!ok) return {};
  }
  return field;
}

ApiError api_error_from_status(const Status& status) {
  ApiError e;
  e.message = status.message();
  switch (status.code()) {
    case StatusCode::kInvalidArgument:
      e.http_status = 400;
      e.param = std::string(status_field(status.message()));
      break;
    case StatusCode::kUnavailable:
      e.http_status = 503;
      e.type = "server_busy";
      break;
    case StatusCode::kNotFound:
      e.http_status = 404;
      e.type = "not_found_error";
      break;
    default:
      e.http_status = 500;
      e.type = "server_error";
      break;
  }
  return e;
}

ApiError invalid_request(std::string param, std::string message) {
  ApiError e;
  e.param = std::move(param);
  e.message = std::move(message);
  return e;
}

std::string api_error_json(const ApiError& error) {
  nlohmann::json body = {{"message", error.message},
                         {"type", error.type},
                         {"param", nullptr},
                         {"code", nullptr}};
  if (!error.param.empty()) body["param"] = error.param;
  if (!error.code.empty()) body["code"] = error.code;
  nlohmann::json j = {{"error", std::move(body)}};
  // replace: a message may quote bytes of a client's invalid input; never throw on them.
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace lumen::server
