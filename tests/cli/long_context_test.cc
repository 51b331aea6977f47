// Behaviour at the context limit and the long-context tooling, through the lancet binary:
// the server's 400 for prompt + max_tokens past max_model_len, --max-model-len past the
// trained length (refused without --allow-long-max-model-len, a warning with it), the KV and
// memory fields of `bench latency --json`, and bench/long_context/run.sh on a tiny config.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace lancet {
namespace {

namespace fs = std::filesystem;
using testing::fixture_dir;
using testing::lancet_binary;
using testing::run_command;

nlohmann::json last_json_line(const std::string& out) {
  const size_t nl = out.find_last_of('\n', out.size() >= 2 ? out.size() - 2 : 0);
  return nlohmann::json::parse(nl == std::string::npos ? out : out.substr(nl + 1), nullptr, false);
}

TEST(LongContextCli, ServerRejectsPromptPlusMaxTokensPastMaxModelLenWith400) {
  std::string out;
  const int rc = run_command(testing::python() + " " + testing::source_dir() + "/tests/cli/context_limit_check.py " +
                                 lancet_binary() + " " + fixture_dir("tiny-llama32") + " 128 2>&1",
                             &out);
  ASSERT_EQ(rc, 0) << out;
  auto j = last_json_line(out);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["fits"]["status"], 200) << j.dump();
  EXPECT_EQ(j["fits"]["body"]["usage"]["completion_tokens"], 10);
  for (const char* name : {"one_over", "prompt_too_long"}) {
    const auto& c = j[name];
    EXPECT_EQ(c["status"], 400) << name << ": " << c.dump();
    EXPECT_EQ(c["body"]["error"]["code"], "context_length_exceeded") << c.dump();
    EXPECT_NE(c["body"]["error"]["message"].get<std::string>().find("maximum context length is 128 tokens"),
              std::string::npos)
        << c.dump();
  }
  EXPECT_NE(j["one_over"]["body"]["error"]["message"].get<std::string>().find("you requested 129 tokens"),
            std::string::npos);
  // No max_tokens: the default shrinks to what is left of the context instead of failing.
  EXPECT_EQ(j["default_max_tokens"]["status"], 200) << j["default_max_tokens"].dump();
  EXPECT_EQ(j["default_max_tokens"]["body"]["usage"]["completion_tokens"], 3);
}

// A copy of a fixture's config with a short trained context, for --load-format dummy.
std::string short_context_config(int64_t trained) {
  std::ifstream in(fixture_dir("tiny-llama32") + "/config.json");
  nlohmann::json c = nlohmann::json::parse(in);
  c["max_position_embeddings"] = trained;
  const std::string path = testing::make_temp_dir() + "/config.json";
  std::ofstream(path) << c.dump(2);
  return path;
}

TEST(LongContextCli, MaxModelLenPastTrainedLengthNeedsTheFlagAndWarns) {
  const std::string cfg = short_context_config(512);
  const std::string base = lancet_binary() + " bench latency --model " + cfg +
                           " --load-format dummy --threads 2 --input-len 600 --output-len 2 --num-iters 1"
                           " --num-iters-warmup 0 --max-model-len 1024 --json";
  std::string out;
  EXPECT_EQ(run_command(base + " 2>&1", &out), 1) << out;
  EXPECT_NE(out.find("past the model's trained length 512"), std::string::npos) << out;
  EXPECT_NE(out.find("--allow-long-max-model-len"), std::string::npos) << out;
  ASSERT_EQ(run_command(base + " --allow-long-max-model-len 2>&1", &out), 0) << out;
  EXPECT_NE(out.find("exceeds the trained length 512"), std::string::npos) << out;
  auto j = last_json_line(out);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["max_model_len"], 1024);
}

TEST(LongContextCli, BenchLatencyReportsKvBlocksAndConcurrency) {
  // tiny-llama3: 2 layers x 1 KV head x head_dim 128, f32 -> a 16-token block holds
  // 2 (K, V) * 2 * 16 * 128 * 4 = 32 KiB; 4 MiB of cache = 128 blocks; a 300 + 4 token
  // sequence takes 19 blocks, so 6 fit at once.
  std::string out;
  const std::string m = fixture_dir("tiny-llama3");
  ASSERT_EQ(run_command(lancet_binary() + " bench latency --model " + m +
                            " --threads 2 --max-model-len 512 --kv-cache-memory 4194304 --input-len 300"
                            " --output-len 4 --num-iters 1 --num-iters-warmup 0 --json 2>/dev/null",
                        &out),
            0)
      << out;
  auto j = last_json_line(out);
  ASSERT_TRUE(j.is_object()) << out;
  EXPECT_EQ(j["batch_size"], 1);
  EXPECT_EQ(j["kv_cache"]["dtype"], "f32") << j.dump();
  EXPECT_EQ(j["kv_cache"]["block_size"], 16);
  EXPECT_EQ(j["kv_cache"]["num_blocks"], 128);
  EXPECT_EQ(j["kv_cache"]["bytes"], 4194304);
  EXPECT_EQ(j["kv_cache"]["bytes_per_token"], 2048);
  EXPECT_EQ(j["kv_cache"]["bytes_per_seq"], 19 * 32768);
  EXPECT_EQ(j["max_concurrent_seqs"], 6);
  // Weights as loaded: the checkpoint's tensors (f32 shards here), within its file sizes.
  int64_t files = 0;
  for (const auto& e : fs::directory_iterator(m))
    if (e.path().extension() == ".safetensors") files += static_cast<int64_t>(e.file_size());
  EXPECT_GT(j["weight_bytes"].get<int64_t>(), files * 9 / 10);
  EXPECT_LE(j["weight_bytes"].get<int64_t>(), files);
  EXPECT_GT(j["peak_rss_bytes"].get<int64_t>(), 0);
}

