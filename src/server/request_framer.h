// Where one HTTP/1.1 request ends in a connection's byte stream, found while the bytes arrive
// (Boost.Beast's parser): the event loop needs it to hand a worker only complete requests and
// to keep the bytes of a pipelined next request. The framer parses and counts; it keeps no
// copy of the body. The request itself is parsed again, from the same bytes, by cpp-httplib
// on the worker (routing and handlers stay httplib's).
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

namespace lancet::server {

// What the header said about the request and its body.
struct RequestHead {
  std::string method;
  std::string path;  // the target without its query string
  std::optional<uint64_t> content_length;
  bool chunked = false;
  bool expect_continue = false;  // "Expect: 100-continue"
};

class RequestFramer {
 public:
  enum class State {
    kNeedHeader,      // the header is not complete yet
    kHeaderDone,      // head() is valid; call read_body() to go on into the body
    kNeedBody,        // reading the body
    kComplete,        // the whole request has been fed
    kHeaderTooLarge,  // no end of header within the header limit
    kBodyTooLarge,    // a chunked body grew past the body limit given to read_body()
    kMalformed,       // not HTTP/1.x as RFC 9112 frames it (bad Content-Length, start line...)
  };

  explicit RequestFramer(size_t header_limit);
  ~RequestFramer();
  RequestFramer(const RequestFramer&) = delete;
  RequestFramer& operator=(const RequestFramer&) = delete;

  // Feeds the request's bytes that follow those already consumed; returns how many it
  // consumed. While the header is incomplete nothing is consumed (the same bytes come again
  // with more), and nothing past the end of the request ever is.
  size_t feed(const char* data, size_t size);
  // After kHeaderDone: the body is framed from the next feed() on; a chunked body longer than
  // `body_limit` ends in kBodyTooLarge (a Content-Length is for the caller to check).
  void read_body(uint64_t body_limit);

  State state() const { return state_; }
  const RequestHead& head() const { return head_; }

 private:
  class Parser;
  std::unique_ptr<Parser> parser_;
  State state_ = State::kNeedHeader;
  RequestHead head_;
};

// Offset just past the blank line that ends the header section in `bytes`, or npos.
size_t header_end(const std::string& bytes);

}  // namespace lancet::server
