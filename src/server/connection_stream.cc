// ConnectionStream: httplib's Stream over a connection's buffered bytes and its socket (see
// connection_stream.h). The socket is non-blocking (the event loop's); waits are polls with
// the read and write timeouts.
#include "server/connection_stream.h"

#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>

namespace lancet::server {
namespace {

int poll_one(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r;
}

bool address_of(int fd, bool peer, std::string* ip, int* port) {
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  const int rc = peer ? ::getpeername(fd, reinterpret_cast<sockaddr*>(&addr), &len)
                      : ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  if (rc != 0) return false;
  char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return false;
  *ip = host;
  *port = std::atoi(serv);
  return true;
}

}  // namespace

bool ConnectionStream::is_readable() const { return has_buffered() || poll_one(sock_, POLLIN, read_ms_) > 0; }

bool ConnectionStream::is_writable() const { return poll_one(sock_, POLLOUT, write_ms_) > 0 && peer_alive(); }

ssize_t ConnectionStream::read(char* ptr, size_t n) {
  if (!has_buffered()) {
    // The request goes on past what the loop read: wait for more, up to the read timeout.
    in_->clear();
    off_ = 0;
    char buf[16 * 1024];
    for (;;) {
      if (poll_one(sock_, POLLIN, read_ms_) <= 0) return -1;
      const ssize_t got = ::recv(sock_, buf, sizeof(buf), MSG_DONTWAIT);
      if (got < 0 && (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR)) continue;
      if (got <= 0) return got;
      in_->append(buf, static_cast<size_t>(got));
      break;
    }
  }
  n = std::min(n, in_->size() - off_);
  std::memcpy(ptr, in_->data() + off_, n);
  off_ += n;
  return static_cast<ssize_t>(n);
}

ssize_t ConnectionStream::write(const char* ptr, size_t n) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(write_ms_);
  for (;;) {
    if (!is_writable()) return -1;
    const ssize_t r = ::send(sock_, ptr, n, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (r >= 0) return r;
    if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) return -1;
    if (std::chrono::steady_clock::now() >= deadline) return -1;
  }
}

void ConnectionStream::get_remote_ip_and_port(std::string& ip, int& port) const {
  address_of(sock_, /*peer=*/true, &ip, &port);
}

void ConnectionStream::get_local_ip_and_port(std::string& ip, int& port) const {
  address_of(sock_, /*peer=*/false, &ip, &port);
}

bool ConnectionStream::peer_alive() const {
  if (has_buffered() || poll_one(sock_, POLLIN, 0) <= 0) return true;
  char c;
  const ssize_t r = ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
  return r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
}

}  // namespace lancet::server
