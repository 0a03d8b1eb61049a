#include "server/connection_probe.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

namespace lumen::server {
namespace {

// Numeric address and port of a socket address; IPv4-mapped IPv6 shows as IPv4, the way
// httplib (getnameinfo with NI_NUMERICHOST) reports it.
bool endpoint_of(const sockaddr_storage& ss, std::string* addr, int* port) {
  char buf[INET6_ADDRSTRLEN] = {};
  if (ss.ss_family == AF_INET) {
    const auto* a = reinterpret_cast<const sockaddr_in*>(&ss);
    if (!inet_ntop(AF_INET, &a->sin_addr, buf, sizeof buf)) return false;
    *port = ntohs(a->sin_port);
  } else if (ss.ss_family == AF_INET6) {
    const auto* a = reinterpret_cast<const sockaddr_in6*>(&ss);
    if (IN6_IS_ADDR_V4MAPPED(&a->sin6_addr)) {
      in_addr v4;
      std::memcpy(&v4, &a->sin6_addr.s6_addr[12], 4);
      if (!inet_ntop(AF_INET, &v4, buf, sizeof buf)) return false;
    } else if (!inet_ntop(AF_INET6, &a->sin6_addr, buf, sizeof buf)) {
      return false;
    }
    *port = ntohs(a->sin6_port);
  } else {
    return false;
  }
  *addr = buf;
  return true;
}

bool same_addr(const std::string& a, const std::string& b) {
  if (a == b) return true;
  // httplib may report "::ffff:127.0.0.1" for a mapped address.
  constexpr std::string_view kMapped = "::ffff:";
  auto strip = [&](const std::string& s) {
    return s.rfind(kMapped, 0) == 0 ? s.substr(kMapped.size()) : s;
  };
  return strip(a) == strip(b);
}

}  // namespace

ConnectionProbe ConnectionProbe::find(const std::string& local_addr, int local_port,
                                      const std::string& remote_addr, int remote_port) {
  if (local_port <= 0 || remote_port <= 0) return ConnectionProbe();
  DIR* dir = opendir("/proc/self/fd");
  if (!dir) return ConnectionProbe();
  int found = -1;
  while (dirent* e = readdir(dir)) {
    char* end = nullptr;
    const long fd = std::strtol(e->d_name, &end, 10);
    if (end == e->d_name || *end != '\0' || fd < 0 || fd == dirfd(dir)) continue;
    sockaddr_storage ss{};
    socklen_t len = sizeof ss;
    // The cheap test first: most descriptors are not sockets or not ours.
    if (getpeername(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
    std::string addr;
    int port = 0;
    if (!endpoint_of(ss, &addr, &port) || port != remote_port || !same_addr(addr, remote_addr)) continue;
    len = sizeof ss;
    if (getsockname(static_cast<int>(fd), reinterpret_cast<sockaddr*>(&ss), &len) != 0) continue;
    if (!endpoint_of(ss, &addr, &port) || port != local_port || !same_addr(addr, local_addr)) continue;
    found = static_cast<int>(fd);
    break;
  }
  closedir(dir);
  return ConnectionProbe(found);
}

bool ConnectionProbe::peer_gone() const {
  if (fd_ < 0) return false;
  pollfd p{};
  p.fd = fd_;
  p.events = POLLIN | POLLRDHUP;
  if (poll(&p, 1, 0) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  if (p.revents & POLLIN) {
    // Readable: either the client pipelined its next request (alive) or EOF (gone).
    char c;
    const ssize_t n = recv(fd_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR);
  }
  return false;
}

}  // namespace lumen::server
