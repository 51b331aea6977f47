// `lancet bench throughput/latency` run end to end on a fixture and report consistent numbers
// (speed itself is measured in docs/BENCHMARKS.md, not asserted here).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <fstream>
#include <string>
#include <vector>

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

// Token count of text under the default model's tokenizer (no BOS: SmolLM2 adds none).
int64_t token_count(const std::string& dir, const std::string& text) {
  const std::string path = dir + "/text.txt";
  std::ofstream(path) << text;
  std::string out;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " tokenize --json --model " + testing::default_model() +
                                     " < " + path + " 2>/dev/null",
                                 &out),
            0);
  const auto j = nlohmann::json::parse(out, nullptr, false);
  return j.is_array() ? static_cast<int64_t>(j.size()) : -1;
}

// A ShareGPT file read as `vllm bench` reads it: the first turn is the prompt, the second
// turn's token count the output length; conversations with one turn, fewer than 4 prompt or
// output tokens, or more than 1024 prompt tokens are left out.
TEST(BenchCli, ShareGptDatasetAsVllmReadsIt) {
  const std::string model = testing::default_model();
  ASSERT_FALSE(model.empty()) << "the default model is missing (make model)";
  const std::string dir = testing::make_temp_dir();
  const std::vector<std::pair<std::string, std::string>> kept = {
      {"Write a short poem about the sea and the wind over the harbour.", "The sea is grey, the wind is cold, the boats come home."},
      {"What is the capital of France, and why is it famous?", "Paris is the capital of France, famous for its art and food."},
      {"List three colours that appear in a rainbow please.", "Red, orange and yellow are three of them."}};
  std::string long_prompt;
  for (int i = 0; i < 1200; ++i) long_prompt += "word ";
  nlohmann::json data = nlohmann::json::array();
  auto conv = [](const std::string& a, const std::string& b) {
    return nlohmann::json{{"id", "x"}, {"conversations", {{{"from", "human"}, {"value", a}}, {{"from", "gpt"}, {"value", b}}}}};
  };
  for (const auto& [a, b] : kept) data.push_back(conv(a, b));
  data.push_back({{"id", "one turn"}, {"conversations", {{{"from", "human"}, {"value", "Only a question here, no answer."}}}}});
  data.push_back(conv("Hi", "Hello there, how can I help you today?"));  // prompt under 4 tokens
  data.push_back(conv("Tell me something interesting about owls.", "Ok"));  // output under 4 tokens
  data.push_back(conv(long_prompt, "That is a lot of words."));              // prompt over 1024 tokens
  const std::string path = dir + "/sharegpt.json";
  std::ofstream(path) << data.dump();
  int64_t in = 0, out = 0;
  for (const auto& [a, b] : kept) {
    in += token_count(dir, a);
    out += token_count(dir, b);
  }
  const std::string base = "bench throughput --model " + model + " --max-model-len 2048 --json --dataset " + path;
  auto j = run_json(base + " --num-prompts 10");
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["num_prompts"], 3);
  EXPECT_EQ(j["input_tokens"], in);
  EXPECT_EQ(j["output_tokens"], out);  // bench ignores EOS: every output runs to its length
  // A fixed output length replaces the second turn's (the "Ok" answer then counts too), and
  // --num-prompts caps the sample.
  auto f = run_json(base + " --num-prompts 10 --sharegpt-output-len 5");
  ASSERT_TRUE(f.is_object());
  EXPECT_EQ(f["num_prompts"], 4);
  EXPECT_EQ(f["output_tokens"], 4 * 5);
  auto two = run_json(base + " --num-prompts 2 --sharegpt-output-len 5");
  ASSERT_TRUE(two.is_object());
  EXPECT_EQ(two["num_prompts"], 2);
  // JSON lines with an output length per prompt.
  const std::string lines = dir + "/prompts.jsonl";
  std::ofstream(lines) << "{\"prompt_ids\": [100, 200, 300, 400], \"output_len\": 3}\n\n{\"prompt_ids\": [5, 6]}\n";
  auto l = run_json("bench throughput --model " + model + " --max-model-len 2048 --json --output-len 7 --num-prompts 5"
                    " --dataset " + lines);
  ASSERT_TRUE(l.is_object());
  EXPECT_EQ(l["num_prompts"], 2);
  EXPECT_EQ(l["input_tokens"], 6);
  EXPECT_EQ(l["output_tokens"], 3 + 7);
  // Bad input: a clear error, exit status not 0.
  std::string err;
  EXPECT_NE(testing::run_command(testing::lancet_binary() + " bench throughput --model " + model +
                                     " --dataset-name csv --dataset " + path + " 2>&1",
                                 &err),
            0);
  EXPECT_NE(err.find("--dataset-name must be auto, jsonl or sharegpt"), std::string::npos) << err;
  std::ofstream(dir + "/bad.json") << "[{\"conversations\": [{\"value\": \"a\"}]}]";
  EXPECT_NE(testing::run_command(testing::lancet_binary() + " bench throughput --model " + model + " --dataset " + dir +
                                     "/bad.json 2>&1",
                                 &err),
            0);
  EXPECT_NE(err.find("no conversation passes the ShareGPT length filters"), std::string::npos) << err;
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
