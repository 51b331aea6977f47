// `lancet serve` on the tiny Hugging Face fixture (token-id prompts, loads in a moment), for
// what only the whole process shows: a second server on a taken port exits non-zero with
// "address already in use", the unauthenticated non-loopback warning, a JSON body sent with
// curl's default form Content-Type over 8 KiB served like application/json, the prefix-cache
// counters in tokens, a second SIGINT during the drain ending the process at once, and
// --log-level debug logging each step timed for --max-step-ms.
#include <gtest/gtest.h>

#include <map>
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
  if (!std::regex_search(text, m, std::regex(name + R"(\{[^}]*\} ([-0-9.e+]+))"))) return -1;
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

// vLLM's per-request phase, parameter and per-step histograms: one observation per request,
// prefill + decode = inference, queue + inference within the e2e latency, the parameters' sums
// equal what was sent, and every token the steps computed counted once in iteration_tokens.
TEST_F(ServeHttpShared, VllmRequestPhaseParamAndIterationMetrics) {
  httplib::Client cli("127.0.0.1", server_->port());
  cli.set_read_timeout(120);
  auto before = cli.Get("/metrics");
  ASSERT_TRUE(before);
  const std::vector<std::string> names = {
      "vllm:request_queue_time_seconds",   "vllm:request_prefill_time_seconds",
      "vllm:request_decode_time_seconds",  "vllm:request_inference_time_seconds",
      "vllm:request_params_n",             "vllm:request_params_max_tokens",
      "vllm:iteration_tokens_total",       "vllm:e2e_request_latency_seconds"};
  std::map<std::string, double> sum0, count0;
  for (const std::string& n : names) {
    sum0[n] = metric(before->body, n + "_sum");
    count0[n] = metric(before->body, n + "_count");
    ASSERT_GE(count0[n], 0) << n << " missing:\n" << before->body;
  }
  // Prompts under one block (no prefix-cache hits), so a sequence computes its prompt and all
  // but its last generated token: prompt + max_tokens - 1 tokens.
  const std::vector<std::pair<int, int>> requests = {{3, 1}, {7, 1}, {12, 1}, {20, 1}, {5, 2}, {9, 3}};
  int64_t max_tokens_sum = 0, n_sum = 0, computed = 0;
  for (size_t i = 0; i < requests.size(); ++i) {
    const auto [max_tokens, n] = requests[i];
    const std::vector<int32_t> prompt = {int32_t(700 + i), 11, 12, 13, 14};
    const std::string body = json{{"prompt", prompt}, {"max_tokens", max_tokens}, {"n", n},
                                  {"temperature", 0.8}, {"seed", 1}, {"ignore_eos", true}}.dump();
    auto r = cli.Post("/v1/completions", body, "application/json");
    ASSERT_TRUE(r);
    ASSERT_EQ(r->status, 200) << r->body;
    ASSERT_EQ(json::parse(r->body)["usage"]["completion_tokens"], max_tokens * n) << r->body;
    max_tokens_sum += max_tokens;
    n_sum += n;
    computed += int64_t(n) * (int64_t(prompt.size()) + max_tokens - 1);
  }
  auto after = cli.Get("/metrics");
  ASSERT_TRUE(after);
  const std::string& m = after->body;
  const double count = static_cast<double>(requests.size());
  std::map<std::string, double> sum;
  for (const std::string& n : names) {
    sum[n] = metric(m, n + "_sum") - sum0[n];
    if (n != "vllm:iteration_tokens_total") EXPECT_EQ(metric(m, n + "_count") - count0[n], count) << n << "\n" << m;
  }
  EXPECT_EQ(sum["vllm:request_params_max_tokens"], static_cast<double>(max_tokens_sum));
  EXPECT_EQ(sum["vllm:request_params_n"], static_cast<double>(n_sum));
  EXPECT_EQ(sum["vllm:iteration_tokens_total"], static_cast<double>(computed));
  EXPECT_GT(metric(m, "vllm:iteration_tokens_total_count") - count0["vllm:iteration_tokens_total"], 0);
  const double queue = sum["vllm:request_queue_time_seconds"], prefill = sum["vllm:request_prefill_time_seconds"],
               decode = sum["vllm:request_decode_time_seconds"], inference = sum["vllm:request_inference_time_seconds"],
               e2e = sum["vllm:e2e_request_latency_seconds"];
  EXPECT_GT(prefill, 0);
  EXPECT_GT(decode, 0);  // requests with more than one token have a decode phase
  EXPECT_GE(queue, 0);
  EXPECT_NEAR(prefill + decode, inference, 1e-6 * count + 1e-9 * inference);
  // e2e ends when the response is complete, a moment after the last token.
  EXPECT_LE(queue + inference, e2e + 1e-6);
  EXPECT_NEAR(queue + inference, e2e, 0.05 * count) << "queue " << queue << " inference " << inference;
  EXPECT_NE(m.find("# TYPE vllm:cache_config_info gauge"), std::string::npos);
  EXPECT_NE(m.find(R"(vllm:cache_config_info{block_size="16",cache_dtype=")"), std::string::npos) << m;
  EXPECT_NE(m.find(R"(enable_prefix_caching="True")"), std::string::npos) << m;
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

// --log-level debug with --max-step-ms: one line per timed step with its features and times,
// from the first step on (predictions once the cost model is fitted); none at the default level.
TEST(ServeHttp, DebugLogShowsTimedSteps) {
  for (const char* level : {"debug", "info"}) {
    ServerProcess server;
    std::string err;
    auto flags = tiny_flags();
    // A budget no prompt here reaches, even on a loaded 2-core machine (at 50 ms the 370-token
    // prompt was once predicted past it and split).
    flags.insert(flags.end(), {"--max-step-ms", "1000", "--log-level", level});
    ASSERT_TRUE(server.start(flags, &err) && server.wait_healthy(60, &err)) << err;
    httplib::Client cli("127.0.0.1", server.port());
    cli.set_read_timeout(120);
    for (int i = 0; i < 12; ++i) {
      std::vector<int32_t> prompt(40 + 30 * i);
      for (size_t j = 0; j < prompt.size(); ++j) prompt[j] = 5 + static_cast<int32_t>((j * 13 + i) % 900);
      auto r = cli.Post("/v1/completions", json{{"prompt", prompt}, {"max_tokens", 3}, {"ignore_eos", true}}.dump(),
                        "application/json");
      ASSERT_TRUE(r && r->status == 200) << (r ? r->body : "no answer");
    }
    EXPECT_EQ(server.stop(SIGTERM, 60), 0);
    const std::string log = server.log();
    if (std::string(level) == "info") {
      EXPECT_EQ(log.find("timed step:"), std::string::npos) << log;
      continue;
    }
    EXPECT_NE(log.find("timed step: "), std::string::npos) << log;
    EXPECT_NE(log.find("largest chunk 370"), std::string::npos) << log;  // the last prompt (370 tokens) in one chunk
    EXPECT_TRUE(std::regex_search(log, std::regex(R"(ms \(predicted [0-9.]+\))"))) << "fitted after a few steps: " << log;
  }
}

}  // namespace
}  // namespace lancet::testing
