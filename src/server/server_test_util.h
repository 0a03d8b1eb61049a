// Test helpers: an in-process server on an ephemeral port over the tiny shared models, and
// small HTTP clients (whole responses, SSE streams that may hang up early, raw sockets).
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <unistd.h>

#include <httplib.h>
#include <gtest/gtest.h>

#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "base/shared_dir.h"
#include "engine/async_engine.h"
#include "server/server.h"

namespace lumen::server::testing {

using Json = nlohmann::json;

inline std::string tiny_model_path() {
  return shared_dir() + "/models/TinyStories-656K/TinyStories-656K-Q8_0.gguf";
}
inline std::string stories260k_path() { return shared_dir() + "/models/stories260K/stories260K.gguf"; }
// A committed random-weight architecture case (tests/data/arch/NAME/model.gguf, FORMAT.md there).
inline std::string arch_model_path(const std::string& name) {
  return std::string(LUMEN_TEST_DATA_DIR) + "/arch/" + name + "/model.gguf";
}

struct TestServerOptions {
  std::string model_path = tiny_model_path();
  int32_t n_ctx = 256;
  int32_t max_seqs = 4;
  int32_t max_batch_tokens = 64;
  int32_t max_queue = 64;
  int32_t n_threads = 1;
  // A KV pool of this many blocks (of 16 tokens) for a model whose layers all attend fully,
  // to make the engine preempt; 0: room for max_seqs full contexts.
  int32_t kv_blocks = 0;
  bool enable_prefix_cache = true;
  ServerConfig server;
  bool attach = true;  // load the engine before returning
};

struct TestServer {
  std::unique_ptr<HttpServer> server;
  int port = 0;

  // Loads the engine and attaches it.
  static std::unique_ptr<engine::AsyncEngine> load(const TestServerOptions& o) {
    engine::EngineConfig ec;
    ec.n_threads = o.n_threads;
    ec.n_ctx = o.n_ctx;
    ec.max_seqs = o.max_seqs;
    ec.max_batch_tokens = o.max_batch_tokens;
    ec.enable_embeddings = o.server.embeddings;
    ec.enable_prefix_cache = o.enable_prefix_cache;
    if (o.kv_blocks > 0) {  // the block size in bytes, from an engine with the default pool
      auto probe = engine::Engine::create(o.model_path, ec);
      EXPECT_TRUE(probe.ok()) << probe.message();
      if (!probe.ok()) return nullptr;
      size_t block_bytes = 0;
      for (const kv::KvGroupUsage& g : (*probe)->metrics().kv_groups) {
        EXPECT_EQ(g.window, 0) << "kv_blocks: a sliding-window group's pool is sized apart";
        block_bytes += g.block_bytes;
      }
      ec.kv_memory_bytes = static_cast<int64_t>(block_bytes) * o.kv_blocks;
    }
    auto e = engine::Engine::create(o.model_path, ec);
    EXPECT_TRUE(e.ok()) << e.message();
    if (!e.ok()) return nullptr;
    engine::AsyncEngineConfig ac;
    ac.max_queued_requests = o.max_queue;
    return engine::AsyncEngine::start(std::move(e).value(), ac);
  }

  static std::unique_ptr<TestServer> start(TestServerOptions o = {}) {
    signal(SIGPIPE, SIG_IGN);
    o.server.port = 0;
    o.server.host = "127.0.0.1";
    o.server.idle_poll_ms = 20;
    o.server.log_requests = false;
    if (o.server.n_http_threads == 0) o.server.n_http_threads = 48;
    auto s = HttpServer::start(o.server);
    EXPECT_TRUE(s.ok()) << s.message();
    if (!s.ok()) return nullptr;
    auto t = std::make_unique<TestServer>();
    t->server = std::move(s).value();
    t->port = t->server->port();
    if (o.attach) {
      auto eng = load(o);
      if (!eng) return nullptr;
      t->server->attach_engine(std::move(eng));
    }
    return t;
  }

