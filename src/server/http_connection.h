// One client connection on the event loop (Boost.Asio): while it is idle or its request is
// still arriving it costs a socket, a timer and its buffered bytes, never a thread. The loop
// reads and frames the request (RequestFramer) under per-connection deadlines, and only a
// complete request is handed to a worker thread, which runs cpp-httplib's parsing, routing and
// response writing on it (ConnectionStream). After the response a keep-alive connection comes
// back to the loop with the bytes of any pipelined next request.
//
// Deadlines: a new connection has header_timeout for its first request's header; between
// requests the connection may be idle for keep_alive_timeout; once the first byte of a request
// arrived its header must be complete within header_timeout, and its body within body_timeout
// of the header. A request that misses its deadline gets 408; an idle connection is closed.
#pragma once

#include <atomic>
#include <cstddef>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include <boost/asio/io_context.hpp>
#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/steady_timer.hpp>

#include "server/connection_stream.h"
#include "server/request_framer.h"

namespace lancet::server {

struct ConnectionLimits {
  double header_timeout_s = 10;
  double body_timeout_s = 30;
  double keep_alive_timeout_s = 5;
  double write_timeout_s = 10;
  size_t max_header_bytes = 24u << 10;     // a larger header gets 431 from the loop
  size_t max_loop_body_bytes = 8u << 20;   // larger bodies are read by the worker (uploads)
  size_t keep_alive_max = 1000;            // requests per connection
};

// How a connection goes on after a worker served a request on it.
enum class AfterRequest { kKeepAlive, kClose, kLingerClose };

// What the connections need from the server that owns them.
class ConnectionHost {
 public:
  virtual ~ConnectionHost() = default;
  virtual const ConnectionLimits& limits() const = 0;
  // Runs `job` on a worker (its lane chosen from `head`); false when none can take it now.
  virtual bool dispatch(const RequestHead& head, std::function<void()> job) = 0;
  // On the worker: serves the request at the start of `strm` (`close_after`: the last one on
  // this connection).
  virtual AfterRequest serve_request(ConnectionStream& strm, bool close_after) = 0;
  // True once the server stops: connections close instead of waiting for requests.
  virtual bool stopping() const = 0;
  // An answer the loop gave itself (408, 431, 400, 503), for the error counters.
  virtual void count_loop_answer(int status) = 0;
  // Called on the loop once the connection has closed its socket.
  virtual void connection_closed(class HttpConnection* conn) = 0;
};

class HttpConnection : public std::enable_shared_from_this<HttpConnection> {
 public:
  // Takes ownership of the connected socket `fd`.
  HttpConnection(boost::asio::io_context& io, ConnectionHost* host, int fd);
  ~HttpConnection();
  HttpConnection(const HttpConnection&) = delete;
  HttpConnection& operator=(const HttpConnection&) = delete;

  // Starts waiting for the first request. On the loop.
  void start();
  // Closes the connection now unless a worker has it (that one closes after its response,
  // since the host is stopping). On the loop.
  void close_if_idle();

 private:
  enum class Phase { kIdle, kHeader, kBody, kWorker, kLinger, kClosed };

  void begin_request();
  void wait_readable();
  // Reads what the socket holds now, without blocking; false when the connection broke.
  bool read_available();
  void process_buffer();
  // The framer reached the end of the header: check the body's size and go on reading it.
  void on_header(const RequestHead& head);
  void hand_over(bool close_after);
  void run_on_worker(bool close_after);
  void after_request(AfterRequest next);
  // Answers with the envelope of `status` (the loop's own answers) and closes.
  void answer_and_close(int status, const std::string& message, const std::string& code);
  void set_deadline(double seconds);
  void on_deadline(uint64_t generation);
  void linger_close();
  void linger_read();
  void close();

  boost::asio::io_context& io_;
  ConnectionHost* host_;
  boost::asio::posix::stream_descriptor sock_;
  boost::asio::steady_timer timer_;
  uint64_t deadline_generation_ = 0;
  Phase phase_ = Phase::kIdle;
  // Received bytes not yet served; the current request starts at offset 0.
  std::string in_;
  size_t framed_ = 0;  // bytes of in_ the framer has consumed
  std::optional<RequestFramer> framer_;
  size_t served_ = 0;  // requests answered on this connection
  bool first_request_ = true;
  bool eof_ = false;  // the client half-closed: serve what is complete, then close
  // The socket was read until it had nothing more since the last readiness event. The reactor
  // is edge-triggered, so a wait starts only then.
  bool drained_ = false;
};

}  // namespace lancet::server