TEST(LongContextCli, BenchLatencyMeasuresEveryListedLengthWithOneLoad) {
  // Same cache as above (128 blocks of 16 tokens): 100 + 4 tokens take 7 blocks (18 fit),
  // 300 + 4 take 19 (6 fit). One JSON line per length, in the order given.
  std::string out;
  const std::string m = fixture_dir("tiny-llama3");
  ASSERT_EQ(run_command(lancet_binary() + " bench latency --model " + m +
                            " --threads 2 --max-model-len 512 --kv-cache-memory 4194304 --input-len 300,100"
                            " --output-len 4 --num-iters 1 --num-iters-warmup 0 --json 2>/dev/null",
                        &out),
            0)
      << out;
  std::vector<nlohmann::json> rows;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);)
    if (!line.empty() && line[0] == '{') rows.push_back(nlohmann::json::parse(line));
  ASSERT_EQ(rows.size(), 2u) << out;
  EXPECT_EQ(rows[0]["input_len"], 300);
  EXPECT_EQ(rows[0]["max_concurrent_seqs"], 6);
  EXPECT_EQ(rows[1]["input_len"], 100);
  EXPECT_EQ(rows[1]["max_concurrent_seqs"], 18);
  EXPECT_EQ(rows[1]["kv_cache"]["bytes_per_seq"], 7 * 32768);
  for (const auto& r : rows) {
    EXPECT_GT(r["ttft_s_median"].get<double>(), 0.0) << r.dump();
    EXPECT_EQ(r["prefix_cache_hit_tokens"], 0) << r.dump();
  }
  // Lengths in rising order: each prompt is new, not an extension of the previous length's
  // (whose blocks the prefix cache still holds).
  ASSERT_EQ(run_command(lancet_binary() + " bench latency --model " + m +
                            " --threads 2 --max-model-len 512 --kv-cache-memory 4194304 --input-len 100,300"
                            " --output-len 2 --num-iters 2 --num-iters-warmup 1 --json 2>/dev/null",
                        &out),
            0)
      << out;
  std::istringstream rising(out);
  int n = 0;
  for (std::string line; std::getline(rising, line);)
    if (!line.empty() && line[0] == '{') {
      EXPECT_EQ(nlohmann::json::parse(line)["prefix_cache_hit_tokens"], 0) << line;
      ++n;
    }
  EXPECT_EQ(n, 2) << out;
  // A malformed list is refused before anything loads.
  EXPECT_EQ(run_command(lancet_binary() + " bench latency --model " + m + " --input-len 100,,300 2>&1", &out), 2);
  EXPECT_NE(out.find("--input-len takes positive integers"), std::string::npos) << out;
}

TEST(LongContextCli, RunScriptPrintsTheTableForEveryLength) {
  const std::string dir = testing::make_temp_dir();
  std::string out;
  const int rc = run_command(testing::source_dir() + "/bench/long_context/run.sh --lancet " + lancet_binary() +
                                 " --model " + fixture_dir("tiny-llama3") + "/config.json --load-format dummy"
                                 " --threads 2 --kv-cache-memory 8388608 --kv-cache-dtype bfloat16"
                                 " --lengths 256,1024 --output-len 4 --out " + dir + " 2>&1",
                             &out);
  ASSERT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("decode tok/s"), std::string::npos) << out;
  EXPECT_NE(out.find("max seqs"), std::string::npos) << out;
  // bf16 blocks are 16 KiB: 8 MiB = 512 blocks; 260 tokens -> 17 blocks -> 30 sequences,
  // 1028 tokens -> 65 blocks -> 7 sequences.
  std::ifstream f256(dir + "/256.json"), f1024(dir + "/1024.json");
  auto j256 = nlohmann::json::parse(f256, nullptr, false);
  auto j1024 = nlohmann::json::parse(f1024, nullptr, false);
  ASSERT_TRUE(j256.is_object() && j1024.is_object()) << out;
  EXPECT_EQ(j256["max_concurrent_seqs"], 30);
  EXPECT_EQ(j1024["max_concurrent_seqs"], 7);
  EXPECT_EQ(j1024["max_model_len"], 1028);
  EXPECT_EQ(j1024["kv_cache"]["dtype"], "bf16");
  // The rows, in order of length, with those counts in the last numeric column.
  const size_t r256 = out.find("\n     256"), r1024 = out.find("\n    1024");
  ASSERT_NE(r256, std::string::npos) << out;
  ASSERT_NE(r1024, std::string::npos) << out;
  EXPECT_LT(r256, r1024);
}

}  // namespace
}  // namespace lancet
