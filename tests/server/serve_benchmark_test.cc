// `lancet bench serve --background-input-len`: one long prompt sent alongside the short
// streams, against a real `lancet serve` on the default SmolLM2 model. The long request must
// complete, be reported on its own (TTFT, prompt tokens, the short streams' ITL gaps during
// its prefill) and be left out of every short-stream figure: counts and token totals are
// exact, so a background request leaking into them shows.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "server/serve_benchmark.h"
#include "server_process.h"
#include "test_paths.h"

namespace lancet::testing {
namespace {

constexpr int32_t kPrompts = 6, kInputLen = 16, kOutputLen = 8;
constexpr int32_t kBackgroundInput = 2048, kBackgroundOutput = 3;

class ServeBenchmarkBackground : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (default_model().empty()) return;
    server_ = new ServerProcess();
    std::string err;
    // A 256-token step budget with the long prompt capped at 128 tokens a step: its 16 chunks
    // share steps with the short streams' prompts and decoding whichever request the server
    // admits first (without the cap, a long prompt admitted first takes every step's whole
    // budget and the short requests wait for the end of its prefill).
    if (!server_->start({default_model(), "--max-model-len", "4096", "--kv-cache-memory", "268435456",
                         "--max-num-batched-tokens", "256", "--long-prefill-token-threshold", "128", "--threads",
                         "2"},
                        &err) ||
        !server_->wait_healthy(60, &err))
      start_error_ = new std::string(err);
  }
  static void TearDownTestSuite() {
    if (server_) EXPECT_EQ(server_->stop(SIGTERM, 60), 0) << server_->log();
    delete server_;
    server_ = nullptr;
    delete start_error_;
    start_error_ = nullptr;
  }
  void SetUp() override {
    if (default_model().empty()) FAIL() << "default model missing (tools/fetch_model.sh)";
    ASSERT_EQ(start_error_, nullptr) << *start_error_;
  }
  static server::ServeBenchConfig config() {
    server::ServeBenchConfig c;
    c.url = server_->base_url();
    c.concurrency = 2;
    c.num_prompts = kPrompts;
    c.input_len = kInputLen;
    c.output_len = kOutputLen;
    c.background_input_len = kBackgroundInput;
    c.background_output_len = kBackgroundOutput;
    c.timeout_s = 300;
    return c;
  }
  static ServerProcess* server_;
  static std::string* start_error_;
};
ServerProcess* ServeBenchmarkBackground::server_ = nullptr;
std::string* ServeBenchmarkBackground::start_error_ = nullptr;

TEST_F(ServeBenchmarkBackground, LongPromptIsReportedApart) {
  const server::ServeBenchConfig c = config();
  auto r = server::run_serve_benchmark(c);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_TRUE(r->errors.empty()) << r->errors[0] << "\nserver log:\n" << server_->log();
  // Short streams only: had the background request leaked in, each of these would be off.
  EXPECT_EQ(r->completed, kPrompts);
  EXPECT_EQ(r->failed, 0);
  EXPECT_EQ(r->total_input_tokens, kPrompts * kInputLen);
  EXPECT_EQ(r->total_output_tokens, kPrompts * kOutputLen);
  EXPECT_EQ(r->ttft.count, kPrompts);
  EXPECT_EQ(r->e2el.count, kPrompts);
  EXPECT_EQ(r->tpot.count, kPrompts);
  EXPECT_EQ(r->itl.count, kPrompts * (kOutputLen - 1));  // one streamed chunk per token

  ASSERT_TRUE(r->has_background);
  const server::BackgroundResult& b = r->background;
  EXPECT_TRUE(b.completed) << b.error;
  EXPECT_EQ(b.prompt_tokens, kBackgroundInput);
  EXPECT_EQ(b.output_tokens, kBackgroundOutput);
  EXPECT_GT(b.ttft_ms, 0);
  EXPECT_GE(b.e2el_ms, b.ttft_ms);
  // The short streams kept decoding while the long prompt was prefilled in chunks.
  EXPECT_GT(b.itl_during_prefill.count, 0);
  EXPECT_LE(b.itl_during_prefill.count, r->itl.count);
  EXPECT_LE(b.itl_during_prefill.p99_ms, r->itl.p99_ms);  // a subset; under 100 samples p99 is the max
  EXPECT_GT(b.itl_during_prefill.p99_ms, 0);

  const auto j = server::serve_bench_json(c, *r);
  ASSERT_TRUE(j.contains("background")) << j.dump();
  const auto& jb = j["background"];
  EXPECT_EQ(jb["input_len"], kBackgroundInput);
  EXPECT_EQ(jb["output_len"], kBackgroundOutput);
  EXPECT_EQ(jb["completed"], true);
  EXPECT_EQ(jb["prompt_tokens"], kBackgroundInput);
  EXPECT_EQ(jb["output_tokens"], kBackgroundOutput);
  EXPECT_DOUBLE_EQ(jb["ttft_ms"].get<double>(), b.ttft_ms);
  EXPECT_EQ(jb["short_itl_during_prefill"]["count"], b.itl_during_prefill.count);
  EXPECT_DOUBLE_EQ(jb["short_itl_during_prefill"]["p99_ms"].get<double>(), b.itl_during_prefill.p99_ms);
  EXPECT_EQ(j["total_input_tokens"], kPrompts * kInputLen);
  const std::string table = server::serve_bench_table(*r);
  std::printf("%s", table.c_str());
  EXPECT_NE(table.find("Background Long Prompt"), std::string::npos);
  EXPECT_NE(table.find("P99 ITL during prefill (ms):"), std::string::npos);
}

// The command line: flags reach the benchmark and --json prints the background object.
TEST_F(ServeBenchmarkBackground, CommandLinePrintsBackgroundJson) {
  std::string out;
  const std::string cmd = lancet_binary() + " bench serve --url " + server_->base_url() +
                          " --concurrency 2 --num-prompts 2 --input-len 8 --output-len 4"
                          " --background-input-len 600 --background-output-len 2 --json 2>/dev/null";
  ASSERT_EQ(run_command(cmd, &out), 0) << out << "\nserver log:\n" << server_->log();
  const auto j = nlohmann::json::parse(out.substr(out.find('{')), nullptr, false);
  ASSERT_FALSE(j.is_discarded()) << out;
  EXPECT_EQ(j["completed"], 2);
  EXPECT_EQ(j["total_input_tokens"], 2 * 8);
  ASSERT_TRUE(j.contains("background")) << out;
  EXPECT_EQ(j["background"]["completed"], true);
  EXPECT_EQ(j["background"]["prompt_tokens"], 600);
  EXPECT_EQ(j["background"]["output_tokens"], 2);
  EXPECT_GT(j["background"]["ttft_ms"].get<double>(), 0);
}

TEST(ServeBenchmarkConfig, BackgroundFlagsAreChecked) {
  server::ServeBenchConfig c;
  c.url = "http://127.0.0.1:9";  // never reached: the config is refused first
  c.background_input_len = -1;
  auto r = server::run_serve_benchmark(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  c.background_input_len = 100;
  c.background_output_len = 0;
  r = server::run_serve_benchmark(c);
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidArgument);
  // Without a background request the JSON has no background object.
  EXPECT_FALSE(server::serve_bench_json(server::ServeBenchConfig{}, server::ServeBenchResult{}).contains("background"));
}

}  // namespace
}  // namespace lancet::testing
