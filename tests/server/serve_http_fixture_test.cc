// `lancet serve` on the tiny Hugging Face fixture (token-id prompts, loads in a moment), for
// what only the whole process shows: a second server on a taken port exits non-zero with
// "address already in use", the unauthenticated non-loopback warning, a JSON body sent with
// curl's default form Content-Type over 8 KiB served like application/json, the prefix-cache
// counters in tokens, and a second SIGINT during the drain ending the process at once.
#include <gtest/gtest.h>

#include <regex>
#include <thread>

#include <nlohmann/json.hpp>

#include "server_process.h"
#include "test_paths.h"

namespace lancet::testing {
namespace {

using nlohmann::json;

std::vector<std::string> tiny_flags(const std::string& max_model_len = "4096") {
  return {fixture_dir("tiny-llama32"), "--threads", "1", "--max-model-len", max_model_len, "--kv-cache-memory",
          "67108864"};
}

double metric(const std::string& text, const std::string& name) {
  std::smatch m;
  if (!std::regex_search(text, m, std::regex(name + R"(\{[^}]*\} ([0-9.e+]+))"))) return -1;
  return std::stod(m[1]);
}

TEST(ServeHttp, SecondServerOnTheSamePortFailsAtStart) {
  ServerProcess first;
  std::string err;
  ASSERT_TRUE(first.start(tiny_flags(), &err)) << err;
  std::string out;
  // `timeout`: a second server that did start would otherwise serve forever.
  const std::string cmd = "timeout 60 " + lancet_binary() + " serve " + fixture_dir("tiny-llama32") + " --port " +
                          std::to_string(first.port()) + " --threads 1";
  EXPECT_EQ(run_command(cmd, &out), 1) << out;
  EXPECT_NE(out.find("address already in use"), std::string::npos) << out;
  EXPECT_EQ(first.log().find("warning"), std::string::npos) << "loopback server warned: " << first.log();
}

TEST(ServeHttp, UnauthenticatedServerOnAllAddressesWarns) {
  ServerProcess server;
  std::string err;
  auto flags = tiny_flags();
  flags.insert(flags.end(), {"--host", "0.0.0.0"});
  ASSERT_TRUE(server.start(flags, &err)) << err;
  EXPECT_NE(server.log().find("warning: no --api-key and listening on 0.0.0.0"), std::string::npos) << server.log();
}

class ServeHttpShared : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    server_ = new ServerProcess();
    std::string err;
    if (!server_->start(tiny_flags(), &err) || !server_->wait_healthy(60, &err)) error_ = new std::string(err);
  }
  static void TearDownTestSuite() {
    if (server_) EXPECT_EQ(server_->stop(SIGTERM, 60), 0) << server_->log();
    delete server_;
    server_ = nullptr;
  }
  void SetUp() override { ASSERT_EQ(error_, nullptr) << *error_; }
  static ServerProcess* server_;
  static std::string* error_;
};
ServerProcess* ServeHttpShared::server_ = nullptr;
std::string* ServeHttpShared::error_ = nullptr;

TEST_F(ServeHttpShared, FormContentTypeJsonOver8KiBIsServedLikeJson) {
  httplib::Client cli("127.0.0.1", server_->port());
  cli.set_read_timeout(120);
  std::vector<int32_t> prompt(3000);  // ids of 3 digits: 12 KB of JSON
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 100 + static_cast<int32_t>((i * 37) % 900);
  const std::string body =
      json{{"prompt", prompt}, {"max_tokens", 4}, {"temperature", 0}, {"ignore_eos", true}, {"logprobs", 0}}.dump();
  ASSERT_GT(body.size(), 8u << 10);
  auto as_json = cli.Post("/v1/completions", body, "application/json");
  auto as_form = cli.Post("/v1/completions", body, "application/x-www-form-urlencoded");
  ASSERT_TRUE(as_json && as_form);
  ASSERT_EQ(as_json->status, 200) << as_json->body;
  ASSERT_EQ(as_form->status, 200) << as_form->body;
  const json a = json::parse(as_json->body), b = json::parse(as_form->body);
  EXPECT_EQ(a["choices"][0]["logprobs"]["tokens"], b["choices"][0]["logprobs"]["tokens"]);
  EXPECT_EQ(b["usage"]["prompt_tokens"], 3000);
  EXPECT_EQ(b["usage"]["completion_tokens"], 4);
}

// vLLM's counting: a repeated 160-token prompt at block size 16 queries 160 tokens each time
// and hits 144 the second time (9 full blocks; the last token is always computed).
TEST_F(ServeHttpShared, PrefixCacheCountersAreTokens) {
  httplib::Client cli("127.0.0.1", server_->port());
  cli.set_read_timeout(120);
  auto before = cli.Get("/metrics");
  ASSERT_TRUE(before);
  const double q0 = metric(before->body, "vllm:prefix_cache_queries_total");
  const double h0 = metric(before->body, "vllm:prefix_cache_hits_total");
  ASSERT_GE(q0, 0) << before->body;
  std::vector<int32_t> prompt(160);
  for (size_t i = 0; i < prompt.size(); ++i) prompt[i] = 500 + static_cast<int32_t>(i);
  const std::string body = json{{"prompt", prompt}, {"max_tokens", 1}, {"temperature", 0}}.dump();
  for (int i = 0; i < 2; ++i) {
    auto r = cli.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
  }
  auto after = cli.Get("/metrics");
  ASSERT_TRUE(after);
  EXPECT_EQ(metric(after->body, "vllm:prefix_cache_queries_total") - q0, 320) << after->body;
  EXPECT_EQ(metric(after->body, "vllm:prefix_cache_hits_total") - h0, 144) << after->body;
}

TEST(ServeHttp, SecondSigintDuringDrainExitsAtOnce) {
  ServerProcess server;
  std::string err;
  auto flags = tiny_flags("32768");
  flags.insert(flags.end(), {"--drain-timeout", "240"});
  ASSERT_TRUE(server.start(flags, &err) && server.wait_healthy(60, &err)) << err;
  // A long generation keeps the drain waiting.
  std::thread client([port = server.port()] {
    httplib::Client cli("127.0.0.1", port);
    cli.set_read_timeout(300);
    cli.Post("/v1/completions", json{{"prompt", {5, 6, 7}}, {"max_tokens", 30000}, {"ignore_eos", true}}.dump(),
             "application/json");
  });
  httplib::Client cli("127.0.0.1", server.port());
  bool running = false;
  for (int i = 0; i < 500 && !running; ++i) {
    auto m = cli.Get("/metrics");
    running = m && metric(m->body, "lancet:http_requests_in_flight") == 1;
    if (!running) std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ASSERT_TRUE(running) << server.log();
  ::kill(server.pid(), SIGINT);
  for (int i = 0; i < 250 && server.log().find("draining") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  ASSERT_NE(server.log().find("draining"), std::string::npos) << server.log();
  const int code = server.stop(SIGINT, 10);
  if (code < 0) ::kill(server.pid(), SIGKILL);  // still draining: end it so the client returns
  client.join();
  EXPECT_EQ(code, 128 + SIGINT) << server.log();
  EXPECT_NE(server.log().find("second SIGINT"), std::string::npos) << server.log();
}

}  // namespace
}  // namespace lancet::testing
