// A completion request's lifecycle in an in-process HttpServer over an Engine with a fake
// model (one millisecond a step, token ids only): a non-streaming client that disconnects
// aborts its request and every KV block comes back; --timeout ends a request while its tokens
// are still flowing, with a 408 envelope (non-streaming) or an error event and [DONE]
// (streaming), and aborts it.
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "engine/async_engine.h"
#include "server/http_server.h"
#include "server/httplib_include.h"
#include "server/serving_model.h"
#include "token_id_model.h"

namespace lancet::server {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kLongRequest = 3000;  // tokens; at least 3 s of steps

class CompletionLifecycle : public ::testing::Test {
 protected:
  void start(double timeout_s) {
    EngineConfig ec;
    ec.scheduler = {.max_num_batched_tokens = 256, .max_num_seqs = 8, .max_model_len = 4096};
    engine_ = std::make_unique<Engine>(ec, &executor_);
    async_ = std::make_unique<AsyncEngine>(engine_.get());
    model_ = std::make_unique<testing::TokenIdServingModel>(async_.get());
    ServerConfig cfg;
    cfg.port = 0;
    cfg.max_concurrent_requests = 4;
    cfg.request_timeout_s = timeout_s;
    server_ = std::make_unique<HttpServer>(cfg);
    ASSERT_TRUE(server_->bind().ok());
    server_->set_model(model_.get());
    thread_ = std::thread([this] { server_->run(); });
    httplib::Client cli("127.0.0.1", server_->port());
    for (int i = 0; i < 200 && !cli.Get("/health"); ++i) std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  void TearDown() override {
    if (server_) server_->stop();
    if (thread_.joinable()) thread_.join();
  }
  // Waits (up to 30 s) until the server has finished with every request and the engine is idle.
  bool wait_idle() {
    const auto deadline = Clock::now() + std::chrono::seconds(30);
    while (Clock::now() < deadline) {
      const EngineStats st = async_->stats();
      if (server_->in_flight() == 0 && st.num_running == 0 && st.num_waiting == 0) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return false;
  }
  std::string metrics() { return server_->metrics().render("fake", async_->stats(), server_->in_flight()); }
  static std::string long_request(bool stream) {
    return nlohmann::json{{"prompt", {1, 2, 3}}, {"max_tokens", kLongRequest}, {"stream", stream}}.dump();
  }

  testing::MillisecondSuccessorModel executor_;  // 3000 tokens take at least 3 s
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<AsyncEngine> async_;
  std::unique_ptr<testing::TokenIdServingModel> model_;
  std::unique_ptr<HttpServer> server_;
  std::thread thread_;
};

TEST_F(CompletionLifecycle, ClientThatDisconnectsAbortsNonStreamingRequest) {
  start(/*timeout_s=*/0);
  {
    httplib::Client cli("127.0.0.1", server_->port());
    cli.set_read_timeout(0, 300 * 1000);  // gives up after 300 ms; the connection closes with `cli`
    auto r = cli.Post("/v1/completions", long_request(false), "application/json");
    EXPECT_FALSE(r) << "the request should still have been running";
  }
  ASSERT_TRUE(wait_idle());
  const EngineStats st = async_->stats();
  EXPECT_EQ(st.num_free_blocks, st.num_blocks) << "KV blocks leaked";
  EXPECT_LT(st.generation_tokens, kLongRequest) << "the request ran to max_tokens";
  EXPECT_GT(st.generation_tokens, 0);
  const std::string m = metrics();
  EXPECT_NE(m.find("vllm:request_success_total{model_name=\"fake\",finished_reason=\"abort\"} 1"), std::string::npos)
      << m;
  EXPECT_NE(m.find("lancet:http_errors_total{model_name=\"fake\",status=\"499\"} 1"), std::string::npos) << m;
  // The server goes on serving.
  httplib::Client again("127.0.0.1", server_->port());
  auto r = again.Post("/v1/completions", R"({"prompt": [5], "max_tokens": 3})", "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200) << r->body;
  EXPECT_EQ(nlohmann::json::parse(r->body)["usage"]["completion_tokens"], 3);
}

TEST_F(CompletionLifecycle, TimeoutEndsNonStreamingRequestWhileTokensFlow) {
  start(/*timeout_s=*/0.3);
  httplib::Client cli("127.0.0.1", server_->port());
  cli.set_read_timeout(60);
  const auto t0 = Clock::now();
  auto r = cli.Post("/v1/completions", long_request(false), "application/json");
  const double elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 408) << r->body;
  const auto err = nlohmann::json::parse(r->body)["error"];
  EXPECT_EQ(err["type"], "timeout_error") << r->body;
  EXPECT_EQ(err["code"], "timeout") << r->body;
  EXPECT_NE(err["message"].get<std::string>().find("--timeout 0.3 s"), std::string::npos) << r->body;
  // The whole generation takes at least 3 s of steps.
  EXPECT_LT(elapsed, 3.0);
  ASSERT_TRUE(wait_idle());
  const EngineStats st = async_->stats();
  EXPECT_EQ(st.num_free_blocks, st.num_blocks);
  EXPECT_LT(st.generation_tokens, kLongRequest);
  EXPECT_NE(metrics().find("finished_reason=\"abort\"} 1"), std::string::npos);
}

TEST_F(CompletionLifecycle, TimeoutEndsStartedStreamWithErrorEventAndDone) {
  start(/*timeout_s=*/0.3);
  httplib::Client cli("127.0.0.1", server_->port());
  cli.set_read_timeout(60);
  auto r = cli.Post("/v1/completions", long_request(true), "application/json");
  ASSERT_TRUE(r);
  EXPECT_EQ(r->status, 200);
  std::vector<std::string> data;
  for (size_t pos = 0; (pos = r->body.find("data: ", pos)) != std::string::npos;) {
    const size_t end = r->body.find("\n\n", pos);
    ASSERT_NE(end, std::string::npos);
    data.push_back(r->body.substr(pos + 6, end - pos - 6));
    pos = end;
  }
  ASSERT_GE(data.size(), 3u) << r->body;
  EXPECT_EQ(data.back(), "[DONE]");
  const auto err = nlohmann::json::parse(data[data.size() - 2]);
  EXPECT_EQ(err["error"]["type"], "timeout_error") << data[data.size() - 2];
  // Before the error: one chunk per token (a token-id model), each with no finish reason.
  const size_t tokens = data.size() - 2;
  EXPECT_LT(tokens, static_cast<size_t>(kLongRequest));
  for (size_t i = 0; i < tokens; ++i)
    ASSERT_TRUE(nlohmann::json::parse(data[i])["choices"][0]["finish_reason"].is_null()) << data[i];
  ASSERT_TRUE(wait_idle());
  EXPECT_EQ(async_->stats().num_free_blocks, async_->stats().num_blocks);
}

}  // namespace
}  // namespace lancet::server
