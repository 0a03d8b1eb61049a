// Is the client of this request still there?
//
// cpp-httplib 0.11 (the Debian version) gives handlers neither the socket nor a
// "connection closed" flag, and its DataSink::is_writable() only asks select() whether the
// socket is writable, which a socket whose peer has gone still is. A request that waits in
// the queue or in prefill writes nothing, so a write failure would notice a disconnect only
// when the first token comes. To cancel at once, the probe finds the connection's socket by
// its TCP endpoints (local and remote address and port, which httplib does report) among the
// process's descriptors, and asks the kernel whether the peer has hung up.
//
// Why this is safe: the 4-tuple names exactly one live TCP connection, and httplib keeps
// the socket open until the handler and its content provider have returned, so the
// descriptor found stays this connection's for as long as the request is being served.
// Linux only (reads /proc/self/fd). A peer that only half-closes (shutdown(SHUT_WR) after
// sending its request) counts as gone; HTTP clients do not do that.
#pragma once

#include <string>

namespace lumen::server {

class ConnectionProbe {
 public:
  ConnectionProbe() = default;  // probes nothing: peer_gone() is always false

  // Scans the open descriptors (cost: one getsockname/getpeername per socket descriptor;
  // done once per request). Finds nothing -> a probe that never reports a hang-up.
  static ConnectionProbe find(const std::string& local_addr, int local_port, const std::string& remote_addr,
                              int remote_port);

  bool found() const { return fd_ >= 0; }
  // True if the peer closed the connection (EOF or error). Non-blocking.
  bool peer_gone() const;

 private:
  explicit ConnectionProbe(int fd) : fd_(fd) {}
  int fd_ = -1;
};

}  // namespace lumen::server
