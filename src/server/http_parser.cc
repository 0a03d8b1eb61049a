#include "server/http_parser.h"

#include <algorithm>
#include <cstring>

namespace lumen::server {
namespace {

constexpr int64_t kMaxChunkLineBytes = 4096;  // a chunk size and its extensions
constexpr size_t kMaxMethodBytes = 32;
constexpr size_t kMaxQuotedBytes = 64;       // how much of a bad value an error message quotes

// RFC 9110 tchar: the characters of a token (method, header name).
bool is_tchar(unsigned char c) {
  if ((c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return true;
  return std::strchr("!#$%&'*+-.^_`|~", c) != nullptr && c != 0;
}

bool is_token(std::string_view s) {
  return !s.empty() && std::all_of(s.begin(), s.end(), [](char c) { return is_tchar(static_cast<unsigned char>(c)); });
}

std::string_view trim_ows(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

char lower(char c) { return c >= 'A' && c <= 'Z' ? static_cast<char>(c - 'A' + 'a') : c; }

std::string to_lower(std::string_view s) {
  std::string out(s);
  for (char& c : out) c = lower(c);
  return out;
}

// A bounded, printable rendition of a client's bytes for an error message.
std::string quoted(std::string_view s) {
  std::string out = "'";
  for (size_t i = 0; i < s.size() && i < kMaxQuotedBytes; ++i) {
    const unsigned char c = static_cast<unsigned char>(s[i]);
    out += (c >= 0x20 && c < 0x7f) ? static_cast<char>(c) : '?';
  }
  if (s.size() > kMaxQuotedBytes) out += "...";
  return out + "'";
}

// Calls fn(element) for each comma-separated element of a list header, trimmed; empty
// elements are skipped (RFC 9110 5.6.1).
template <typename Fn>
void for_each_element(std::string_view list, Fn&& fn) {
  while (!list.empty()) {
    const size_t comma = list.find(',');
    const std::string_view element = trim_ows(list.substr(0, comma));
    if (!element.empty()) fn(element);
    if (comma == std::string_view::npos) break;
    list.remove_prefix(comma + 1);
  }
}

int hex_digit(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

}  // namespace

bool HttpRequestParser::take_line(std::string_view data, size_t* pos, int64_t max_bytes, int too_long_status,
                                  const char* what) {
  const size_t start = *pos;
  const size_t nl = data.find('\n', start);
  const size_t end = nl == std::string_view::npos ? data.size() : nl;
  const size_t n = end - start;
  if (static_cast<int64_t>(line_.size() + n) > max_bytes) {
    fail(too_long_status, std::string(what) + " is over " + std::to_string(max_bytes) + " bytes");
    *pos = data.size();
    return false;
  }
  line_.append(data.data() + start, n);
  if (phase_ == Phase::kHead || phase_ == Phase::kTrailers) {
    head_bytes_ += static_cast<int64_t>(n + (nl == std::string_view::npos ? 0 : 1));
    if (head_bytes_ > limits_.max_head_bytes) {
      fail(431, "the request head is over " + std::to_string(limits_.max_head_bytes) + " bytes");
      *pos = data.size();
      return false;
    }
  }
  *pos = nl == std::string_view::npos ? data.size() : nl + 1;
  if (nl == std::string_view::npos) return false;
  if (!line_.empty() && line_.back() == '\r') line_.pop_back();
  return true;
}

bool HttpRequestParser::take_body(std::string_view data, size_t* pos) {
  const size_t n = static_cast<size_t>(std::min<int64_t>(body_remaining_, static_cast<int64_t>(data.size() - *pos)));
  req_.body.append(data.data() + *pos, n);
  *pos += n;
  body_remaining_ -= static_cast<int64_t>(n);
  return body_remaining_ == 0;
}

size_t HttpRequestParser::feed(std::string_view data) {
  size_t pos = 0;
  while (pos < data.size() && state_ == State::kNeedMore) {
    started_ = true;
    switch (phase_) {
      case Phase::kHead: {
        const int64_t max = have_request_line_ ? limits_.max_head_bytes : limits_.max_line_bytes;
        if (!take_line(data, &pos, max, have_request_line_ ? 431 : 414,
                       have_request_line_ ? "a header line" : "the request line"))
          break;
        const std::string line = std::move(line_);
        line_.clear();
        head_line(line);  // on error the state is kError and the loop ends
        break;
      }
      case Phase::kBody:
        if (take_body(data, &pos)) complete();
        break;
      case Phase::kChunkSize: {
        if (!take_line(data, &pos, kMaxChunkLineBytes, 400, "a chunk-size line")) break;
        const std::string line = std::move(line_);
        line_.clear();
        chunk_size_line(line);
        break;
      }
      case Phase::kChunkData:
        if (take_body(data, &pos)) phase_ = Phase::kChunkDataEnd;
        break;
      case Phase::kChunkDataEnd: {
        if (!take_line(data, &pos, 2, 400, "the end of a chunk")) break;
        if (!line_.empty()) fail(400, "chunked body: a chunk's data is longer than its size");
        line_.clear();
        phase_ = Phase::kChunkSize;
        break;
      }
      case Phase::kTrailers: {
        if (!take_line(data, &pos, limits_.max_head_bytes, 431, "a trailer line")) break;
        const bool empty = line_.empty();
        const bool has_colon = line_.find(':') != std::string::npos;
        line_.clear();
        if (empty) complete();
        else if (!has_colon) fail(400, "chunked body: a trailer line without ':'");
        break;
      }
    }
  }
  return pos;
}

bool HttpRequestParser::head_line(std::string_view line) {
  if (!have_request_line_) {
    if (line.empty()) return true;  // empty lines before a request are ignored (RFC 9112 2.2)
    return request_line(line);
  }
  if (line.empty()) return end_of_head();
  return header_line(line);
}

bool HttpRequestParser::request_line(std::string_view line) {
  const size_t sp1 = line.find(' ');
  const size_t sp2 = sp1 == std::string_view::npos ? sp1 : line.find(' ', sp1 + 1);
  if (sp2 == std::string_view::npos || line.find(' ', sp2 + 1) != std::string_view::npos) {
    fail(400, "the request line is not 'METHOD /target HTTP/1.1': " + quoted(line));
    return false;
  }
  const std::string_view method = line.substr(0, sp1);
  const std::string_view target = line.substr(sp1 + 1, sp2 - sp1 - 1);
  const std::string_view version = line.substr(sp2 + 1);
  if (!is_token(method) || method.size() > kMaxMethodBytes) {
    fail(400, "the request method is not a token: " + quoted(method));
    return false;
  }
  const bool asterisk = target == "*" && method == "OPTIONS";
  if (!asterisk && (target.empty() || target[0] != '/')) {
    fail(400, "the request target must be a path starting with '/': " + quoted(target));
    return false;
  }
  for (char ch : target) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if (c <= 0x20 || c >= 0x7f) {
      fail(400, "the request target has a byte outside printable ASCII: " + quoted(target));
      return false;
    }
  }
  if (version == "HTTP/1.1") {
    req_.version_minor = 1;
  } else if (version == "HTTP/1.0") {
    req_.version_minor = 0;
  } else if (version.substr(0, 5) == "HTTP/" && version.size() >= 6 && version[5] >= '0' && version[5] <= '9') {
    fail(505, "HTTP version " + quoted(version.substr(5)) + " is not supported (1.0 and 1.1 are)");
    return false;
  } else {
    fail(400, "the request line does not end with an HTTP version: " + quoted(version));
    return false;
  }
  req_.method = std::string(method);
  req_.target = std::string(target);
  req_.path = req_.target.substr(0, req_.target.find('?'));
  have_request_line_ = true;
  return true;
}

bool HttpRequestParser::header_line(std::string_view line) {
  if (line[0] == ' ' || line[0] == '\t') {
    fail(400, "obsolete header line folding is not accepted");
    return false;
  }
  const size_t colon = line.find(':');
  if (colon == std::string_view::npos) {
    fail(400, "a header line without ':': " + quoted(line));
    return false;
  }
  const std::string_view name = line.substr(0, colon);
  if (!is_token(name)) {
    fail(400, "a header name is not a token (no whitespace before ':'): " + quoted(name));
    return false;
  }
  const std::string_view value = trim_ows(line.substr(colon + 1));
  for (char ch : value) {
    const unsigned char c = static_cast<unsigned char>(ch);
    if ((c < 0x20 && c != '\t') || c == 0x7f) {
      fail(400, "header " + quoted(name) + " has a control character in its value");
      return false;
    }
  }
  if (static_cast<int32_t>(req_.headers.size()) >= limits_.max_headers) {
    fail(431, "more than " + std::to_string(limits_.max_headers) + " header lines");
    return false;
  }
  req_.headers.push_back(HttpHeader{to_lower(name), std::string(value)});
  return true;
}

bool HttpRequestParser::end_of_head() {
  head_done_ = true;
  int n_host = 0;
  bool have_te = false;
  std::vector<std::string> codings;
  std::string length_text;  // the first Content-Length element, to compare the others with
  keep_alive_ = req_.version_minor == 1;
  for (const HttpHeader& h : req_.headers) {
    if (h.name == "host") {
      ++n_host;
    } else if (h.name == "content-length") {
      bool bad = false;
      for_each_element(h.value, [&](std::string_view e) {
        if (bad) return;
        if (!std::all_of(e.begin(), e.end(), [](char c) { return c >= '0' && c <= '9'; })) {
          fail(400, "Content-Length is not a decimal number: " + quoted(h.value));
          bad = true;
        } else if (have_length_ && e != length_text) {
          fail(400, "Content-Length values disagree: " + quoted(length_text) + " and " + quoted(e));
          bad = true;
        } else if (!have_length_) {
          have_length_ = true;
          length_text = std::string(e);
        }
      });
      if (!bad && h.value.find_first_not_of(" \t,") == std::string::npos) {
        fail(400, "Content-Length is empty");
        bad = true;
      }
      if (bad) return false;
    } else if (h.name == "transfer-encoding") {
      have_te = true;
      for_each_element(h.value, [&](std::string_view e) { codings.push_back(to_lower(e)); });
    } else if (h.name == "connection") {
      for_each_element(h.value, [&](std::string_view e) {
        if (equals_ignore_case(e, "close")) keep_alive_ = false;
        else if (equals_ignore_case(e, "keep-alive") && req_.version_minor == 0) keep_alive_ = true;
      });
    } else if (h.name == "expect") {
      if (!equals_ignore_case(h.value, "100-continue")) {
        fail(417, "Expect " + quoted(h.value) + " is not supported (only 100-continue is)");
        return false;
      }
      expect_continue_ = true;
    }
  }
  if (req_.version_minor == 1 && n_host != 1) {
    fail(400, n_host == 0 ? "an HTTP/1.1 request needs a Host header" : "more than one Host header");
    return false;
  }
  if (n_host > 1) {
    fail(400, "more than one Host header");
    return false;
  }
  if (have_te) {
    if (have_length_) {
      fail(400, "Content-Length together with Transfer-Encoding (request smuggling shape)");
      return false;
    }
    if (req_.version_minor == 0) {
      fail(400, "Transfer-Encoding in an HTTP/1.0 request");
      return false;
    }
    if (codings.empty() || codings.back() != "chunked") {
      fail(400, "Transfer-Encoding must end with chunked");
      return false;
    }
    if (codings.size() > 1) {
      fail(501, "Transfer-Encoding " + quoted(codings.front()) + " is not supported (only chunked is)");
      return false;
    }
    chunked_ = true;
    phase_ = Phase::kChunkSize;
    return true;
  }
  if (have_length_) {
    // More than 18 digits cannot fit an int64_t: over any limit.
    const size_t first_nonzero = std::min(length_text.find_first_not_of('0'), length_text.size());
    const std::string_view digits = std::string_view(length_text).substr(first_nonzero);
    if (digits.size() > 18) {
      fail(413, "Content-Length " + quoted(length_text) + " is over the limit of " +
                    std::to_string(limits_.max_body_bytes) + " bytes");
      return false;
    }
    content_length_ = 0;
    for (char c : digits) content_length_ = content_length_ * 10 + (c - '0');
    if (content_length_ > limits_.max_body_bytes) {
      fail(413, "Content-Length " + std::to_string(content_length_) + " is over the limit of " +
                    std::to_string(limits_.max_body_bytes) + " bytes");
      return false;
    }
  }
  if (content_length_ > 0) {
    req_.body.reserve(static_cast<size_t>(content_length_));
    body_remaining_ = content_length_;
    phase_ = Phase::kBody;
  } else {
    complete();
  }
  return true;
}

bool HttpRequestParser::chunk_size_line(std::string_view line) {
  const size_t end = line.find_first_of(" \t;");
  const std::string_view hex = line.substr(0, end);
  if (hex.empty() || hex.size() > 15 || !std::all_of(hex.begin(), hex.end(), [](char c) { return hex_digit(c) >= 0; })) {
    fail(hex.size() > 15 ? 413 : 400, "chunked body: a bad chunk size " + quoted(hex));
    return false;
  }
  int64_t size = 0;
  for (char c : hex) size = size * 16 + hex_digit(c);
  if (size > limits_.max_body_bytes - static_cast<int64_t>(req_.body.size())) {
    fail(413, "the chunked body is over the limit of " + std::to_string(limits_.max_body_bytes) + " bytes");
    return false;
  }
  if (size == 0) {
    phase_ = Phase::kTrailers;
  } else {
    body_remaining_ = size;
    phase_ = Phase::kChunkData;
  }
  return true;
}

void HttpRequestParser::fail(int status, std::string message) {
  state_ = State::kError;
  error_ = HttpParseError{status, std::move(message)};
}

void HttpRequestParser::complete() {
  state_ = State::kComplete;
  if (chunked_) {  // the body is now de-chunked: say so to whoever reads the headers
    std::erase_if(req_.headers, [](const HttpHeader& h) { return h.name == "transfer-encoding"; });
    req_.headers.push_back(HttpHeader{"content-length", std::to_string(req_.body.size())});
  }
}

HttpRequest HttpRequestParser::take() {
  HttpRequest out = std::move(req_);
  reset();
  return out;
}

void HttpRequestParser::reset() {
  const HttpLimits limits = limits_;
  *this = HttpRequestParser(limits);
}

// ---- http_message.h helpers (kept here: the parser is what defines the header model).

bool equals_ignore_case(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (lower(a[i]) != lower(b[i])) return false;
  return true;
}

std::string HttpRequest::header_value(std::string_view name) const {
  for (const HttpHeader& h : headers)
    if (equals_ignore_case(h.name, name)) return h.value;
  return "";
}

bool HttpRequest::has_header(std::string_view name) const {
  return std::any_of(headers.begin(), headers.end(), [&](const HttpHeader& h) { return equals_ignore_case(h.name, name); });
}

void HttpResponse::set_header(std::string_view name, std::string value) {
  for (HttpHeader& h : headers)
    if (equals_ignore_case(h.name, name)) {
      h.value = std::move(value);
      return;
    }
  headers.push_back(HttpHeader{std::string(name), std::move(value)});
}

std::string HttpResponse::header_value(std::string_view name) const {
  for (const HttpHeader& h : headers)
    if (equals_ignore_case(h.name, name)) return h.value;
  return "";
}

void HttpResponse::set_content(std::string content, std::string_view content_type) {
  body = std::move(content);
  stream = nullptr;
  set_header("Content-Type", std::string(content_type));
}

void HttpResponse::set_stream(std::string_view content_type, StreamFn fn) {
  body.clear();
  stream = std::move(fn);
  set_header("Content-Type", std::string(content_type));
}

std::string_view http_reason(int status) {
  struct Reason {
    int status;
    const char* text;
  };
  static constexpr Reason kReasons[] = {
      {100, "Continue"},
      {200, "OK"},
      {204, "No Content"},
      {400, "Bad Request"},
      {401, "Unauthorized"},
      {403, "Forbidden"},
      {404, "Not Found"},
      {405, "Method Not Allowed"},
      {408, "Request Timeout"},
      {413, "Payload Too Large"},
      {414, "URI Too Long"},
      {415, "Unsupported Media Type"},
      {417, "Expectation Failed"},
      {429, "Too Many Requests"},
      {431, "Request Header Fields Too Large"},
      {499, "Client Closed Request"},
      {500, "Internal Server Error"},
      {501, "Not Implemented"},
      {503, "Service Unavailable"},
      {505, "HTTP Version Not Supported"},
  };
  for (const Reason& r : kReasons)
    if (r.status == status) return r.text;
  return "";
}

}  // namespace lumen::server
