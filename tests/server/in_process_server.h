// Test helper: an HttpServer on a free port in this process, without a model (completions get
// 503 "loading"), serving from its own thread until destroyed.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <memory>
#include <thread>

#include "server/http_server.h"
#include "server/httplib_include.h"

namespace lancet::testing {

class InProcessServer {
 public:
  explicit InProcessServer(server::ServerConfig config) : server_(std::make_unique<server::HttpServer>(config)) {
    const Status st = server_->bind();
    EXPECT_TRUE(st.ok()) << st.to_string();
    if (!st.ok()) return;
    thread_ = std::thread([this] { server_->run(); });
    httplib::Client cli("127.0.0.1", server_->port());
    for (int i = 0; i < 200 && !cli.Get("/version"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  ~InProcessServer() {
    if (thread_.joinable()) {
      server_->stop();
      thread_.join();
    }
  }
  int port() const { return server_->port(); }
  server::HttpServer& server() { return *server_; }

 private:
  std::unique_ptr<server::HttpServer> server_;
  std::thread thread_;
};

// A config for in-process tests: any free port, loopback.
inline server::ServerConfig test_config() {
  server::ServerConfig c;
  c.port = 0;
  c.max_concurrent_requests = 4;
  return c;
}

}  // namespace lancet::testing
