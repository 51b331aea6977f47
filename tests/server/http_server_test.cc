// HttpServer in process, before a model is set: /health is 503 while loading and 200 never
// comes, completions get a 503 envelope, auth and routing rules apply, /metrics renders.
#include "server/http_server.h"

#include <gtest/gtest.h>

#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>

#include <thread>

#include <nlohmann/json.hpp>

#include "server/httplib_include.h"
#include "server/process_sockets.h"

namespace lancet::server {
namespace {

TEST(HttpServer, LoadingStateAndRouting) {
  ServerConfig cfg;
  cfg.port = 0;
  cfg.api_key = "k";
  cfg.max_concurrent_requests = 4;
  HttpServer server(cfg);
  ASSERT_TRUE(server.bind().ok());
  std::thread t([&] { server.run(); });
  httplib::Client cli("127.0.0.1", server.port());
  httplib::Headers auth = {{"Authorization", "Bearer k"}};
  for (int i = 0; i < 100; ++i) {  // until the listener runs
    if (cli.Get("/health")) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  auto r = cli.Get("/health");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  r = cli.Post("/v1/completions", auth, R"({"prompt": [1, 2]})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("loading"), std::string::npos) << r->body;
  r = cli.Post("/v1/completions", R"({"prompt": [1, 2]})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 401);
  auto env = nlohmann::json::parse(r->body);
  EXPECT_EQ(env["error"]["type"], "authentication_error");
  r = cli.Get("/nope");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 404);
  EXPECT_TRUE(nlohmann::json::parse(r->body).contains("error"));
  // httplib's logger (which counts errors) runs after the response is written, and each request
  // here has a connection (and server thread) of its own: the count may trail the 401 a little.
  const std::string counted_401 = "lancet:http_errors_total{model_name=\"\",status=\"401\"} 1";
  for (int i = 0; i < 200; ++i) {
    r = cli.Get("/metrics");
    if (!r || r->body.find(counted_401) != std::string::npos) break;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("vllm:num_requests_running"), std::string::npos);
  EXPECT_NE(r->body.find(counted_401), std::string::npos) << r->body;
  r = cli.Get("/");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  EXPECT_NE(r->body.find("/v1/chat/completions"), std::string::npos);
  server.begin_drain();
  r = cli.Post("/v1/completions", auth, R"({"prompt": [1, 2]})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 503);
  EXPECT_NE(r->body.find("shutting down"), std::string::npos) << r->body;
  EXPECT_TRUE(server.wait_idle(1.0));
  server.stop();
  t.join();
}

// httplib listens with a backlog of 5; bind() raises it so that a burst of clients is queued
// instead of having its handshakes dropped (Linux reports a listener's backlog in tcpi_sacked).
TEST(HttpServer, ListenBacklogHoldsABurstOfClients) {
  ServerConfig cfg;
  cfg.port = 0;
  HttpServer server(cfg);
  ASSERT_TRUE(server.bind().ok());
  const int fd = find_own_socket([&](int s) {
    std::string host;
    int port = -1;
    int listening = 0;
    socklen_t len = sizeof(listening);
    return getsockopt(s, SOL_SOCKET, SO_ACCEPTCONN, &listening, &len) == 0 && listening &&
           socket_address(s, false, &host, &port) && port == server.port();
  });
  ASSERT_GE(fd, 0);
  tcp_info info{};
  socklen_t len = sizeof(info);
  ASSERT_EQ(getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &len), 0);
  EXPECT_GE(info.tcpi_sacked, 64u) << "listen backlog";
}

TEST(HttpServer, ConfigValidation) {
  ServerConfig cfg;
  EXPECT_TRUE(cfg.validate().ok());
  cfg.port = 70000;
  EXPECT_FALSE(cfg.validate().ok());
  cfg = ServerConfig{};
  cfg.http_threads = 10;
  cfg.max_concurrent_requests = 20;
  EXPECT_FALSE(cfg.validate().ok());
  cfg = ServerConfig{};
  cfg.max_body_bytes = 10;
  EXPECT_FALSE(cfg.validate().ok());
  cfg = ServerConfig{};
  cfg.request_timeout_s = 1e300;  // arrival + timeout would overflow the clock
  EXPECT_FALSE(cfg.validate().ok());
  cfg.request_timeout_s = -1;
  EXPECT_FALSE(cfg.validate().ok());
  cfg.request_timeout_s = 0.5;
  EXPECT_TRUE(cfg.validate().ok());
}

}  // namespace
}  // namespace lancet::server
