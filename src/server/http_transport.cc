#include "server/http_transport.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "base/check.h"
#include "base/log.h"
#include "base/timer.h"

namespace lumen::server {
namespace {

constexpr int kListenBacklog = 1024;
constexpr size_t kReadChunk = 64 << 10;
constexpr size_t kMaxReadPerEvent = 256 << 10;  // fairness between busy connections
constexpr size_t kMaxUnsentBeforeRead = 1 << 20;  // stop parsing pipelined requests above this
constexpr int kSweepMs = 50;                    // how often deadlines are checked
// After an error response the server stops writing but reads (and drops) what the client
// still sends for this long before closing: closing with unread bytes would reset the
// connection and the client could lose the response (the 413 for a body it is uploading).
constexpr double kLingerMs = 2000;
constexpr uint64_t kListenId = 0;               // epoll data for the listening socket
constexpr uint64_t kWakeId = 1;                 // ... and for the workers' eventfd
constexpr uint64_t kFirstConnId = 2;

// The canned answers for connections refused at accept time (no request read yet).
constexpr std::string_view kRefusedBusy =
    "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";
constexpr std::string_view kRefusedPerClient =
    "HTTP/1.1 429 Too Many Requests\r\nRetry-After: 1\r\nContent-Length: 0\r\nConnection: close\r\n\r\n";

std::string numeric_host(const sockaddr_storage& ss, int* port) {
  char host[NI_MAXHOST] = {};
  char serv[NI_MAXSERV] = {};
  if (getnameinfo(reinterpret_cast<const sockaddr*>(&ss), sizeof ss, host, sizeof host, serv, sizeof serv,
                  NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  *port = std::atoi(serv);
  std::string h = host;
  if (h.rfind("::ffff:", 0) == 0 && h.find('.') != std::string::npos) h = h.substr(7);  // IPv4-mapped
  return h;
}

}  // namespace

// One request handed to a worker, shared by the worker (writes the response into
// `pending`) and the I/O thread (moves `pending` to the socket). Two holds: the I/O thread's
// (released when the response is written or the connection closes) and the worker's
// (released when its handler has returned); the last release retires the request.
struct Exchange {
  uint64_t conn_id = 0;
  HttpRequest request;                  // moved out by the worker
  std::shared_ptr<ClientLink> link;
  bool keep_alive = true;               // written by the worker before `finished`
  bool head_only = false;               // HEAD: the body is not sent
  std::atomic<int> holds{2};

  std::mutex mu;                        // guards the fields below
  std::condition_variable cv;           // wakes a stream writer waiting for room
  std::string pending;                  // response bytes the I/O thread has not taken yet
  bool finished = false;                // the whole response is in `pending` (or was taken)
  bool posted = false;                  // conn_id is in the I/O thread's posted list
};

struct HttpTransport::Impl {
  TransportConfig config;
  HttpCallbacks callbacks;
  int listen_fd = -1;
  int epoll_fd = -1;
  int wake_fd = -1;  // eventfd: workers and stop() wake the I/O thread
  int port = 0;
  std::thread io_thread;
  std::vector<std::thread> workers;

  // Shared with the workers and stop(); guarded by mu.
  std::mutex mu;
  std::condition_variable jobs_cv;   // wakes workers
  std::condition_variable idle_cv;   // wakes wait_idle_until
  std::deque<std::shared_ptr<Exchange>> jobs;
  std::vector<uint64_t> posted;      // connections with new response bytes
  bool stop_workers = false;

  std::atomic<bool> draining{false};
  std::atomic<bool> stopping{false};
  std::atomic<int64_t> n_active{0};

  // Counters (written by the I/O thread, read by stats()).
  std::atomic<int64_t> n_open{0}, n_accepted{0}, n_refused_capacity{0}, n_refused_per_client{0},
      n_evicted_idle{0}, n_request_timeouts{0}, n_write_timeouts{0}, n_bad_requests{0};

  // ---- I/O thread only.
  struct Connection {
    uint64_t id = 0;
    int fd = -1;
    std::string peer_addr;
    int peer_port = 0;
    HttpRequestParser parser;
    std::string stash;           // bytes read past the request being served (pipelined)
    std::string out;             // bytes being written
    size_t out_off = 0;
    std::shared_ptr<Exchange> exchange;  // the request on a worker, if any
    std::shared_ptr<ClientLink> link;    // the current request's (or null)
    double t_start_ms = 0;       // the current request's first byte (or the connection's accept)
    double t_idle_ms = 0;        // when it last became idle
    double t_write_ms = 0;       // last write progress
    bool continue_sent = false;
    bool close_after = false;    // close once `out` is written
    bool lingering = false;      // response written and sending shut down; draining input
    double t_linger_ms = 0;
    uint32_t events = 0;         // current epoll interest

    explicit Connection(const HttpLimits& limits) : parser(limits) {}
    bool serving() const { return exchange != nullptr; }
    bool idle() const { return !serving() && !parser.started() && out_off >= out.size(); }
  };
  std::unordered_map<uint64_t, std::unique_ptr<Connection>> conns;
  std::unordered_map<std::string, int32_t> n_per_client;
  uint64_t next_id = kFirstConnId;
  bool accept_paused = false;   // EMFILE: the listening socket is out of epoll for a while
  double t_accept_resume_ms = 0;
  double t_last_sweep_ms = 0;

  void io_loop();
  void on_accept();
  void on_event(Connection& c, uint32_t events);
  void on_readable(Connection& c);
  void consume(Connection& c);
  void dispatch(Connection& c, HttpRequest req, bool keep_alive);
  void respond_inline(Connection& c, HttpResponse res, bool keep_alive, bool head_only);
  void refuse(Connection& c, int status, const std::string& message);
  void flush(Connection& c);
  bool take_pending(Connection& c);  // true: flush() again (bytes taken, or the connection ends)
  void on_posted();
  void sweep(double now);
  void set_interest(Connection& c);
  void close_conn(uint64_t id);
  void release(Exchange& ex);
  void worker_loop();
  void run_job(const std::shared_ptr<Exchange>& ex);
  void post(Exchange& ex);
  void wake();
};

namespace {

// The writer a streaming handler gets: chunked framing (or raw bytes to the close for an
// HTTP/1.0 client) into its exchange's pending bytes, waiting while they are over the mark.
class ExchangeWriter final : public StreamWriter {
 public:
  ExchangeWriter(HttpTransport::Impl& t, Exchange& ex, bool chunked) : t_(t), ex_(ex), chunked_(chunked) {}
  bool write(std::string_view data) override;
  bool client_gone() const override { return ex_.link->gone(); }

 private:
  HttpTransport::Impl& t_;
  Exchange& ex_;
  bool chunked_;
};

}  // namespace

void HttpTransport::Impl::wake() {
  const uint64_t one = 1;
  [[maybe_unused]] const ssize_t n = ::write(wake_fd, &one, sizeof one);
}

// Worker side: announce new bytes (once per batch the I/O thread has not taken yet).
void HttpTransport::Impl::post(Exchange& ex) {
  {
    std::lock_guard<std::mutex> lock(mu);
    posted.push_back(ex.conn_id);
  }
  wake();
}

bool ExchangeWriter::write(std::string_view data) {
  if (data.empty()) return !ex_.link->gone();
  bool need_post = false;
  {
    std::unique_lock<std::mutex> lock(ex_.mu);
    // Backpressure: this thread (only) waits for the client to read. The I/O thread wakes
    // it as it takes bytes, and sets the link gone on a hang-up or a write timeout.
    while (!ex_.link->gone() && static_cast<int64_t>(ex_.pending.size()) >= t_.config.stream_high_water_bytes)
      ex_.cv.wait_for(lock, std::chrono::milliseconds(200));
    if (ex_.link->gone()) return false;
    if (chunked_) {
      char size[24];
      std::snprintf(size, sizeof size, "%zx\r\n", data.size());
      ex_.pending += size;
      ex_.pending.append(data);
      ex_.pending += "\r\n";
    } else {
      ex_.pending.append(data);
    }
    need_post = !ex_.posted;
    ex_.posted = true;
  }
  if (need_post) t_.post(ex_);
  return true;
}

void HttpTransport::Impl::release(Exchange& ex) {
  if (ex.holds.fetch_sub(1) != 1) return;
  std::lock_guard<std::mutex> lock(mu);
  n_active.fetch_sub(1);
  idle_cv.notify_all();
}

// ---- workers

void HttpTransport::Impl::worker_loop() {
  for (;;) {
    std::shared_ptr<Exchange> ex;
    {
      std::unique_lock<std::mutex> lock(mu);
      jobs_cv.wait(lock, [&] { return stop_workers || !jobs.empty(); });
      if (jobs.empty()) return;  // stopping and nothing left
      ex = std::move(jobs.front());
      jobs.pop_front();
    }
    run_job(ex);
    release(*ex);
  }
}

void HttpTransport::Impl::run_job(const std::shared_ptr<Exchange>& ex) {
  if (ex->link->gone()) return;  // the client left while the request waited for a worker
  HttpRequest req = std::move(ex->request);
  HttpResponse res;
  callbacks.handle(req, res);
  if (callbacks.before_send) callbacks.before_send(res);
  const bool streamed = static_cast<bool>(res.stream);
  // HTTP/1.0 has no chunked framing: a stream runs to the connection's close.
  const bool chunked = streamed && req.version_minor == 1;
  const bool keep_alive = ex->keep_alive && !draining.load() && (!streamed || chunked);
  std::string head = http_response_head(res, streamed ? -1 : static_cast<int64_t>(res.body.size()), chunked, keep_alive);
  {
    std::lock_guard<std::mutex> lock(ex->mu);
    ex->keep_alive = keep_alive;
    ex->pending += head;
    if (!streamed && !ex->head_only) ex->pending += res.body;
    ex->finished = !streamed || ex->head_only;
    ex->posted = true;
  }
  post(*ex);
  if (!streamed || ex->head_only) return;
  ExchangeWriter writer(*this, *ex, chunked);
  res.stream(writer);
  {
    std::lock_guard<std::mutex> lock(ex->mu);
    if (chunked) ex->pending += "0\r\n\r\n";
    ex->finished = true;
    ex->posted = true;
  }
  post(*ex);
}

// ---- I/O thread

void HttpTransport::Impl::set_interest(Connection& c) {
  uint32_t want = EPOLLRDHUP;
  const bool backlog = c.out.size() - c.out_off >= kMaxUnsentBeforeRead;
  if ((!c.serving() && !c.close_after && !backlog) || c.lingering) want |= EPOLLIN;
  if (c.out_off < c.out.size()) want |= EPOLLOUT;
  if (want == c.events) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = c.id;
  epoll_ctl(epoll_fd, EPOLL_CTL_MOD, c.fd, &ev);
  c.events = want;
}

void HttpTransport::Impl::close_conn(uint64_t id) {
  auto it = conns.find(id);
  if (it == conns.end()) return;
  Connection& c = *it->second;
  if (c.link) c.link->set_gone();
  if (c.exchange) {
    c.exchange->cv.notify_all();  // a stream writer waiting for room sees the link gone
    release(*c.exchange);
  }
  epoll_ctl(epoll_fd, EPOLL_CTL_DEL, c.fd, nullptr);
  ::close(c.fd);
  if (auto pc = n_per_client.find(c.peer_addr); pc != n_per_client.end() && --pc->second <= 0) n_per_client.erase(pc);
  conns.erase(it);
  n_open.fetch_sub(1);
}

void HttpTransport::Impl::on_accept() {
  for (;;) {
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    const int fd = accept4(listen_fd, reinterpret_cast<sockaddr*>(&ss), &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: stop listening for a moment instead of spinning on the
        // pending connection (they wait in the backlog).
        LUMEN_LOG_WARN("server: accept: %s; pausing accepts for 100 ms", std::strerror(errno));
        epoll_ctl(epoll_fd, EPOLL_CTL_DEL, listen_fd, nullptr);
        accept_paused = true;
        t_accept_resume_ms = now_ms() + 100;
      }
      return;
    }
    int port = 0;
    std::string addr = numeric_host(ss, &port);
    const double t = now_ms();
    auto refuse_now = [&](std::string_view canned) {
      [[maybe_unused]] const ssize_t n = ::send(fd, canned.data(), canned.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
      ::close(fd);
    };
    if (config.max_connections_per_client > 0 && n_per_client[addr] >= config.max_connections_per_client) {
      if (n_per_client[addr] == 0) n_per_client.erase(addr);
      n_refused_per_client.fetch_add(1);
      refuse_now(kRefusedPerClient);
      continue;
    }
    if (static_cast<int32_t>(conns.size()) >= config.max_connections) {
      // Make room by closing the connection idle the longest; refuse if none is idle.
      uint64_t victim = 0;
      double oldest = t;
      for (const auto& [id, conn] : conns)
        if (conn->idle() && conn->t_idle_ms <= oldest) {
          oldest = conn->t_idle_ms;
          victim = id;
        }
      if (victim == 0) {
        n_refused_capacity.fetch_add(1);
        refuse_now(kRefusedBusy);
        continue;
      }
      n_evicted_idle.fetch_add(1);
      close_conn(victim);
    }
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);  // SSE chunks go out as tokens come
    auto c = std::make_unique<Connection>(config.limits);
    c->id = next_id++;
    c->fd = fd;
    c->peer_addr = std::move(addr);
    c->peer_port = port;
    c->t_start_ms = c->t_idle_ms = c->t_write_ms = t;
    c->events = EPOLLIN | EPOLLRDHUP;
    epoll_event ev{};
    ev.events = c->events;
    ev.data.u64 = c->id;
    if (epoll_ctl(epoll_fd, EPOLL_CTL_ADD, fd, &ev) != 0) {
      ::close(fd);
      continue;
    }
    n_per_client[c->peer_addr]++;
    n_open.fetch_add(1);
    n_accepted.fetch_add(1);
    conns.emplace(c->id, std::move(c));
  }
}

void HttpTransport::Impl::on_event(Connection& c, uint32_t events) {
  const uint64_t id = c.id;
  if (events & EPOLLIN) {
    on_readable(c);
    if (!conns.count(id)) return;
  }
  if (events & EPOLLOUT) {
    flush(c);
    if (!conns.count(id)) return;
  }
  // A hang-up (or half-close) while a request is served or read: the client has gone.
  // Idle keep-alive connections see EOF through EPOLLIN above.
  if (events & (EPOLLHUP | EPOLLERR | EPOLLRDHUP)) {
    if ((events & (EPOLLHUP | EPOLLERR)) || c.serving() || !(events & EPOLLIN)) close_conn(id);
    // (otherwise the read above has seen the EOF and closed it, or a request is being read)
  }
}

void HttpTransport::Impl::on_readable(Connection& c) {
  const uint64_t id = c.id;
  size_t n_read = 0;
  char buf[kReadChunk];
  if (c.lingering) {  // drop what still comes until EOF (or the linger deadline)
    for (;;) {
      const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
      if (n > 0) continue;
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK)) close_conn(id);
      return;
    }
  }
  while (n_read < kMaxReadPerEvent && !c.serving() && !c.close_after &&
         c.out.size() - c.out_off < kMaxUnsentBeforeRead) {
    const ssize_t n = ::recv(c.fd, buf, sizeof buf, 0);
    if (n == 0) {  // EOF: nothing more will come; a half-read request is abandoned
      close_conn(id);
      return;
    }
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno != EAGAIN && errno != EWOULDBLOCK) close_conn(id);
      return;
    }
    n_read += static_cast<size_t>(n);
    if (!c.parser.started() && c.stash.empty()) c.t_start_ms = now_ms();
    c.stash.append(buf, static_cast<size_t>(n));
    consume(c);
    if (!conns.count(id)) return;
    if (c.out_off < c.out.size() || c.close_after) {
      flush(c);
      if (!conns.count(id)) return;
    }
  }
}

