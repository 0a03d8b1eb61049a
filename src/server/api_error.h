// OpenAI-style API errors: what a client gets back when a request cannot be served.
//
//   {"error": {"message": "...", "type": "invalid_request_error", "param": "max_tokens", "code": null}}
//
// Layers below the server report bad input as a Status whose message starts with the field
// at fault ("max_tokens: must be >= 1, got 0"); api_error_from_status() turns that convention
// into `param`, so the engine's own validation errors name their field too.
#pragma once

#include <string>
#include <string_view>

#include "base/status.h"

namespace lumen::server {

struct ApiError {
  int http_status = 400;
  std::string message;
  std::string type = "invalid_request_error";  // or "authentication_error", "server_error", ...
  std::string param;                           // the field at fault; "" -> null
  std::string code;                            // machine-readable code; "" -> null
};

// The field path a "field: text" message starts with ("messages[2].role"), or "".
std::string_view status_field(std::string_view message);

// Maps a Status to an error: kInvalidArgument -> 400 naming the field, kUnavailable -> 503,
// kNotFound -> 404, anything else -> 500.
ApiError api_error_from_status(const Status& status);

ApiError invalid_request(std::string param, std::string message);

// The JSON body of an error response (one line, no trailing newline).
std::string api_error_json(const ApiError& error);

}  // namespace lumen::server