  std::unique_ptr<httplib::Client> client(const std::string& api_key = "") const {
    auto c = std::make_unique<httplib::Client>("127.0.0.1", port);
    c->set_read_timeout(60, 0);
    c->set_connection_timeout(5, 0);
    if (!api_key.empty()) c->set_bearer_token_auth(api_key);
    return c;
  }
};

struct HttpReply {
  int status = 0;  // 0: no response
  std::string body;
  httplib::Headers headers;
  Json json() const { return Json::parse(body, nullptr, false); }
};

inline HttpReply to_reply(const httplib::Result& r) {
  HttpReply out;
  if (!r) return out;
  out.status = r->status;
  out.body = r->body;
  out.headers = r->headers;
  return out;
}

inline HttpReply post(const TestServer& s, const std::string& path, const std::string& body,
                      const std::string& api_key = "") {
  return to_reply(s.client(api_key)->Post(path, body, "application/json"));
}

inline HttpReply get(const TestServer& s, const std::string& path, const std::string& api_key = "") {
  return to_reply(s.client(api_key)->Get(path));
}

// GET, OPTIONS or POST (a JSON body) with the given headers.
inline HttpReply send(const TestServer& s, const std::string& method, const std::string& path,
                      const httplib::Headers& headers, const std::string& body = "") {
  auto c = s.client();
  if (method == "GET") return to_reply(c->Get(path, headers));
  if (method == "OPTIONS") return to_reply(c->Options(path, headers));
  return to_reply(c->Post(path, headers, body, "application/json"));
}

// A streamed response: the JSON of every data event, and whether [DONE] came.
struct SseReply {
  int status = 0;
  std::vector<Json> events;
  bool done = false;
  std::string raw;
  std::string text(int index = 0) const {  // concatenated text / delta.content of one choice
    std::string s;
    for (const Json& e : events) {
      if (!e.contains("choices")) continue;
      for (const Json& c : e["choices"]) {
        if (c.value("index", -1) != index) continue;
        if (c.contains("text") && c["text"].is_string()) s += c["text"].get<std::string>();
        if (c.contains("delta") && c["delta"].contains("content") && c["delta"]["content"].is_string())
          s += c["delta"]["content"].get<std::string>();
      }
    }
    return s;
  }
};

// Streams `body` to `path`; hangs up after `max_events` data events if > 0.
inline SseReply post_stream(const TestServer& s, const std::string& path, const std::string& body,
                            int max_events = 0, const std::string& api_key = "") {
  auto c = s.client(api_key);
  SseReply out;
  std::string buf;
  httplib::Request req;
  req.method = "POST";
  req.path = path;
  req.body = body;
  req.set_header("Content-Type", "application/json");
  if (!api_key.empty()) req.set_header("Authorization", "Bearer " + api_key);
  req.response_handler = [&](const httplib::Response& r) {
    out.status = r.status;
    return true;
  };
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    out.raw.append(data, n);
    buf.append(data, n);
    size_t end;
    while ((end = buf.find("\n\n")) != std::string::npos) {
      std::string ev = buf.substr(0, end);
      buf.erase(0, end + 2);
      if (ev.rfind("data: ", 0) != 0) continue;
      ev = ev.substr(6);
      if (ev == "[DONE]") {
        out.done = true;
        continue;
      }
      out.events.push_back(Json::parse(ev, nullptr, false));
      if (max_events > 0 && static_cast<int>(out.events.size()) >= max_events) return false;  // hang up
    }
    return true;
  };
  httplib::Response res;
  httplib::Error err;
  c->send(req, res, err);
  if (out.status == 0) out.status = res.status > 0 ? res.status : 0;
  if (out.status != 200 && out.raw.empty()) out.raw = res.body;
  return out;
}

