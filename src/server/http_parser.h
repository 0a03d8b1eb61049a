// An incremental, strict HTTP/1.x request parser (untrusted input: fuzzed under ASan).
//
// Bytes arrive in any split; feed() consumes what belongs to the current request and
// leaves the rest (a pipelined next request) to the caller. Every limit is checked as
// bytes arrive, so an oversized or malformed request is refused at the first byte that
// makes it so, not after a read timeout:
//
//   request line   METHOD SP /target SP HTTP/1.0|1.1     (414 over max_line_bytes, 505 other versions)
//   header lines   name ":" OWS value OWS                 (431 over max_head_bytes or max_headers)
//   empty line
//   body           Content-Length: N  (digits only; repeats must agree; 413 over max_body_bytes)
//                  Transfer-Encoding: chunked  (hex sizes, extensions ignored, trailers dropped;
//                                               501 for any other coding; 400 with Content-Length)
//
// Line ends are CRLF or a bare LF (RFC 9112 lets recipients accept LF). Obsolete line
// folding, control characters, whitespace before ':' and a missing or repeated Host on
// HTTP/1.1 are 400.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "server/http_message.h"

namespace lumen::server {

struct HttpLimits {
  int64_t max_line_bytes = 8 << 10;   // the request line (the target, mostly)
  int64_t max_head_bytes = 32 << 10;  // request line + headers (+ chunked trailers)
  int32_t max_headers = 100;
  int64_t max_body_bytes = 4 << 20;   // de-chunked
};

// Why a request was refused: the status to answer and a message naming what is wrong.
struct HttpParseError {
  int status = 400;
  std::string message;
};

class HttpRequestParser {
 public:
  enum class State : uint8_t { kNeedMore, kComplete, kError };

  explicit HttpRequestParser(const HttpLimits& limits) : limits_(limits) {}

  // Consumes bytes of the current request from `data`; returns how many were used (the
  // rest belongs to the next request). Call again with more bytes while kNeedMore.
  size_t feed(std::string_view data);
  State state() const { return state_; }
  const HttpParseError& error() const { return error_; }
  // Any byte of a request has arrived (leading empty lines do not count).
  bool started() const { return started_; }
  // The head is complete, a body is still due, and the client asked for 100-continue.
  bool wants_continue() const { return head_done_ && expect_continue_ && state_ == State::kNeedMore; }
  // Whether the connection may carry another request after this one (HTTP/1.1 without
  // "Connection: close", or HTTP/1.0 with "Connection: keep-alive"). Valid once the head is.
  bool keep_alive() const { return keep_alive_; }
  // The request once kComplete; the parser is then reset for the next one.
  HttpRequest take();
  void reset();

 private:
  enum class Phase : uint8_t { kHead, kBody, kChunkSize, kChunkData, kChunkDataEnd, kTrailers };

  size_t feed_head(std::string_view data);
  bool head_line(std::string_view line);  // false: error set
  bool request_line(std::string_view line);
  bool header_line(std::string_view line);
  bool end_of_head();
  bool chunk_size_line(std::string_view line);
  // Takes one line (without its end) from data at *pos into line_; true when complete.
  bool take_line(std::string_view data, size_t* pos, int64_t max_bytes, int too_long_status, const char* what);
  // Appends body bytes from data at *pos, up to body_remaining_; true when that is reached.
  bool take_body(std::string_view data, size_t* pos);
  void fail(int status, std::string message);
  void complete();

  HttpLimits limits_;
  State state_ = State::kNeedMore;
  Phase phase_ = Phase::kHead;
  HttpParseError error_;
  HttpRequest req_;
  std::string line_;          // the line being assembled
  int64_t head_bytes_ = 0;    // bytes of the head (and trailers) so far
  int64_t body_remaining_ = 0;  // Content-Length left, or the current chunk's bytes left
  bool started_ = false;
  bool have_request_line_ = false;
  bool head_done_ = false;
  bool expect_continue_ = false;
  bool keep_alive_ = true;
  bool chunked_ = false;
  bool have_length_ = false;
  bool host_seen_ = false;
  int64_t content_length_ = 0;
};

}  // namespace lumen::server
