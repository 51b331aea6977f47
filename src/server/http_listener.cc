// HttpListener: our own listening socket and an Asio event loop for the connections under
// cpp-httplib (see the header for why). Request parsing, routing and response writing stay
// httplib's (process_request), run on worker threads for complete requests.
#include "server/http_listener.h"

#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <unordered_map>

#include <boost/asio/io_context.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "core/logging.h"
#include "server/http_connection.h"
#include "server/http_guards.h"
#include "server/worker_pool.h"

namespace lancet::server {
namespace {

// Set by the post-routing hook when the response says "Connection: close"; read after
// process_request, which runs the whole request (routing and writing) on this thread.
thread_local bool t_close_after_response = false;
// ... and the request had a body, which may be unread (the connection then lingers).
thread_local bool t_request_had_body = false;
thread_local int t_socket = -1;

ConnectionLimits limits_of(const ListenConfig& c) {
  ConnectionLimits l;
  l.header_timeout_s = c.header_timeout_s;
  l.body_timeout_s = c.body_timeout_s;
  l.keep_alive_timeout_s = c.keep_alive_timeout_s;
  l.write_timeout_s = c.write_timeout_s;
  // The guards answer 431 above max_header_bytes (counted over the fields); the loop's limit
  // leaves room for the request line, so it only stops headers no guard would read.
  l.max_header_bytes = c.max_header_bytes + (8u << 10);
  l.max_loop_body_bytes = c.max_loop_body_bytes;
  l.keep_alive_max = std::max<size_t>(c.keep_alive_max, 1);
  return l;
}

}  // namespace

// The server's event loop: accepts connections, owns them (HttpConnection) and runs their
// complete requests on the worker pools.
class HttpListener::Loop final : public ConnectionHost {
 public:
  explicit Loop(HttpListener* owner) : owner_(owner), listen_(io_), retry_(io_) {}

  void run() {
    if (owner_->stopping_.load() || owner_->listen_fd_ < 0) return;
    const ListenConfig& c = owner_->config_;
    limits_ = limits_of(c);
    const size_t threads = static_cast<size_t>(std::max(c.worker_threads, 1));
    // A queued request costs only its bytes, already read: the bound is for a flood, not a burst.
    workers_ = std::make_unique<WorkerPool>(
        threads, c.max_queued_requests ? c.max_queued_requests : std::max<size_t>(1024, 4 * threads));
    reserved_ = std::make_unique<WorkerPool>(static_cast<size_t>(std::max(c.reserved_threads, 1)), 256);
    reserved_paths_ = c.reserved_paths;
    boost::system::error_code ec;
    listen_.assign(owner_->listen_fd_, ec);
    if (ec) return;  // the listener's destructor closes it
    owner_->listen_fd_ = -1;  // the descriptor owns it now
    listen_.non_blocking(true, ec);
    wait_accept();
    // Returns once the listening socket and every connection are closed and no worker holds
    // a request (each job holds a work guard).
    io_.run();
    workers_->shutdown();
    reserved_->shutdown();
  }

  // From any thread.
  void stop() {
    boost::asio::post(io_, [this] {
      boost::system::error_code ec;
      listen_.close(ec);
      retry_.cancel();
      std::vector<std::shared_ptr<HttpConnection>> open;
      open.reserve(connections_.size());
      for (auto& [ptr, conn] : connections_) open.push_back(conn);
      for (auto& conn : open) conn->close_if_idle();
    });
  }

  const ConnectionLimits& limits() const override { return limits_; }

  bool dispatch(const RequestHead& head, std::function<void()> job) override {
    const bool reserved = (head.method == "GET" || head.method == "HEAD") &&
                          std::find(reserved_paths_.begin(), reserved_paths_.end(), head.path) != reserved_paths_.end();
    if (reserved && reserved_->try_submit(job)) return true;
    return workers_->try_submit(std::move(job));
  }

  AfterRequest serve_request(ConnectionStream& strm, bool close_after) override {
    return owner_->serve_one(strm, close_after);
  }
  bool stopping() const override { return owner_->stopping_.load(); }
  void count_loop_answer(int status) override {
    if (owner_->loop_answer_counter_) owner_->loop_answer_counter_(status);
  }
  void connection_closed(HttpConnection* conn) override { connections_.erase(conn); }

 private:
  void wait_accept() {
    listen_.async_wait(boost::asio::posix::stream_descriptor::wait_read, [this](const boost::system::error_code& ec) {
      if (!ec) accept_ready();
    });
  }

