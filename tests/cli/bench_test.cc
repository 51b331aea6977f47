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

TEST(BenchCli, UnknownBenchmarkIsAUsageError) {
  std::string out;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " bench nonsense", &out), 2);
  EXPECT_NE(out.find("unknown benchmark"), std::string::npos);
}

}  // namespace
}  // namespace lancet
