#include "server/cors.h"

#include <algorithm>

namespace lumen::server {
namespace {

constexpr size_t kMaxOriginBytes = 256;
constexpr size_t kMaxRequestedHeaderBytes = 1024;  // Access-Control-Request-Headers echoed back

char lower_char(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

bool is_host_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9') || c == '-' || c == '.' || c == '[' || c == ']' || c == ':';
}

// An HTTP token character (RFC 9110 tchar): what a header name is made of.
bool is_token_char(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
         std::string_view("!#$%&'*+-.^_`|~").find(c) != std::string_view::npos;
}

// "Scheme://Host[:port]" -> "scheme://host[:port]" without the scheme's default port;
// "" when it is not an http(s) origin.
std::string normalise_origin(std::string_view origin) {
  if (origin.empty() || origin.size() > kMaxOriginBytes) return "";
  std::string s;
  s.reserve(origin.size());
  for (char c : origin) s.push_back(lower_char(c));
  std::string_view scheme;
  if (s.rfind("http://", 0) == 0) scheme = "http";
  else if (s.rfind("https://", 0) == 0) scheme = "https";
  else return "";
  const std::string_view authority = std::string_view(s).substr(scheme.size() + 3);
  if (authority.empty() || !std::all_of(authority.begin(), authority.end(), is_host_char)) return "";
  const std::string default_port = scheme == "http" ? ":80" : ":443";
  if (authority.size() > default_port.size() && authority.ends_with(default_port) && authority.front() != ':')
    s.resize(s.size() - default_port.size());
  return s;
}

// Splits on commas, trimming spaces; empty items dropped.
std::vector<std::string_view> split_list(std::string_view v) {
  std::vector<std::string_view> out;
  while (!v.empty()) {
    const size_t comma = v.find(',');
    std::string_view item = v.substr(0, comma);
    while (!item.empty() && (item.front() == ' ' || item.front() == '\t')) item.remove_prefix(1);
    while (!item.empty() && (item.back() == ' ' || item.back() == '\t')) item.remove_suffix(1);
    if (!item.empty()) out.push_back(item);
    if (comma == std::string_view::npos) break;
    v.remove_prefix(comma + 1);
  }
  return out;
}

}  // namespace

Result<CorsPolicy> CorsPolicy::parse(const std::vector<std::string>& values) {
  CorsPolicy p;
  for (const std::string& value : values) {
    const std::vector<std::string_view> items = split_list(value);
    if (items.empty()) return error("--cors-origin: empty value (give an origin such as http://localhost:3000, or '*')");
    for (std::string_view item : items) {
      if (item == "*") {
        p.any_ = true;
        continue;
      }
      std::string o = normalise_origin(item);
      if (o.empty() || item.back() == '/')
        return error("--cors-origin: '" + std::string(item.substr(0, 80)) +
                     "' is not an origin (scheme://host[:port] with scheme http or https and no path, or '*')");
      if (std::find(p.origins_.begin(), p.origins_.end(), o) == p.origins_.end()) p.origins_.push_back(std::move(o));
    }
  }
  return p;
}

bool CorsPolicy::allows(std::string_view origin) const {
  if (origin.empty() || origin.size() > kMaxOriginBytes) return false;
  if (any_) return true;
  const std::string o = normalise_origin(origin);
  return !o.empty() && std::find(origins_.begin(), origins_.end(), o) != origins_.end();
}

bool CorsPolicy::is_preflight(const HttpRequest& req) {
  return req.method == "OPTIONS" && req.has_header("Origin") && req.has_header("Access-Control-Request-Method");
}

void CorsPolicy::answer_preflight(const HttpRequest& req, std::string_view methods, HttpResponse& res) const {
  res.status = 204;
  res.body.clear();
  decorate(req, res);
  res.set_header("Access-Control-Allow-Methods", std::string(methods) + ", OPTIONS");
  // Authorization and Content-Type always; whatever else the page asked for (SDKs send
  // their own x-... headers) when it is a list of header names.
  std::string headers = "Authorization, Content-Type";
  const std::string asked = req.header_value("Access-Control-Request-Headers");
  if (asked.size() <= kMaxRequestedHeaderBytes) {
    for (std::string_view h : split_list(asked)) {
      if (!std::all_of(h.begin(), h.end(), is_token_char)) continue;
      if (h.size() == 13 && equals_ignore_case(h, "authorization")) continue;
      if (h.size() == 12 && equals_ignore_case(h, "content-type")) continue;
      headers += ", ";
      headers += h;
    }
  }
  res.set_header("Access-Control-Allow-Headers", headers);
  res.set_header("Access-Control-Max-Age", std::to_string(kMaxAgeSeconds));
}

void CorsPolicy::decorate(const HttpRequest& req, HttpResponse& res) const {
  if (!enabled() || !req.has_header("Origin")) return;
  const std::string origin = req.header_value("Origin");
  if (!allows(origin)) return;
  // The origin itself rather than "*": correct whether or not the page sends credentials.
  res.set_header("Access-Control-Allow-Origin", origin);
  res.set_header("Vary", "Origin");
  res.set_header("Access-Control-Expose-Headers", "X-Routing-Key, X-Replica-Id, Retry-After");
}

}  // namespace lumen::server