// Parses what has been read; dispatches a complete request; answers a bad one. Writes
// nothing itself (the caller flushes), and stops while much output is unsent, so a client
// pipelining cheap requests cannot make the server buffer their answers without bound.
void HttpTransport::Impl::consume(Connection& c) {
  while (!c.stash.empty() && !c.serving() && !c.close_after && c.out.size() - c.out_off < kMaxUnsentBeforeRead) {
    const size_t used = c.parser.feed(c.stash);
    c.stash.erase(0, used);
    switch (c.parser.state()) {
      case HttpRequestParser::State::kNeedMore:
        if (c.parser.wants_continue() && !c.continue_sent) {
          c.continue_sent = true;
          c.out += "HTTP/1.1 100 Continue\r\n\r\n";
        }
        return;
      case HttpRequestParser::State::kError: {
        n_bad_requests.fetch_add(1);
        const HttpParseError e = c.parser.error();
        refuse(c, e.status, e.message);
        return;
      }
      case HttpRequestParser::State::kComplete: {
        const bool keep_alive = c.parser.keep_alive();
        c.continue_sent = false;
        dispatch(c, c.parser.take(), keep_alive);
        break;
      }
    }
  }
}

void HttpTransport::Impl::refuse(Connection& c, int status, const std::string& message) {
  HttpResponse res;
  callbacks.error_response(status, message, res);
  if (status == 503 || status == 429) res.set_header("Retry-After", "1");
  c.stash.clear();
  respond_inline(c, std::move(res), /*keep_alive=*/false, /*head_only=*/false);
}