  // Accepts every pending connection, then waits for more.
  void accept_ready() {
    for (;;) {
      const int fd = ::accept4(listen_.native_handle(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd >= 0) {
        // httplib writes a response's headers and body separately; with Nagle's algorithm the
        // body (and every SSE chunk after the first) waits for the client's delayed ACK.
        const int yes = 1;
        ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &yes, sizeof(yes));
        auto conn = std::make_shared<HttpConnection>(io_, this, fd);
        connections_.emplace(conn.get(), conn);
        conn->start();
        continue;
      }
      if (errno == EINTR || errno == ECONNABORTED) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) break;
      if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM) {
        // Out of descriptors: the waiting connections stay in the backlog until some close.
        if (!warned_fd_limit_) LOG_WARN("cannot accept connections: " << std::strerror(errno)
                                         << " (raise the open-file limit, ulimit -n)");
        warned_fd_limit_ = true;
        retry_.expires_after(std::chrono::milliseconds(100));
        retry_.async_wait([this](const boost::system::error_code& ec) {
          if (!ec) wait_accept();
        });
        return;
      }
      if (!listen_.is_open()) return;
      LOG_ERROR("accept failed: " << std::strerror(errno));
      break;
    }
    wait_accept();
  }

  HttpListener* owner_;
  boost::asio::io_context io_{1};
  boost::asio::posix::stream_descriptor listen_;
  boost::asio::steady_timer retry_;
  ConnectionLimits limits_;
  std::vector<std::string> reserved_paths_;
  std::unique_ptr<WorkerPool> workers_, reserved_;
  std::unordered_map<HttpConnection*, std::shared_ptr<HttpConnection>> connections_;
  bool warned_fd_limit_ = false;
};

// serve_connection's host: one connection on a loop of its own, its requests served inline on
// the calling thread.
class HttpListener::InlineHost final : public ConnectionHost {
 public:
  explicit InlineHost(HttpListener* owner) : owner_(owner), limits_(limits_of(owner->config_)) {}
  const ConnectionLimits& limits() const override { return limits_; }
  bool dispatch(const RequestHead&, std::function<void()> job) override {
    job();
    return true;
  }
  AfterRequest serve_request(ConnectionStream& strm, bool close_after) override {
    return owner_->serve_one(strm, close_after);
  }
  bool stopping() const override { return owner_->stopping_.load(); }
  void count_loop_answer(int status) override {
    if (owner_->loop_answer_counter_) owner_->loop_answer_counter_(status);
  }
  void connection_closed(HttpConnection*) override {}

 private:
  HttpListener* owner_;
  ConnectionLimits limits_;
};

HttpListener::HttpListener() : loop_(std::make_unique<Loop>(this)) {
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
  close();
  loop_.reset();
  if (listen_fd_ >= 0) ::close(listen_fd_);  // bound but never served
}

int HttpListener::current_socket() { return t_socket; }

bool HttpListener::serve() {
  loop_->run();
  return true;
}

bool HttpListener::serve_connection(socket_t sock) {
  boost::asio::io_context io(1);
  InlineHost host(this);
  auto conn = std::make_shared<HttpConnection>(io, &host, sock);
  conn->start();
  conn.reset();
  io.run();
  return true;
}

void HttpListener::close() {
  stopping_.store(true);
  // httplib ends a streamed (content provider) response when this turns invalid: streams
  // still running at stop end, as they did under httplib's own loop.
  svr_sock_.store(INVALID_SOCKET);
  loop_->stop();
}

AfterRequest HttpListener::serve_one(ConnectionStream& strm, bool close_after) {
  t_close_after_response = t_request_had_body = false;
  t_socket = strm.socket();
  bool connection_closed = false;
  const bool ok = process_request(strm, close_after, connection_closed, nullptr);
  t_socket = -1;
  if (t_close_after_response && t_request_had_body) return AfterRequest::kLingerClose;
  if (!ok || connection_closed || t_close_after_response || close_after) return AfterRequest::kClose;
  return AfterRequest::kKeepAlive;
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
  if (port == 0 && ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    char serv[NI_MAXSERV] = "";
    if (::getnameinfo(reinterpret_cast<const sockaddr*>(&addr), len, nullptr, 0, serv, sizeof(serv),
                      NI_NUMERICSERV) == 0)
      port = std::atoi(serv);
  }
  config_ = config;
  // What httplib tells clients (the Keep-Alive header) and how long a worker waits for the rest
  // of a request it reads from the socket.
  set_keep_alive_max_count(std::max<size_t>(config.keep_alive_max, 1));
  set_keep_alive_timeout(static_cast<time_t>(std::max(1.0, std::ceil(config.keep_alive_timeout_s))));
  set_read_timeout(static_cast<time_t>(std::max(1.0, std::ceil(config.body_timeout_s))));
  set_write_timeout(static_cast<time_t>(std::max(1.0, std::ceil(config.write_timeout_s))));
  if (listen_fd_ >= 0) ::close(listen_fd_);
  listen_fd_ = fd;
  // Only a marker for httplib, which writes a streamed response while it is valid (its
  // "shutting down" test); the socket itself is the loop's.
  svr_sock_.store(fd);
  return port;
}

}  // namespace lancet::server
