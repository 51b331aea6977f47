// Test helper: HTTP over a raw TCP socket, for requests no client library sends (a bad
// Content-Length, pipelined requests in one write) and for counting what comes back.
#pragma once

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <vector>

namespace lancet::testing {

struct RawReply {
  std::string text;     // every byte the server sent before closing (or the deadline)
  double seconds = 0;   // from the send to the close (or the deadline)
  double first_byte_seconds = -1;  // from the send to the first byte of the answer
  bool closed = false;  // the server closed the connection before the deadline
};

// Sends `bytes` to 127.0.0.1:port in one write and reads until the server closes the
// connection or `timeout_s` passes.
inline RawReply raw_exchange(int port, const std::string& bytes, double timeout_s = 10) {
  RawReply out;
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    ::close(fd);
    return out;
  }
  const auto start = std::chrono::steady_clock::now();
  const auto deadline = start + std::chrono::duration<double>(timeout_s);
  (void)::send(fd, bytes.data(), bytes.size(), MSG_NOSIGNAL);
  char buf[8192];
  while (std::chrono::steady_clock::now() < deadline) {
    pollfd p{fd, POLLIN, 0};
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
    if (::poll(&p, 1, static_cast<int>(left.count()) + 1) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
    if (n <= 0) {
      out.closed = true;
      break;
    }
    if (out.text.empty())
      out.first_byte_seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out.text.append(buf, static_cast<size_t>(n));
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  ::close(fd);
  return out;
}

// Status codes of the responses in `text`, in order.
inline std::vector<int> response_statuses(const std::string& text) {
  std::vector<int> out;
  for (size_t pos = text.find("HTTP/1.1 "); pos != std::string::npos; pos = text.find("HTTP/1.1 ", pos + 1))
    out.push_back(std::stoi(text.substr(pos + 9, 3)));
  return out;
}

// The body of the last response in `text` (after its blank line).
inline std::string last_body(const std::string& text) {
  const size_t head = text.rfind("HTTP/1.1 ");
  const size_t blank = text.find("\r\n\r\n", head == std::string::npos ? 0 : head);
  return blank == std::string::npos ? "" : text.substr(blank + 4);
}

}  // namespace lancet::testing