void HttpTransport::Impl::respond_inline(Connection& c, HttpResponse res, bool keep_alive, bool head_only) {
  if (callbacks.before_send) callbacks.before_send(res);
  LUMEN_DCHECK(!res.stream);
  keep_alive = keep_alive && !draining.load();
  c.out += http_response_head(res, static_cast<int64_t>(res.body.size()), false, keep_alive);
  if (!head_only) c.out += res.body;
  if (!keep_alive) c.close_after = true;
  c.t_idle_ms = now_ms();
}

void HttpTransport::Impl::dispatch(Connection& c, HttpRequest req, bool keep_alive) {
  req.remote_addr = c.peer_addr;
  req.remote_port = c.peer_port;
  const bool head_only = req.method == "HEAD";
  if (callbacks.runs_inline(req)) {
    HttpResponse res;
    callbacks.handle(req, res);
    return respond_inline(c, std::move(res), keep_alive, head_only);
  }
  if (draining.load()) return refuse(c, 503, "the server is shutting down; retry on another replica");
  auto ex = std::make_shared<Exchange>();
  ex->conn_id = c.id;
  ex->link = std::make_shared<ClientLink>();
  ex->keep_alive = keep_alive;
  ex->head_only = head_only;
  req.link = ex->link;
  ex->request = std::move(req);
  {
    std::lock_guard<std::mutex> lock(mu);
    if (static_cast<int32_t>(jobs.size()) >= config.max_queued_jobs) {
      ex.reset();
    } else {
      jobs.push_back(ex);
      n_active.fetch_add(1);
    }
  }
  if (!ex) return refuse(c, 503, "the server is busy: every HTTP worker is taken and the queue is full");
  jobs_cv.notify_one();
  c.exchange = ex;
  c.link = ex->link;
  set_interest(c);
}

