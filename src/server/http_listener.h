// The listening socket and the connection layer under HttpServer. cpp-httplib 0.11 (Debian's
// build) still parses requests, routes them and writes responses, but it no longer owns the
// sockets, because its model does not fit a server:
// - bind: httplib sets SO_REUSEPORT (a second server on the same port starts silently and the
//   kernel splits connections between the two) and listens with a backlog of 5 (a burst of new
//   connections sees 1 s SYN retries). Here the socket is bound with SO_REUSEADDR only, errors
//   name the cause ("address already in use"), and the backlog is a setting.
// - connections: httplib gives every connection a pool thread for as long as it is open, so a
//   few hundred idle keep-alive or slow clients stop the whole server. Here an event loop
//   (Boost.Asio, one thread; see http_connection.h) owns every connection while it is idle or
//   its request is arriving, and a worker thread gets only complete requests. Two pools: the
//   workers, and a small reserved lane for the paths that must answer while every worker is
//   busy (/health, /metrics).
// A handler can end the connection after its response by setting "Connection: close" on it
// (used when the request body was not read, e.g. a rejected Content-Length).
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/httplib_include.h"

namespace lancet::server {

class ConnectionStream;
enum class AfterRequest;

struct ListenConfig {
  std::string host;
  int port = 0;                 // 0 = any free port
  int backlog = 1024;           // pending connections the kernel queues before accept()
  size_t keep_alive_max = 100;  // requests per connection before the server closes it
  // Deadlines of a connection on the event loop (http_connection.h says which is which).
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double keep_alive_timeout_s = 5;
  double write_timeout_s = 10;
  size_t max_header_bytes = 16u << 10;    // the guards answer 431 above this; the loop well above
  size_t max_loop_body_bytes = 8u << 20;  // larger bodies are read by the worker (uploads)
  int worker_threads = 16;                // threads that handle requests (streams hold one each)
  size_t max_queued_requests = 0;         // complete requests waiting for a worker; 0 = max(1024, 4 x threads)
  std::vector<std::string> reserved_paths;  // GET/HEAD paths served by the reserved lane
  int reserved_threads = 2;
};

class HttpListener : public httplib::Server {
 public:
  HttpListener();
  ~HttpListener() override;

  // Creates, binds and listens; returns the port (the chosen one for port 0).
  StatusOr<int> bind_socket(const ListenConfig& config);
  // Runs the event loop until close(), then waits for the requests workers are still
  // serving; call once, after bind_socket.
  bool serve();
  // Serves one connected socket (through the same connection loop, with requests handled on
  // the calling thread) until the peer closes it or keep-alive ends, then closes it. Tests
  // and the fuzz target hand it one end of a socketpair.
  bool serve_connection(socket_t sock);
  // Ends serve(), also one that is only about to start.
  void close();
  // Called with the status of each answer the loop gives itself (408, 431, 400, 503).
  void set_loop_answer_counter(std::function<void(int status)> counter) { loop_answer_counter_ = std::move(counter); }

  // The socket of the request this thread is serving, -1 outside a request: handlers use it
  // to notice a client that went away (client_connection.h).
  static int current_socket();

 private:
  class Loop;
  class InlineHost;
  // Serves the request at the start of `strm` on this thread (httplib's process_request).
  AfterRequest serve_one(ConnectionStream& strm, bool close_after);

  ListenConfig config_;
  int listen_fd_ = -1;
  std::atomic<bool> stopping_{false};
  std::unique_ptr<Loop> loop_;
  std::function<void(int)> loop_answer_counter_;
};

}  // namespace lancet::server
