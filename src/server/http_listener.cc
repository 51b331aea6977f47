// HttpListener: our own listening socket and keep-alive loop under cpp-httplib (see the header
// for why). Request parsing, routing and response writing stay httplib's (process_request).
#include "server/http_listener.h"

#include "server/http_guards.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <vector>

namespace lancet::server {
namespace {

// Set by the post-routing hook when the response says "Connection: close"; read by the
// connection loop, which runs the whole request (routing and writing) on this thread.
thread_local bool t_close_after_response = false;
// ... and the request had a body, which may be unread (see linger_close).
thread_local bool t_request_had_body = false;

int poll_one(int fd, short events, int timeout_ms) {
  pollfd p{fd, events, 0};
  int r;
  do {
    r = ::poll(&p, 1, timeout_ms);
  } while (r < 0 && errno == EINTR);
  return r;
}

std::string address_text(const sockaddr_storage& addr, socklen_t len, int* port) {
  char host[NI_MAXHOST] = "", serv[NI_MAXSERV] = "";
  if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, host, sizeof(host), serv, sizeof(serv),
                    NI_NUMERICHOST | NI_NUMERICSERV) != 0)
    return "";
  *port = std::atoi(serv);
  return host;
}

// One connection's byte stream. The read buffer outlives each request, so bytes of the next
// (pipelined) request read together with this one's are served to it rather than dropped.
class ConnectionStream final : public httplib::Stream {
 public:
  ConnectionStream(int sock, int read_timeout_ms, int write_timeout_ms)
      : sock_(sock), read_ms_(read_timeout_ms), write_ms_(write_timeout_ms), buf_(16 * 1024) {}

  bool has_buffered() const { return off_ < size_; }
  bool is_readable() const override { return has_buffered() || poll_one(sock_, POLLIN, read_ms_) > 0; }
  bool is_writable() const override { return poll_one(sock_, POLLOUT, write_ms_) > 0 && peer_alive(); }

  ssize_t read(char* ptr, size_t n) override {
    if (!has_buffered()) {
      if (!is_readable()) return -1;
      if (n >= buf_.size()) return recv_retry(ptr, n);
      const ssize_t got = recv_retry(buf_.data(), buf_.size());
      if (got <= 0) return got;
      off_ = 0;
      size_ = static_cast<size_t>(got);
    }
    n = std::min(n, size_ - off_);
    std::memcpy(ptr, buf_.data() + off_, n);
    off_ += n;
    return static_cast<ssize_t>(n);
  }

  ssize_t write(const char* ptr, size_t n) override {
    if (!is_writable()) return -1;
    ssize_t r;
    do {
      r = ::send(sock_, ptr, n, MSG_NOSIGNAL);
    } while (r < 0 && errno == EINTR);
    return r;
  }

  void get_remote_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getpeername(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip = address_text(addr, len, &port);
  }
  void get_local_ip_and_port(std::string& ip, int& port) const override {
    sockaddr_storage addr{};
    socklen_t len = sizeof(addr);
    if (::getsockname(sock_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) ip = address_text(addr, len, &port);
  }
  socket_t socket() const override { return sock_; }

 private:
  ssize_t recv_retry(char* p, size_t n) {
    ssize_t r;
    do {
      r = ::recv(sock_, p, n, 0);
    } while (r < 0 && errno == EINTR);
    return r;
  }
  // A peer that closed its side reads as EOF; writes to it would fail or raise SIGPIPE, and a
  // streaming response must notice that the client went away.
  bool peer_alive() const {
    if (has_buffered() || poll_one(sock_, POLLIN, 0) <= 0) return true;
    char c;
    const ssize_t r = ::recv(sock_, &c, 1, MSG_PEEK | MSG_DONTWAIT);
    return r > 0 || (r < 0 && (errno == EAGAIN || errno == EWOULDBLOCK));
  }

  int sock_;
  int read_ms_, write_ms_;
  std::vector<char> buf_;
  size_t off_ = 0, size_ = 0;
};

int to_ms(time_t sec, time_t usec) { return static_cast<int>(sec * 1000 + usec / 1000); }

// Closing a socket with unread input sends a reset, and a reset can make the client drop our
// answer (a 413, say) before reading it. So after an answer given without reading the body,
// stop sending, read and drop what the client still sends for up to 2 s, then close.
void linger_close(int sock) {
  ::shutdown(sock, SHUT_WR);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(2);
  char buf[16 * 1024];
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0 || poll_one(sock, POLLIN, static_cast<int>(left.count())) <= 0) break;
    if (::recv(sock, buf, sizeof(buf), MSG_DONTWAIT) <= 0) break;
  }
  ::close(sock);
}

}  // namespace