bool HttpTransport::Impl::take_pending(Connection& c) {
  Exchange& ex = *c.exchange;
  bool finished = false;
  {
    std::lock_guard<std::mutex> lock(ex.mu);
    if (!ex.pending.empty()) {
      if (c.out_off >= c.out.size()) {
        c.out.swap(ex.pending);
        c.out_off = 0;
      } else {
        c.out += ex.pending;
      }
      ex.pending.clear();
    }
    ex.posted = false;
    finished = ex.finished;
  }
  ex.cv.notify_all();  // a stream writer waiting for room may go on
  if (finished && c.out_off >= c.out.size()) {
    // The whole response is written: the request is done on this connection.
    const bool keep_alive = ex.keep_alive;
    release(ex);
    c.exchange.reset();
    c.link.reset();
    c.t_idle_ms = c.t_start_ms = now_ms();
    if (!keep_alive) c.close_after = true;  // flush() shuts the connection down gracefully
    return true;  // flush() goes on with a pipelined request already read, if any
  }
  return c.out_off < c.out.size();
}

void HttpTransport::Impl::flush(Connection& c) {
  const uint64_t id = c.id;
  for (;;) {
    while (c.out_off < c.out.size()) {
      const ssize_t n = ::send(c.fd, c.out.data() + c.out_off, c.out.size() - c.out_off, MSG_NOSIGNAL);
      if (n > 0) {
        c.out_off += static_cast<size_t>(n);
        c.t_write_ms = now_ms();
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        set_interest(c);
        return;
      }
      close_conn(id);
      return;
    }
    c.out.clear();
    c.out_off = 0;
    if (c.serving()) {  // more of the worker's response, or its end
      if (!take_pending(c)) break;
      continue;
    }
    if (c.close_after) {
      if (!c.lingering) {
        ::shutdown(c.fd, SHUT_WR);
        c.lingering = true;
        c.t_linger_ms = now_ms();
      }
      break;
    }
    if (c.stash.empty()) break;
    consume(c);  // the next (pipelined) request, already read
    if (!conns.count(id)) return;
    if (c.out.empty() && !c.close_after) break;
  }
  set_interest(c);
}

