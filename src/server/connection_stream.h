// The byte stream cpp-httplib reads one request from and writes its response to, on a worker
// thread. The event loop has already read the whole request into the connection's buffer, so
// reads are served from there; only requests the loop hands over before their body (a body
// larger than the loop buffers, or framing the loop does not accept) read on from the socket.
// The buffer outlives the request: bytes of a pipelined next request stay in it.
#pragma once

#include <string>

#include "server/httplib_include.h"

namespace lancet::server {

class ConnectionStream final : public httplib::Stream {
 public:
  // `in`: the connection's received bytes, read from its start; must outlive the stream.
  ConnectionStream(int sock, std::string* in, int read_timeout_ms, int write_timeout_ms)
      : sock_(sock), in_(in), read_ms_(read_timeout_ms), write_ms_(write_timeout_ms) {}

  // Bytes of `in` the request used; the rest belongs to the next request.
  size_t consumed() const { return off_; }
  bool has_buffered() const { return off_ < in_->size(); }

  bool is_readable() const override;
  bool is_writable() const override;
  ssize_t read(char* ptr, size_t n) override;
  ssize_t write(const char* ptr, size_t n) override;
  void get_remote_ip_and_port(std::string& ip, int& port) const override;
  void get_local_ip_and_port(std::string& ip, int& port) const override;
  socket_t socket() const override { return sock_; }

 private:
  // A peer that closed its side reads as EOF; writes to it would fail, and a streaming
  // response must notice that the client went away.
  bool peer_alive() const;

  int sock_;
  std::string* in_;
  int read_ms_, write_ms_;
  size_t off_ = 0;
};

}  // namespace lancet::server
