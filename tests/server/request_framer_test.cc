// RequestFramer finds where each request ends as its bytes arrive: byte by byte, pipelined,
// with a Content-Length or chunked body, and stops at a header over the limit, a chunked body
// over the body limit, or framing RFC 9112 does not allow.
#include "server/request_framer.h"

#include <gtest/gtest.h>

#include <string>

namespace lancet::server {
namespace {

using State = RequestFramer::State;

// Feeds `bytes` in pieces of `step` as the event loop would (unconsumed bytes come again with
// more), going on into the body; returns the bytes the request took, or -1 if it never ended.
long frame(RequestFramer* f, const std::string& bytes, size_t step, uint64_t body_limit = 1 << 20) {
  size_t have = 0, used = 0;
  while (true) {
    used += f->feed(bytes.data() + used, have - used);
    if (f->state() == State::kHeaderDone) {
      f->read_body(body_limit);
      continue;
    }
    if (f->state() == State::kComplete) return static_cast<long>(used);
    if (f->state() != State::kNeedHeader && f->state() != State::kNeedBody) return -1;
    if (have == bytes.size()) return -1;
    have = std::min(bytes.size(), have + step);
  }
}

TEST(RequestFramer, HeaderOnlyRequestByteByByte) {
  const std::string req = "GET /health?x=1 HTTP/1.1\r\nHost: a\r\n\r\n";
  RequestFramer f(8192);
  EXPECT_EQ(frame(&f, req, 1), static_cast<long>(req.size()));
  EXPECT_EQ(f.head().method, "GET");
  EXPECT_EQ(f.head().path, "/health");
  EXPECT_FALSE(f.head().content_length);
}

TEST(RequestFramer, PipelinedRequestsEndWhereTheNextBegins) {
  const std::string first = "POST /v1/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 5\r\n\r\nhello";
  const std::string second = "GET /version HTTP/1.1\r\nHost: a\r\n\r\n";
  RequestFramer f(8192);
  EXPECT_EQ(frame(&f, first + second, 7), static_cast<long>(first.size()));
  EXPECT_EQ(*f.head().content_length, 5u);
  RequestFramer g(8192);
  EXPECT_EQ(frame(&g, second, 1000), static_cast<long>(second.size()));
}

TEST(RequestFramer, ChunkedBodyAndExpectContinue) {
  const std::string req =
      "POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nExpect: 100-continue\r\nTransfer-Encoding: chunked\r\n\r\n"
      "3\r\nabc\r\n2\r\nde\r\n0\r\n\r\n";
  RequestFramer f(8192);
  EXPECT_EQ(frame(&f, req + "GET", 3), static_cast<long>(req.size()));
  EXPECT_TRUE(f.head().chunked);
  EXPECT_TRUE(f.head().expect_continue);
}

TEST(RequestFramer, LimitsAndMalformedFraming) {
  RequestFramer big(1024);
  EXPECT_EQ(frame(&big, "GET / HTTP/1.1\r\nX: " + std::string(4096, 'a') + "\r\n\r\n", 512), -1);
  EXPECT_EQ(big.state(), State::kHeaderTooLarge);

  RequestFramer chunked(8192);
  EXPECT_EQ(frame(&chunked, "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n400\r\n" + std::string(1024, 'x'), 64,
                  /*body_limit=*/100),
            -1);
  EXPECT_EQ(chunked.state(), State::kBodyTooLarge);

  for (const std::string length : {"-1", "abc", "99999999999999999999999"}) {
    RequestFramer f(8192);
    EXPECT_EQ(frame(&f, "POST / HTTP/1.1\r\nContent-Length: " + length + "\r\n\r\n", 1000), -1) << length;
    EXPECT_EQ(f.state(), State::kMalformed) << length;
  }
  EXPECT_EQ(header_end("GET / HTTP/1.1\r\nA: b\r\n\r\nrest"), 24u);
  EXPECT_EQ(header_end("GET / HTTP/1.1\r\nA: b\r\n"), std::string::npos);
}

}  // namespace
}  // namespace lancet::server