void HttpTransport::Impl::on_posted() {
  uint64_t counter;
  [[maybe_unused]] const ssize_t n = ::read(wake_fd, &counter, sizeof counter);
  std::vector<uint64_t> ids;
  {
    std::lock_guard<std::mutex> lock(mu);
    ids.swap(posted);
  }
  for (uint64_t id : ids) {
    auto it = conns.find(id);
    if (it == conns.end() || !it->second->serving()) continue;  // closed meanwhile
    Connection& c = *it->second;
    if (c.out_off >= c.out.size() && take_pending(c)) flush(c);
    // else: EPOLLOUT will drain `out`, then take the rest.
  }
}

void HttpTransport::Impl::sweep(double now) {
  std::vector<uint64_t> expired_idle, expired_write;
  std::vector<uint64_t> expired_request;
  for (const auto& [id, c] : conns) {
    if (c->lingering) {
      if (now - c->t_linger_ms > kLingerMs) expired_idle.push_back(id);
    } else if (c->out_off < c->out.size()) {
      if (now - c->t_write_ms > config.write_timeout_ms) expired_write.push_back(id);
    } else if (c->serving()) {
      continue;  // the handler has its own clock
    } else if (c->parser.started()) {
      if (now - c->t_start_ms > config.request_timeout_ms) expired_request.push_back(id);
    } else if (!c->close_after && now - c->t_idle_ms > config.keep_alive_timeout_ms) {
      expired_idle.push_back(id);
    }
  }
  for (uint64_t id : expired_idle) close_conn(id);
  for (uint64_t id : expired_write) {
    n_write_timeouts.fetch_add(1);
    close_conn(id);
  }
  for (uint64_t id : expired_request) {
    n_request_timeouts.fetch_add(1);
    auto it = conns.find(id);
    if (it == conns.end()) continue;
    refuse(*it->second, 408,
           "the request's head and body did not arrive within " + std::to_string(config.request_timeout_ms) + " ms");
    flush(*it->second);
  }
}