HttpListener::HttpListener() {
  // httplib calls this hook after the handlers and before writing the response line, for
  // every response, including its own 400/413/404 ones.
  set_post_routing_handler([](const httplib::Request& req, httplib::Response& res) {
    if (res.get_header_value("Connection") == "close") {
      t_close_after_response = true;
      t_request_had_body = has_request_body(req);
      res.headers.erase("Keep-Alive");
    }
  });
}

HttpListener::~HttpListener() {
  // Bound but never served: stop() only closes a running server. Once served, httplib has
  // closed the socket (stop(), or its accept loop on an error).
  if (served_.load()) return;
  const socket_t s = svr_sock_.exchange(INVALID_SOCKET);
  if (s != INVALID_SOCKET) ::close(s);
}

bool HttpListener::serve() {
  served_.store(true);
  const bool ok = listen_after_bind();
  svr_sock_.store(INVALID_SOCKET);  // closed by now, by stop() or by httplib's loop
  return ok;
}

void HttpListener::close() {
  if (is_running()) return stop();
  // accept() on a socket shut down fails at once, which ends httplib's loop (it then closes
  // the socket itself).
  const socket_t s = svr_sock_.load();
  if (s != INVALID_SOCKET) ::shutdown(s, SHUT_RDWR);
}

StatusOr<int> HttpListener::bind_socket(const ListenConfig& config) {
  const std::string where = config.host + ":" + std::to_string(config.port);
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_PASSIVE;
  addrinfo* found = nullptr;
  if (int rc = ::getaddrinfo(config.host.c_str(), std::to_string(config.port).c_str(), &hints, &found); rc != 0)
    return IoError("cannot listen on " + where + ": " + ::gai_strerror(rc));
  int fd = -1, err = 0;
  for (addrinfo* ai = found; ai && fd < 0; ai = ai->ai_next) {
    fd = ::socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
    if (fd < 0) {
      err = errno;
      continue;
    }
    // SO_REUSEADDR lets a restarted server bind while its old connections sit in TIME_WAIT;
    // unlike SO_REUSEPORT it never lets a second listener share the port.
    const int yes = 1;
    ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
    if (::bind(fd, ai->ai_addr, ai->ai_addrlen) == 0 && ::listen(fd, config.backlog) == 0) break;
    err = errno;
    ::close(fd);
    fd = -1;
  }
  ::freeaddrinfo(found);
  if (fd < 0) {
    std::string why = err == EADDRINUSE      ? "address already in use (another server listens on this port)"
                      : err == EADDRNOTAVAIL ? "address not available (not an address of this machine)"
                      : err == EACCES        ? "permission denied (ports below 1024 need privileges)"
                                             : std::string(std::strerror(err));
    return IoError("cannot listen on " + where + ": " + why);
  }
  int port = config.port;
  sockaddr_storage addr{};
  socklen_t len = sizeof(addr);
  if (port == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) address_text(addr, len, &port);
  set_keep_alive_max_count(std::max<size_t>(config.keep_alive_max, 1));
  const socket_t old = svr_sock_.exchange(fd);
  if (old != INVALID_SOCKET) ::close(old);
  return port;
}

bool HttpListener::process_and_close_socket(socket_t sock) {
  // httplib writes a response's headers and body separately; with Nagle's algorithm the body
  // (and every SSE chunk after the first) waits for the client's delayed ACK, ~40 ms.
  const int yes = 1;
  ::setsockopt(sock, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
  ConnectionStream strm(sock, to_ms(read_timeout_sec_, read_timeout_usec_),
                        to_ms(write_timeout_sec_, write_timeout_usec_));
  bool ret = false;
  for (size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET; --left) {
    // Wait for the next request in short slices, so stop() does not wait out idle connections.
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(keep_alive_timeout_sec_);
    bool ready = strm.has_buffered();
    while (!ready && svr_sock_ != INVALID_SOCKET && std::chrono::steady_clock::now() < deadline)
      ready = poll_one(sock, POLLIN, 100) != 0;
    if (!ready) break;
    bool connection_closed = false;
    t_close_after_response = t_request_had_body = false;
    ret = process_request(strm, /*close_connection=*/left == 1, connection_closed, nullptr);
    if (t_close_after_response && t_request_had_body) {
      linger_close(sock);
      return ret;
    }
    if (!ret || connection_closed || t_close_after_response) break;
  }
  ::shutdown(sock, SHUT_RDWR);
  ::close(sock);
  return ret;
}

}  // namespace lancet::server
