// HttpConnection: the per-connection state machine of the event loop (see http_connection.h).
// Everything here runs on the loop's thread except run_on_worker(), and the two never touch
// the connection at the same time: while a worker has it (Phase::kWorker) the loop has no
// wait pending on its socket and leaves its buffer alone.
#include "server/http_connection.h"

#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <chrono>

#include <boost/asio/post.hpp>
#include <boost/asio/executor_work_guard.hpp>

#include "server/api_error.h"
#include "server/openai_json.h"

namespace lancet::server {
namespace {

// The reason phrases of the statuses the loop answers itself.
const char* reason(int status) {
  switch (status) {
    case 400: return "Bad Request";
    case 408: return "Request Timeout";
    case 431: return "Request Header Fields Too Large";
    case 503: return "Service Unavailable";
    default: return "Error";
  }
}

std::string loop_answer(int status, const std::string& message, const std::string& code) {
  const ApiError err{status, message, status >= 500 ? "service_unavailable" : "invalid_request_error", "", code};
  const std::string body = dump_json(error_json(err));
  return "HTTP/1.1 " + std::to_string(status) + " " + reason(status) +
         "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
         "\r\nConnection: close\r\n\r\n" + body;
}

}  // namespace

HttpConnection::HttpConnection(boost::asio::io_context& io, ConnectionHost* host, int fd)
    : io_(io), host_(host), sock_(io, fd), timer_(io) {}

HttpConnection::~HttpConnection() = default;

void HttpConnection::start() {
  // Let the socket be non-blocking for the loop's reads and the worker's polled writes alike.
  boost::system::error_code ec;
  sock_.non_blocking(true, ec);
  if (ec) return close();
  begin_request();
}

void HttpConnection::close_if_idle() {
  if (phase_ != Phase::kWorker) close();
}

void HttpConnection::begin_request() {
  framer_.emplace(host_->limits().max_header_bytes);
  framed_ = 0;
  // Bytes may have arrived while a worker had the connection, and their readiness event has
  // gone by (the reactor is edge-triggered): read before waiting.
  drained_ = false;
  if (in_.empty()) {
    // Between requests: hold no buffer while idle.
    std::string().swap(in_);
    phase_ = Phase::kIdle;
    set_deadline(first_request_ ? host_->limits().header_timeout_s : host_->limits().keep_alive_timeout_s);
  } else {
    phase_ = Phase::kHeader;
    set_deadline(host_->limits().header_timeout_s);
  }
  process_buffer();
}

void HttpConnection::wait_readable() {
  sock_.async_wait(boost::asio::posix::stream_descriptor::wait_read,
                   [self = shared_from_this()](const boost::system::error_code& ec) {
                     if (ec || self->phase_ == Phase::kClosed) return;
                     self->drained_ = false;
                     if (self->phase_ == Phase::kLinger) return self->linger_read();
                     self->process_buffer();
                   });
}

bool HttpConnection::read_available() {
  // One loop thread: a static buffer serves every connection, and idle ones hold none.
  static thread_local char buf[64 * 1024];
  const int fd = sock_.native_handle();
  // At most this much per call, so a fast sender cannot grow the buffer far past what the
  // framer has looked at.
  size_t budget = 4 * sizeof(buf);
  while (budget > 0) {
    const ssize_t n = ::recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (n > 0) {
      if (phase_ != Phase::kLinger) in_.append(buf, static_cast<size_t>(n));
      budget -= std::min(budget, static_cast<size_t>(n));
      continue;
    }
    if (n == 0) {
      eof_ = drained_ = true;
      return true;
    }
    if (errno == EINTR) continue;
    if (errno == EAGAIN || errno == EWOULDBLOCK) {
      drained_ = true;
      return true;
    }
    return false;  // reset by the peer
  }
  return true;
}

void HttpConnection::process_buffer() {
  using State = RequestFramer::State;
  const ConnectionLimits& lim = host_->limits();
  for (;;) {
    if (phase_ == Phase::kIdle && !in_.empty()) {
      phase_ = Phase::kHeader;
      set_deadline(lim.header_timeout_s);
    }
    framed_ += framer_->feed(in_.data() + framed_, in_.size() - framed_);
    switch (framer_->state()) {
      case State::kNeedHeader:
      case State::kNeedBody:
        if (!drained_) {
          if (!read_available()) return close();
          continue;
        }
        if (eof_) return close();  // the client stopped sending before the request was complete
        return wait_readable();
      case State::kHeaderDone: {
        const RequestHead& head = framer_->head();
        // A body larger than the loop buffers (only an upload may be allowed one) is read by
        // the worker; httplib's route checks answer 413 to the rest before reading any of it.
        if (head.content_length && *head.content_length > lim.max_loop_body_bytes) return hand_over(false);
        framer_->read_body(lim.max_loop_body_bytes);
        if (framer_->state() == State::kNeedBody) {
          phase_ = Phase::kBody;
          set_deadline(lim.body_timeout_s);
          // The client waits for this before sending the body; httplib sends its own again
          // before the final answer, which clients skip (RFC 9110: any number of 1xx).
          if (head.expect_continue && framed_ == in_.size()) {
            static const char kContinue[] = "HTTP/1.1 100 Continue\r\n\r\n";
            (void)::send(sock_.native_handle(), kContinue, sizeof(kContinue) - 1, MSG_NOSIGNAL | MSG_DONTWAIT);
          }
        }
        continue;
      }
      case State::kComplete:
        return hand_over(false);
      case State::kBodyTooLarge:
        // A chunked body past the loop's limit: the route reads on from the socket and
        // answers 413 (or, for an upload, takes the rest).
        return hand_over(false);
      case State::kHeaderTooLarge:
        return answer_and_close(431, "the request headers are too large", "headers_too_large");
      case State::kMalformed: {
        // httplib answers it (a bad Content-Length gets the guards' 400/413 envelope) from
        // the header alone; the connection closes after, as its framing cannot be trusted.
        const size_t end = header_end(in_);
        if (end == std::string::npos) return answer_and_close(400, "malformed HTTP request", "invalid_request");
        return hand_over(true);
      }
    }
  }
}

void HttpConnection::hand_over(bool close_after) {
  phase_ = Phase::kWorker;
  ++deadline_generation_;
  timer_.cancel();
  ++served_;
  first_request_ = false;
  const bool last = close_after || served_ >= host_->limits().keep_alive_max || host_->stopping();
  auto job = [self = shared_from_this(), last, guard = boost::asio::make_work_guard(io_)] {
    self->run_on_worker(last);
  };
  if (!host_->dispatch(framer_->head(), std::move(job))) {
    phase_ = Phase::kHeader;
    answer_and_close(503, "the server is overloaded (every worker is busy and the queue is full); retry later",
                     "service_unavailable");
  }
}

void HttpConnection::run_on_worker(bool close_after) {
  AfterRequest next = AfterRequest::kClose;
  size_t left_over = 0;
  {
    ConnectionStream strm(sock_.native_handle(), &in_, static_cast<int>(host_->limits().body_timeout_s * 1000),
                          static_cast<int>(host_->limits().write_timeout_s * 1000));
    next = host_->serve_request(strm, close_after);
    in_.erase(0, strm.consumed());
    left_over = in_.size();
  }
  // Input the answer left unread would make close() send a reset, which can make the client
  // drop the answer: linger instead.
  if (close_after && next == AfterRequest::kKeepAlive) next = AfterRequest::kClose;
  if (next == AfterRequest::kClose && left_over > 0) next = AfterRequest::kLingerClose;
  boost::asio::post(io_, [self = shared_from_this(), next] { self->after_request(next); });
}

void HttpConnection::after_request(AfterRequest next) {
  if (phase_ == Phase::kClosed) return;
  if (next == AfterRequest::kLingerClose) return linger_close();
  if (next == AfterRequest::kClose || host_->stopping()) return close();
  if (eof_ && in_.empty()) return close();
  begin_request();
}

void HttpConnection::answer_and_close(int status, const std::string& message, const std::string& code) {
  host_->count_loop_answer(status);
  // Small enough for the socket's send buffer, which holds no earlier answer (those were
  // written to the end by their workers): one non-blocking send.
  const std::string reply = loop_answer(status, message, code);
  (void)::send(sock_.native_handle(), reply.data(), reply.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
  linger_close();
}

void HttpConnection::set_deadline(double seconds) {
  const uint64_t generation = ++deadline_generation_;
  timer_.expires_after(std::chrono::duration_cast<std::chrono::steady_clock::duration>(
      std::chrono::duration<double>(seconds)));
  timer_.async_wait([self = shared_from_this(), generation](const boost::system::error_code& ec) {
    if (!ec) self->on_deadline(generation);
  });
}

void HttpConnection::on_deadline(uint64_t generation) {
  if (generation != deadline_generation_) return;  // re-armed since
  switch (phase_) {
    case Phase::kIdle:
    case Phase::kLinger:
      return close();
    case Phase::kHeader:
      return answer_and_close(408, "the request header did not arrive in time", "timeout");
    case Phase::kBody:
      return answer_and_close(408, "the request body did not arrive in time", "timeout");
    case Phase::kWorker:
    case Phase::kClosed:
      return;
  }
}

// Closing a socket with unread input sends a reset, and a reset can make the client drop our
// answer (a 413, say) before reading it. So stop sending, read and drop what the client still
// sends for up to 2 s, then close.
void HttpConnection::linger_close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kLinger;
  in_.clear();
  ::shutdown(sock_.native_handle(), SHUT_WR);
  set_deadline(2.0);
  drained_ = false;
  linger_read();
}

void HttpConnection::linger_read() {
  while (!drained_)
    if (!read_available()) return close();
  if (eof_) return close();
  wait_readable();
}

void HttpConnection::close() {
  if (phase_ == Phase::kClosed) return;
  phase_ = Phase::kClosed;
  ++deadline_generation_;
  timer_.cancel();
  boost::system::error_code ec;
  ::shutdown(sock_.native_handle(), SHUT_RDWR);
  sock_.close(ec);
  std::string().swap(in_);
  framer_.reset();
  host_->connection_closed(this);
}

}  // namespace lancet::server
