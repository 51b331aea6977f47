// The listening socket and the connection loop: a second server on a taken port fails with a
// clear message, the backlog holds a burst of connections before any is accepted, keep-alive
// allows many requests per connection, and pipelined requests all get their answers.
#include "server/http_listener.h"

#include <fcntl.h>
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "in_process_server.h"
#include "raw_http.h"

namespace lancet::testing {
namespace {

TEST(HttpListener, SecondServerOnATakenPortFailsWithAddressInUse) {
  InProcessServer first(test_config());
  server::ServerConfig cfg = test_config();
  cfg.port = first.port();
  server::HttpServer second(cfg);
  const Status st = second.bind();
  ASSERT_FALSE(st.ok()) << "a second server could bind port " << cfg.port;
  EXPECT_NE(st.message().find("address already in use"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find(std::to_string(cfg.port)), std::string::npos) << st.message();
}

TEST(HttpListener, UnknownHostIsAClearError) {
  server::ServerConfig cfg = test_config();
  cfg.host = "192.0.2.1";  // TEST-NET-1: never an address of this machine
  server::HttpServer s(cfg);
  const Status st = s.bind();
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("not an address of this machine"), std::string::npos) << st.message();
}

// Connections complete their handshake into the kernel's accept queue even before the server
// accepts any; with a backlog of 5 only about 6 of a burst of 64 would.
TEST(HttpListener, BacklogHoldsABurstOfConnections) {
  server::ServerConfig cfg = test_config();
  cfg.listen_backlog = 128;
  server::HttpServer s(cfg);
  ASSERT_TRUE(s.bind().ok());  // bound and listening, never run: nothing accepts
  constexpr int kConnections = 64;
  std::vector<pollfd> fds;
  for (int i = 0; i < kConnections; ++i) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(static_cast<uint16_t>(s.port()));
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    (void)::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr));
    fds.push_back({fd, POLLOUT, 0});
  }
  // Handshakes on loopback take microseconds; a dropped SYN is retried only after 1 s.
  int connected = 0;
  for (pollfd& p : fds) {
    if (::poll(&p, 1, 500) == 1 && (p.revents & POLLOUT)) {
      int err = 0;
      socklen_t len = sizeof(err);
      ::getsockopt(p.fd, SOL_SOCKET, SO_ERROR, &err, &len);
      connected += err == 0;
    }
    ::close(p.fd);
  }
  EXPECT_EQ(connected, kConnections);
}

// A stop that comes before the accept loop runs (the model failed to load at once) must still
// end run(); httplib's own stop() does nothing until then.
TEST(HttpListener, StopRightAfterStartEndsRun) {
  for (int i = 0; i < 20; ++i) {
    server::HttpServer s(test_config());
    ASSERT_TRUE(s.bind().ok());
    std::thread t([&] { s.run(); });
    s.stop();
    t.join();
  }
}

TEST(HttpListener, KeepAliveAllowsTheDocumentedNumberOfRequests) {
  InProcessServer server(test_config());
  httplib::Client cli("127.0.0.1", server.port());
  cli.set_keep_alive(true);
  for (int i = 0; i < 20; ++i) {  // httplib's default would close the connection after 5
    auto r = cli.Get("/version");
    ASSERT_TRUE(r);
    EXPECT_EQ(r->get_header_value("Keep-Alive"), "timeout=5, max=1000") << i;
    EXPECT_FALSE(r->has_header("Connection")) << i;
  }
}

TEST(HttpListener, PipelinedRequestsAllGetAnswers) {
  InProcessServer server(test_config());
  const std::string get = "GET /version HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
  const std::string last = "GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
  const RawReply reply = raw_exchange(server.port(), get + get + last, 10);
  EXPECT_EQ(response_statuses(reply.text), (std::vector<int>{200, 200, 503})) << reply.text;
  EXPECT_TRUE(reply.closed);
  EXPECT_LT(reply.seconds, 4.0) << "the connection waited for the keep-alive timeout";
}

TEST(HttpListener, BodyOfARequestAnsweredEarlyIsNotReadAsTheNextRequest) {
  server::ServerConfig cfg = test_config();
  cfg.api_key = "k";
  InProcessServer server(cfg);
  // 401 before the body is read: the body must not come back as a 400 for a second request.
  const std::string body = "GET /version HTTP/1.1\r\nHost: x\r\n\r\n";
  const RawReply reply = raw_exchange(server.port(),
                                      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: " +
                                          std::to_string(body.size()) + "\r\n\r\n" + body,
                                      10);
  EXPECT_EQ(response_statuses(reply.text), std::vector<int>{401}) << reply.text;
  EXPECT_TRUE(reply.closed);
}

}  // namespace
}  // namespace lancet::testing
