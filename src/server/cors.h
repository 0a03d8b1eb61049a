// CORS (cross-origin resource sharing) for `lumen serve --cors-origin ORIGIN`: which web
// pages may call the API from a browser. Off unless origins are given.
//
//   browser (page at https://app.example)            lumen serve --cors-origin https://app.example
//   OPTIONS /v1/chat/completions  Origin, Access-Control-Request-Method/-Headers
//                                  -> 204 Allow-Origin: https://app.example, Allow-Methods,
//                                     Allow-Headers (Authorization, Content-Type + asked), Max-Age
//   POST /v1/chat/completions     Origin: https://app.example
//                                  -> the answer (a stream or an error too) + Allow-Origin
//
// A request whose Origin is not listed gets no CORS headers at all (the browser then hides
// the answer from the page), and its preflight is not answered (405 as before).
// Immutable after parse(): safe from any thread.
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "base/status.h"
#include "server/http_message.h"

namespace lumen::server {

class CorsPolicy {
 public:
  // Preflight answers may be cached by the browser this long.
  static constexpr int kMaxAgeSeconds = 3600;

  CorsPolicy() = default;  // off
  // From --cors-origin values, each one origin or a comma-separated list of them:
  // "*" (any origin) or scheme://host[:port] (http or https, no path). Errors name the value.
  static Result<CorsPolicy> parse(const std::vector<std::string>& values);

  bool enabled() const { return any_ || !origins_.empty(); }
  // Whether a request's Origin header value is allowed (false when CORS is off).
  bool allows(std::string_view origin) const;
  // A preflight: OPTIONS with Origin and Access-Control-Request-Method.
  static bool is_preflight(const HttpRequest& req);
  // Answers an allowed preflight for a path served with these methods (204 + headers).
  void answer_preflight(const HttpRequest& req, std::string_view methods, HttpResponse& res) const;
  // Adds Access-Control-Allow-Origin (and Vary, Expose-Headers) to a response when the
  // request's Origin is allowed; nothing otherwise.
  void decorate(const HttpRequest& req, HttpResponse& res) const;

 private:
  bool any_ = false;
  std::vector<std::string> origins_;  // normalised: lower-case scheme and host, no default port
};

}  // namespace lumen::server