// A value from /metrics ("name" or "name{labels}"), or -1.
inline double metric(const TestServer& s, const std::string& series) {
  HttpReply r = get(s, "/metrics");
  size_t pos = 0;
  while ((pos = r.body.find(series + " ", pos)) != std::string::npos) {
    if (pos == 0 || r.body[pos - 1] == '\n') return std::stod(r.body.substr(pos + series.size() + 1));
    pos += series.size();
  }
  return -1;
}

inline bool wait_until(const std::function<bool()>& pred, double timeout_s = 10) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

// A raw TCP connection: for clients that send a request and hang up without reading, send
// bytes slowly, or come from another loopback address (`source`, e.g. "127.0.0.5").
class RawConnection {
 public:
  explicit RawConnection(int port, const std::string& source = "", int rcvbuf_bytes = 0) {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd_ < 0) return;
    if (rcvbuf_bytes > 0) setsockopt(fd_, SOL_SOCKET, SO_RCVBUF, &rcvbuf_bytes, sizeof rcvbuf_bytes);
    if (!source.empty()) {
      sockaddr_in b{};
      b.sin_family = AF_INET;
      inet_pton(AF_INET, source.c_str(), &b.sin_addr);
      if (bind(fd_, reinterpret_cast<sockaddr*>(&b), sizeof b) != 0) {
        close(fd_);
        fd_ = -1;
        return;
      }
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    if (connect(fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
      close(fd_);
      fd_ = -1;
    }
  }
  ~RawConnection() { hang_up(); }
  RawConnection(const RawConnection&) = delete;
  RawConnection& operator=(const RawConnection&) = delete;
  bool ok() const { return fd_ >= 0; }
  int fd() const { return fd_; }
  bool send_post(const std::string& path, const std::string& body) {
    return send("POST " + path + " HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                "Content-Length: " + std::to_string(body.size()) + "\r\n\r\n" + body);
  }
  bool send(const std::string& bytes) {
    return fd_ >= 0 && ::send(fd_, bytes.data(), bytes.size(), MSG_NOSIGNAL) == static_cast<ssize_t>(bytes.size());
  }
  // Reads what arrives within `timeout_s` (until `stop` appears in what was read, if given,
  // or the peer closes). Sets closed() if the peer closed the connection.
  std::string read_for(double timeout_s, const std::string& stop = "") {
    std::string got;
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (fd_ >= 0 && std::chrono::steady_clock::now() < deadline) {
      if (!stop.empty() && got.find(stop) != std::string::npos) break;
      timeval tv{0, 20000};
      setsockopt(fd_, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof tv);
      char buf[16384];
      const ssize_t n = ::recv(fd_, buf, sizeof buf, 0);
      if (n > 0) got.append(buf, static_cast<size_t>(n));
      else if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
        closed_ = true;
        break;
      }
    }
    return got;
  }
  // One whole response (head + Content-Length body), or what came before the timeout.
  std::string read_response(double timeout_s = 5) {
    std::string got = read_for(timeout_s, "\r\n\r\n");
    const size_t head_end = got.find("\r\n\r\n");
    if (head_end == std::string::npos) return got;
    const std::string head = got.substr(0, head_end);
    size_t cl = head.find("Content-Length: ");
    if (cl == std::string::npos) return got;
    const size_t want = head_end + 4 + std::stoul(head.substr(cl + 16));
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (got.size() < want && !closed_ && std::chrono::steady_clock::now() < deadline)
      got += read_for(0.05);
    return got;
  }
  bool closed() const { return closed_; }
  void hang_up() {
    if (fd_ >= 0) close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  bool closed_ = false;
};

// The status code of a raw response ("HTTP/1.1 413 ..."), or 0.
inline int raw_status(const std::string& response) {
  if (response.rfind("HTTP/1.", 0) != 0 || response.size() < 12) return 0;
  return std::atoi(response.c_str() + 9);
}

}  // namespace lumen::server::testing
