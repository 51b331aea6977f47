// `lancet bench throughput/latency` run end to end on a fixture and report consistent numbers
// (speed itself is measured in docs/BENCHMARKS.md, not asserted here).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace lancet {
namespace {

nlohmann::json run_json(const std::string& args) {
  std::string out;
  const int rc = testing::run_command(testing::lancet_binary() + " " + args + " 2>/dev/null", &out);
  EXPECT_EQ(rc, 0) << out;
  return nlohmann::json::parse(out, nullptr, false);
}

TEST(BenchCli, ThroughputCountsEveryToken) {
  const std::string m = testing::fixture_dir("tiny-llama32");
  for (const char* mode : {"", " --sequential"}) {
    auto j = run_json("bench throughput --model " + m + " --max-model-len 1024 --num-prompts 12 --input-len 40 --output-len 9 --json" + mode);
    ASSERT_TRUE(j.is_object());
    EXPECT_EQ(j["num_prompts"], 12);
    EXPECT_EQ(j["input_tokens"], 12 * 40);
    EXPECT_EQ(j["output_tokens"], 12 * 9);
    EXPECT_GT(j["output_tokens_per_s"].get<double>(), 0);
    EXPECT_NEAR(j["requests_per_s"].get<double>() * j["elapsed_s"].get<double>(), 12, 1e-6);
  }
}

TEST(BenchCli, LatencyReportsTtftAndDecodeRate) {
  auto j = run_json("bench latency --model " + testing::fixture_dir("tiny-llama3") +
                    " --max-model-len 2048 --input-len 300 --output-len 16 --num-iters 2 --json"
                    " --roofline-weight-gb 0.0047 --roofline-bandwidth-tbs 0.01");
  ASSERT_TRUE(j.is_object());
  EXPECT_GT(j["ttft_s_median"].get<double>(), 0);
  EXPECT_GT(j["decode_tok_per_s"].get<double>(), 0);
  EXPECT_NEAR(j["roofline_tok_per_s"].get<double>(), 10.0 / 0.0047 * 1e3 / 1e3, 1e-6);
}

TEST(BenchCli, SpeculationCountersAreReported) {
  const std::string m = testing::fixture_dir("tiny-llama32");
  // The target as its own draft: every greedy draft token is accepted.
  auto j = run_json("bench latency --model " + m + " --max-model-len 1024 --input-len 40 --output-len 24" +
                    " --num-iters 1 --num-iters-warmup 0 --json --speculative-config " +
                    "'{\"method\": \"draft\", \"model\": \"" + m +
                    "\", \"num_speculative_tokens\": 3, \"adaptive\": false}'");
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("speculative")) << j.dump();
  const auto& s = j["speculative"];
  EXPECT_GT(s["draft_tokens"].get<int64_t>(), 0);
  EXPECT_EQ(s["accepted_tokens"].get<int64_t>(), s["draft_tokens"].get<int64_t>());
  EXPECT_DOUBLE_EQ(s["acceptance_rate"].get<double>(), 1.0);
  EXPECT_EQ(s["final_k"].get<int>(), 3);
  // Off: no field.
  auto off = run_json("bench latency --model " + m + " --max-model-len 1024 --input-len 40 --output-len 4" +
                      " --num-iters 1 --num-iters-warmup 0 --json");
  ASSERT_TRUE(off.is_object());
  EXPECT_FALSE(off.contains("speculative"));
}

TEST(BenchCli, ForcedAcceptanceWithDummyTargetAndDraft) {
  // Benchmarks of model shapes without checkpoints: dummy target and draft from config.json
  // files; every draft accepted by force.
  const std::string cfg = testing::fixture_dir("tiny-llama32") + "/config.json";
  auto j = run_json("bench latency --load-format dummy --model " + cfg +
                    " --max-model-len 512 --input-len 16 --output-len 24 --num-iters 1 --num-iters-warmup 0 --json" +
                    " --speculative-config '{\"method\": \"draft\", \"model\": \"" + cfg +
                    "\", \"num_speculative_tokens\": 3, \"adaptive\": false, \"force_acceptance_rate\": 1.0}'");
  ASSERT_TRUE(j.is_object());
  ASSERT_TRUE(j.contains("speculative")) << j.dump();
  EXPECT_GT(j["speculative"]["draft_tokens"].get<int64_t>(), 0);
  EXPECT_DOUBLE_EQ(j["speculative"]["acceptance_rate"].get<double>(), 1.0);
}

TEST(BenchCli, UnknownBenchmarkIsAUsageError) {
  std::string out;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " bench nonsense", &out), 2);
  EXPECT_NE(out.find("unknown benchmark"), std::string::npos);
}

}  // namespace
}  // namespace lancet