void HttpTransport::Impl::io_loop() {
  std::vector<epoll_event> events(256);
  bool drain_seen = false;
  while (!stopping.load()) {
    if (!drain_seen && draining.load()) {
      // Idle keep-alive connections go now (a client's next request opens a new one and
      // learns that this server is draining); the listener stays open, so a balancer's
      // health check sees "draining" rather than a refused connection.
      drain_seen = true;
      std::vector<uint64_t> idle;
      for (const auto& [id, c] : conns)
        if (c->idle()) idle.push_back(id);
      for (uint64_t id : idle) close_conn(id);
    }
    const int n = epoll_wait(epoll_fd, events.data(), static_cast<int>(events.size()), kSweepMs);
    for (int i = 0; i < n; ++i) {
      const uint64_t id = events[i].data.u64;
      if (id == kListenId) {
        on_accept();
      } else if (id == kWakeId) {
        on_posted();
      } else if (auto it = conns.find(id); it != conns.end()) {
        on_event(*it->second, events[i].events);
      }
    }
    const double t = now_ms();
    if (accept_paused && t >= t_accept_resume_ms) {
      epoll_event ev{};
      ev.events = EPOLLIN;
      ev.data.u64 = kListenId;
      epoll_ctl(epoll_fd, EPOLL_CTL_ADD, listen_fd, &ev);
      accept_paused = false;
    }
    if (t - t_last_sweep_ms >= kSweepMs) {
      sweep(t);
      t_last_sweep_ms = t;
    }
  }
  std::vector<uint64_t> ids;
  for (const auto& [id, c] : conns) ids.push_back(id);
  for (uint64_t id : ids) close_conn(id);
}

