// `lancet generate --prompts-file` on the default model: every prompt is submitted at once,
// and each output line (in input order) equals a single-prompt `lancet generate` of the same
// prompt and settings; bad lines are errors that name their line.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace lancet {
namespace {

using nlohmann::json;

std::string generate(const std::string& args) { return testing::lancet_binary() + " generate --threads 2 " + args; }

// One prompt through the single-prompt path, as JSON.
json single_run(const std::string& model, const std::string& prompt_flag, const std::string& sampling) {
  std::string out;
  EXPECT_EQ(testing::run_command(generate("--model " + model + " " + prompt_flag + " " + sampling +
                                          " --json 2>/dev/null"),
                                 &out),
            0)
      << out;
  return json::parse(out, nullptr, false);
}

TEST(GeneratePromptsFile, OutputInInputOrderEqualsSinglePromptRuns) {
  const std::string model = testing::default_model();
  ASSERT_FALSE(model.empty()) << "default model missing: run tools/fetch_model.sh";
  const std::string path = testing::make_temp_dir() + "/prompts.jsonl";
  {
    std::ofstream f(path);
    f << R"({"prompt": "The capital of France is", "max_tokens": 10})" << "\n"
      << R"({"prompt_ids": [1, 504, 3458, 282], "max_tokens": 6, "ignore_eos": true})" << "\n"
      << "\n"  // blank lines are skipped but still counted
      << R"({"prompt": "Tell me a story about a cat.", "max_tokens": 9, "temperature": 0.8, "seed": 7})" << "\n"
      << R"({"prompt": "The capital of France is", "max_tokens": 10, "stop": "."})" << "\n"
      << R"({"prompt": "Hello", "max_tokens": 4})" << "\n";
  }
  std::string out;
  ASSERT_EQ(testing::run_command(generate("--model " + model + " --prompts-file " + path +
                                          " --temperature 0 --max-tokens 32 2>/dev/null"),
                                 &out),
            0)
      << out;
  std::vector<json> lines;
  std::istringstream in(out);
  for (std::string l; std::getline(in, l);) lines.push_back(json::parse(l));
  ASSERT_EQ(lines.size(), 5u) << out;
  const std::vector<int> line_numbers = {1, 2, 4, 5, 6};
  for (size_t i = 0; i < lines.size(); ++i) {
    EXPECT_EQ(lines[i]["index"], i) << out;
    EXPECT_EQ(lines[i]["line"], line_numbers[i]) << out;
  }
  const std::vector<std::pair<std::string, std::string>> singles = {
      {"--prompt 'The capital of France is'", "--temperature 0 --max-tokens 10"},
      {"--prompt-ids 1,504,3458,282", "--temperature 0 --max-tokens 6 --ignore-eos"},
      {"--prompt 'Tell me a story about a cat.'", "--temperature 0.8 --seed 7 --max-tokens 9"},
      {},  // the stop-string line, checked against line 0 below
      {"--prompt Hello", "--temperature 0 --max-tokens 4"}};
  for (size_t i = 0; i < lines.size(); ++i) {
    if (singles[i].first.empty()) continue;
    const json one = single_run(model, singles[i].first, singles[i].second);
    ASSERT_FALSE(one.is_discarded());
    EXPECT_EQ(lines[i]["prompt_ids"], one["prompt_ids"]) << i;
    EXPECT_EQ(lines[i]["ids"], one["ids"]) << i;
    EXPECT_EQ(lines[i]["text"], one["text"]) << i;
    EXPECT_EQ(lines[i]["finish_reason"], one["finish_reason"]) << i;
  }
  EXPECT_EQ(lines[1]["ids"].size(), 6u);
  // The same prompt with stop ".": the greedy text up to its first "." (which it has).
  const std::string full = lines[0]["text"];
  const size_t dot = full.find('.');
  ASSERT_NE(dot, std::string::npos) << full;
  EXPECT_EQ(lines[3]["text"], full.substr(0, dot));
  EXPECT_EQ(lines[3]["finish_reason"], "stop");
}

TEST(GeneratePromptsFile, BadLinesNameTheirLine) {
  const std::string model = testing::default_model();
  ASSERT_FALSE(model.empty());
  const std::string dir = testing::make_temp_dir();
  struct Case {
    std::string second_line;
    std::string message;
  };
  // The first four fail before the model loads; the last two once it is known.
  for (const Case& c : std::vector<Case>{
           {R"({"prompt": "x", "max_tokens": "ten"})", ":2: max_tokens must be an integer"},
           {R"({"prompt": "x", "max_token": 5})", ":2: unknown field 'max_token'"},
           {R"({"prompt": "x")", ":2: not valid JSON"},
           {R"({"prompt": "x", "prompt_ids": [1]})", ":2: give exactly one of prompt and prompt_ids"},
           {R"({"prompt": "x", "temperature": -1})", ":2: temperature must be in [0, 100]"},
           {R"({"prompt_ids": [1, 99999999]})", ":2: prompt_ids: token id 99999999 is outside the vocabulary"}}) {
    const std::string path = dir + "/bad.jsonl";
    std::ofstream(path) << R"({"prompt": "fine"})" << "\n" << c.second_line << "\n";
    std::string out;
    EXPECT_EQ(testing::run_command(generate("--model " + model + " --prompts-file " + path), &out), 1) << out;
    EXPECT_NE(out.find(path + c.message), std::string::npos) << out;
  }
  std::string out;
  EXPECT_EQ(testing::run_command(generate("--model " + model + " --prompts-file " + dir + "/none.jsonl"), &out), 1);
  EXPECT_NE(out.find("cannot open prompts file"), std::string::npos) << out;
  EXPECT_NE(testing::run_command(generate("--model " + model + " --prompts-file x --prompt y"), &out), 0) << out;
  EXPECT_NE(out.find("excludes"), std::string::npos) << out;
}

}  // namespace
}  // namespace lancet
