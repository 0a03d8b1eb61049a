// HTTP/1.1 messages as the handlers see them: a parsed request, and the response a handler
// fills in (one body, or a stream written after the head). The transport (http_transport.h)
// reads requests off the wire and writes responses; the handlers never see a socket.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace lumen::server {

struct HttpHeader {
  std::string name;   // lower case in requests (names are case-insensitive)
  std::string value;  // optional whitespace around it removed
};

// Case-insensitive ASCII comparison of header names and tokens.
bool equals_ignore_case(std::string_view a, std::string_view b);

// What a handler can ask about the connection its request came on, while it serves it.
// Thread-safe: the transport's I/O thread sets it, handler threads read it.
class ClientLink {
 public:
  // True once the client has hung up (or the connection was dropped): stop working for it.
  bool gone() const { return gone_.load(std::memory_order_acquire); }
  void set_gone() { gone_.store(true, std::memory_order_release); }

 private:
  std::atomic<bool> gone_{false};
};

struct HttpRequest {
  std::string method;   // "GET", "POST", ... (case-sensitive, as sent)
  std::string target;   // as sent: "/v1/completions?x=1"
  std::string path;     // the target before '?'
  int version_minor = 1;  // HTTP/1.<version_minor>: 0 or 1
  std::vector<HttpHeader> headers;
  std::string body;     // de-chunked
  std::string remote_addr;  // numeric peer address ("127.0.0.1", "::1")
  int remote_port = 0;
  std::shared_ptr<const ClientLink> link;  // null for requests not read off a connection (tests)

  // The first header of that name ("" if none); `name` in any case.
  std::string header_value(std::string_view name) const;
  bool has_header(std::string_view name) const;
  bool client_gone() const { return link && link->gone(); }
};

// Writes a streamed response body (after the head has gone out). Blocks while the client
// is slower than the producer (backpressure: only the calling thread waits).
class StreamWriter {
 public:
  virtual ~StreamWriter() = default;
  // Queues `data` for the client; false once the client has gone (nothing more is sent).
  virtual bool write(std::string_view data) = 0;
  virtual bool client_gone() const = 0;
};

// Produces a streamed body; returns when the body is complete (or the client has gone).
using StreamFn = std::function<void(StreamWriter&)>;

struct HttpResponse {
  int status = 200;
  std::vector<HttpHeader> headers;  // as given (Content-Length, Transfer-Encoding and
                                    // Connection are the transport's)
  std::string body;
  StreamFn stream;                  // set: the body is streamed (chunked) by it, `body` unused

  // Replaces a header of the same name (case-insensitive) or adds it.
  void set_header(std::string_view name, std::string value);
  // The first header of that name, or "".
  std::string header_value(std::string_view name) const;
  void set_content(std::string content, std::string_view content_type);
  void set_stream(std::string_view content_type, StreamFn fn);
};

// The reason phrase of a status code ("OK", "Payload Too Large"; "" for unknown codes).
std::string_view http_reason(int status);

}  // namespace lumen::server