// ---- public

HttpTransport::HttpTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
HttpTransport::~HttpTransport() { stop(); }

Result<std::unique_ptr<HttpTransport>> HttpTransport::start(const TransportConfig& config, HttpCallbacks callbacks) {
  LUMEN_CHECK(callbacks.handle && callbacks.runs_inline && callbacks.error_response);
  auto impl = std::make_unique<Impl>();
  Impl& t = *impl;
  t.config = config;
  t.callbacks = std::move(callbacks);
  const std::string where = config.host + ":" + std::to_string(config.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
  addrinfo* ai = nullptr;
  if (int rc = getaddrinfo(config.host.c_str(), std::to_string(config.port).c_str(), &hints, &ai); rc != 0)
    return error("--host " + config.host + ": not an address of this machine (" + gai_strerror(rc) + ")");
  std::string bind_error;
  for (addrinfo* a = ai; a && t.listen_fd < 0; a = a->ai_next) {
    const int fd = socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    // SO_REUSEADDR only lets a restarted server bind over connections in TIME_WAIT; a port
    // another process listens on stays an error (no SO_REUSEPORT: two servers must never
    // share a port and answer in turn).
    const int one = 1;
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    if (::bind(fd, a->ai_addr, a->ai_addrlen) != 0 || ::listen(fd, kListenBacklog) != 0) {
      bind_error = std::strerror(errno);
      ::close(fd);
      continue;
    }
    t.listen_fd = fd;
  }
  freeaddrinfo(ai);
  if (t.listen_fd < 0)
    return error("cannot listen on " + where + ": " + (bind_error.empty() ? "no usable address" : bind_error) +
                 (bind_error == std::strerror(EADDRINUSE) ? " (another process has port " + std::to_string(config.port) +
                                                                "; stop it or choose another --port)"
                                                          : ""));
  sockaddr_storage ss{};
  socklen_t len = sizeof ss;
  getsockname(t.listen_fd, reinterpret_cast<sockaddr*>(&ss), &len);
  numeric_host(ss, &t.port);
  t.epoll_fd = epoll_create1(EPOLL_CLOEXEC);
  t.wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (t.epoll_fd < 0 || t.wake_fd < 0) return error(std::string("server: epoll/eventfd: ") + std::strerror(errno));
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = kListenId;
  epoll_ctl(t.epoll_fd, EPOLL_CTL_ADD, t.listen_fd, &ev);
  ev.data.u64 = kWakeId;
  epoll_ctl(t.epoll_fd, EPOLL_CTL_ADD, t.wake_fd, &ev);
  for (int32_t i = 0; i < std::max<int32_t>(1, config.n_workers); ++i) t.workers.emplace_back([&t] { t.worker_loop(); });
  t.io_thread = std::thread([&t] { t.io_loop(); });
  return std::unique_ptr<HttpTransport>(new HttpTransport(std::move(impl)));
}

int HttpTransport::port() const { return impl_->port; }

void HttpTransport::begin_drain() {
  impl_->draining.store(true);
  impl_->wake();
}

bool HttpTransport::wait_idle_until(std::chrono::steady_clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(impl_->mu);
  return impl_->idle_cv.wait_until(lock, deadline, [&] { return impl_->n_active.load() == 0; });
}

void HttpTransport::stop() {
  Impl& t = *impl_;
  if (t.stopping.exchange(true)) return;
  t.draining.store(true);
  t.wake();
  if (t.io_thread.joinable()) t.io_thread.join();  // closes every connection: links go gone
  if (t.listen_fd >= 0) ::close(t.listen_fd);  // no more connections from here on
  t.listen_fd = -1;
  {
    std::lock_guard<std::mutex> lock(t.mu);
    t.stop_workers = true;
    for (auto& ex : t.jobs) ex->link->set_gone();  // queued requests are skipped
  }
  t.jobs_cv.notify_all();
  for (std::thread& w : t.workers) w.join();
  if (t.listen_fd >= 0) ::close(t.listen_fd);
  if (t.epoll_fd >= 0) ::close(t.epoll_fd);
  if (t.wake_fd >= 0) ::close(t.wake_fd);
  t.listen_fd = t.epoll_fd = t.wake_fd = -1;
}

TransportStats HttpTransport::stats() const {
  const Impl& t = *impl_;
  TransportStats s;
  s.n_open = t.n_open.load();
  s.n_active = t.n_active.load();
  s.n_accepted = t.n_accepted.load();
  s.n_refused_capacity = t.n_refused_capacity.load();
  s.n_refused_per_client = t.n_refused_per_client.load();
  s.n_evicted_idle = t.n_evicted_idle.load();
  s.n_request_timeouts = t.n_request_timeouts.load();
  s.n_write_timeouts = t.n_write_timeouts.load();
  s.n_bad_requests = t.n_bad_requests.load();
  return s;
}

std::string http_response_head(const HttpResponse& res, int64_t content_length, bool chunked, bool keep_alive) {
  std::string head = "HTTP/1.1 " + std::to_string(res.status) + " ";
  head += http_reason(res.status);
  head += "\r\n";
  for (const HttpHeader& h : res.headers) {
    if (equals_ignore_case(h.name, "content-length") || equals_ignore_case(h.name, "transfer-encoding") ||
        equals_ignore_case(h.name, "connection"))
      continue;
    head += h.name + ": " + h.value + "\r\n";
  }
  if (content_length >= 0) head += "Content-Length: " + std::to_string(content_length) + "\r\n";
  else if (chunked) head += "Transfer-Encoding: chunked\r\n";
  head += keep_alive ? "Connection: keep-alive\r\n\r\n" : "Connection: close\r\n\r\n";
  return head;
}

}  // namespace lumen::server
