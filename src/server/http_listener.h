// The listening socket and the per-connection loop under HttpServer, replacing two parts of
// cpp-httplib 0.11 (Debian's build) that do not fit a server:
// - bind: httplib sets SO_REUSEPORT (a second server on the same port starts silently and the
//   kernel splits connections between the two) and listens with a backlog of 5 (a burst of new
//   connections sees 1 s SYN retries). Here the socket is bound with SO_REUSEADDR only, errors
//   name the cause ("address already in use"), and the backlog is a setting.
// - the keep-alive loop: httplib makes a new read buffer per request, so the bytes of a
//   pipelined second request that arrived with the first are dropped. Here one buffered stream
//   lives as long as the connection.
// A handler can end the connection after its response by setting "Connection: close" on it
// (used when the request body was not read, e.g. a rejected Content-Length).
#pragma once

#include <atomic>
#include <string>

#include "core/status.h"
#include "server/httplib_include.h"

namespace lancet::server {

struct ListenConfig {
  std::string host;
  int port = 0;              // 0 = any free port
  int backlog = 1024;        // pending connections the kernel queues before accept()
  size_t keep_alive_max = 100;  // requests per connection before the server closes it
};

class HttpListener : public httplib::Server {
 public:
  HttpListener();
  ~HttpListener() override;

  // Creates, binds and listens; returns the port (the chosen one for port 0).
  StatusOr<int> bind_socket(const ListenConfig& config);
  // Accepts connections until close(); call once, after bind_socket.
  bool serve();
  // Serves one connected socket until the peer closes it or keep-alive ends, then closes it:
  // what serve() does for each accepted connection (tests and the fuzz target hand it one end
  // of a socketpair). Needs a bound socket: it stops when the listener is closed.
  bool serve_connection(socket_t sock) { return process_and_close_socket(sock); }
  // Ends serve(), also one that is only about to start (httplib's stop() does nothing until
  // its loop runs, so a stop right after starting the thread would be lost).
  void close();

 private:
  bool process_and_close_socket(socket_t sock) override;
  std::atomic<bool> served_{false};
};

}  // namespace lancet::server
