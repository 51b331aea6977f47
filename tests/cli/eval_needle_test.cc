// `lancet eval-needle` on the default model (SmolLM2-135M-Instruct, trained to 8192 tokens):
// the report's structure and exact field values, lengths past max_model_len reported as
// skipped with their reason, and the needle found in short contexts.
#include <gtest/gtest.h>

#include <cctype>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace lancet {
namespace {

// `lancet eval-needle` on the default model with these flags (and --json): exit status 0,
// its printed table in *out, the JSON report returned (not an object when it did not parse).
nlohmann::json run_needle(const std::string& flags, std::string* out) {
  const std::string model = testing::default_model();
  EXPECT_FALSE(model.empty()) << "default model missing (tools/fetch_model.sh)";
  const std::string json_path = testing::make_temp_dir() + "/needle.json";
  const int rc = testing::run_command(testing::lancet_binary() + " eval-needle --model " + model + " --threads 2 " +
                                          flags + " --json " + json_path + " 2>&1",
                                      out);
  EXPECT_EQ(rc, 0) << *out;
  std::ifstream f(json_path);
  return nlohmann::json::parse(f, nullptr, false);
}

TEST(EvalNeedleCli, ReportsEveryCaseAndFindsTheNeedleInShortContexts) {
  std::string out;
  const nlohmann::json j = run_needle("--lengths 1k,2k,16k --depths 0,0.5,1", &out);
  ASSERT_TRUE(j.is_object()) << out;
  // The table: one row per length, the skip reason under the 16k row, the summary line.
  EXPECT_NE(out.find("needle in a haystack: SmolLM2-135M-Instruct.Q4_1.gguf (cpu, max_model_len 8192)"),
            std::string::npos)
      << out;
  EXPECT_NE(out.find("16384     -        skipped"), std::string::npos) << out;
  EXPECT_NE(out.find("skipped, 0 errors"), std::string::npos) << out;

  EXPECT_EQ(j["model"], "SmolLM2-135M-Instruct.Q4_1.gguf");
  EXPECT_EQ(j["backend"], "cpu");
  EXPECT_EQ(j["max_model_len"], 8192);
  EXPECT_EQ(j["max_tokens"], 24);
  EXPECT_EQ(j["seed"], 0);
  EXPECT_EQ(j["needle"], "The secret passphrase is <passphrase>.");
  ASSERT_EQ(j["results"].size(), 9u);
  const std::regex pass_shape("[a-z]+-[0-9]{4}");
  const int64_t lengths[] = {1024, 2048, 16384};
  const double depths[] = {0, 0.5, 1};
  int hits_1k = 0, hits_2k = 0, found = 0, exact = 0;
  for (size_t i = 0; i < 9; ++i) {
    const auto& r = j["results"][i];
    const int64_t len = lengths[i / 3];
    EXPECT_EQ(r["length"], len);
    EXPECT_EQ(r["depth"].get<double>(), depths[i % 3]);
    if (len > 8192) {
      EXPECT_EQ(r["status"], "skipped") << r.dump();
      EXPECT_NE(r["reason"].get<std::string>().find("length 16384 is past max_model_len 8192"), std::string::npos)
          << r.dump();
      EXPECT_FALSE(r.contains("answer"));
      continue;
    }
    ASSERT_EQ(r["status"], "ok") << r.dump();
    EXPECT_TRUE(std::regex_match(r["needle"].get<std::string>(), pass_shape)) << r.dump();
    // The prompt fills the length less the answer's tokens, to within one filler sentence.
    const int64_t prompt = r["prompt_tokens"].get<int64_t>();
    EXPECT_LE(prompt, len - 24) << r.dump();
    EXPECT_GT(prompt, len - 24 - 40) << r.dump();
    EXPECT_GE(r["generated_tokens"].get<int64_t>(), 1);
    EXPECT_LE(r["generated_tokens"].get<int64_t>(), 24);
    EXPECT_GT(r["ttft_s"].get<double>(), 0);
    EXPECT_GE(r["time_s"].get<double>(), r["ttft_s"].get<double>());
    // found agrees with the answer text (case-insensitive: "Amber-8755" finds "amber-8755").
    std::string answer = r["answer"].get<std::string>();
    for (char& c : answer) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    EXPECT_EQ(r["found"].get<bool>(), answer.find(r["needle"].get<std::string>()) != std::string::npos) << r.dump();
    if (r["exact"].get<bool>()) EXPECT_TRUE(r["found"].get<bool>());
    found += r["found"].get<bool>();
    exact += r["exact"].get<bool>();
    if (len == 1024) hits_1k += r["found"].get<bool>();
    if (len == 2048) hits_2k += r["found"].get<bool>();
  }
  // SmolLM2-135M finds the needle in short contexts (measured with seed 0: all 3 cases at 2k;
  // at 1k 0 or 1 of 3, which flips with the attention kernel's summation order; its misses
  // keep the digits and garble the word). The assertion keeps a margin for a model this small.
  EXPECT_GE(hits_2k, 2) << out;
  EXPECT_GE(found, 2) << out;
  EXPECT_EQ(j["summary"]["cases"], 9);
  EXPECT_EQ(j["summary"]["run"], 6);
  EXPECT_EQ(j["summary"]["skipped"], 3);
  EXPECT_EQ(j["summary"]["errors"], 0);
  EXPECT_EQ(j["summary"]["found"], found);
  EXPECT_EQ(j["summary"]["exact"], exact);
  EXPECT_EQ(j["summary"]["by_length"]["1024"]["run"], 3);
  EXPECT_EQ(j["summary"]["by_length"]["1024"]["found"], hits_1k);
}

// The smoke test at the default model's trained limit: one case whose prompt fills 8192 tokens
// (prompt + answer budget), run to the end without error. SmolLM2-135M does not find the needle
// that far in, so the answer is not scored here.
TEST(EvalNeedleCli, RunsAtTheDefaultModelsEightKLimit) {
  std::string out;
  const nlohmann::json j = run_needle("--lengths 8k --depths 0.5", &out);
  ASSERT_TRUE(j.is_object()) << out;
  ASSERT_EQ(j["results"].size(), 1u);
  const auto& r = j["results"][0];
  ASSERT_EQ(r["status"], "ok") << r.dump();
  EXPECT_EQ(r["length"], 8192);
  const int64_t prompt = r["prompt_tokens"].get<int64_t>();
  EXPECT_LE(prompt, 8192 - 24) << r.dump();
  EXPECT_GT(prompt, 8192 - 24 - 40) << r.dump();
  EXPECT_GE(r["generated_tokens"].get<int64_t>(), 1);
  EXPECT_FALSE(r["answer"].get<std::string>().empty());
  EXPECT_GT(r["ttft_s"].get<double>(), 0);
  EXPECT_EQ(j["summary"]["errors"], 0);
}

TEST(EvalNeedleCli, BadListsAreUsageErrors) {
  const std::string model = testing::default_model();
  if (model.empty()) FAIL() << "default model missing (tools/fetch_model.sh)";
  std::string out;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " eval-needle --model " + model + " --lengths 8q 2>&1", &out),
            2);
  EXPECT_NE(out.find("--lengths: '8q'"), std::string::npos) << out;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " eval-needle --model " + model + " --depths 2 2>&1", &out),
            2);
  EXPECT_NE(out.find("--depths: '2'"), std::string::npos) << out;
}

}  // namespace
}  // namespace lancet
