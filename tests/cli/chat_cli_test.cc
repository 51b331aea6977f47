// The default model answers through `lancet run` (interactive chat, driven through stdin here)
// and `lancet generate --chat` with its own chat template.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace lancet {
namespace {

TEST(ChatCli, RunAnswersTheCapitalOfFrance) {
  const std::string model = testing::default_model();
  ASSERT_FALSE(model.empty()) << "default model missing: run tools/fetch_model.sh";
  std::string out;
  const int rc = testing::run_command(
      "printf 'What is the capital of France?\\n/reset\\nWhat is the capital of France?\\n' | " +
          testing::lancet_binary() + " run --model " + model +
          " --system 'You are a helpful assistant.' --temperature 0 --max-tokens 40 2>/dev/null",
      &out);
  ASSERT_EQ(rc, 0) << out;
  // The same answer after /reset: the conversation starts over (same prompt, greedy).
  const std::string answer = "The capital of France is Paris.";
  const size_t first = out.find(answer);
  ASSERT_NE(first, std::string::npos) << out;
  EXPECT_NE(out.find(answer, first + answer.size()), std::string::npos) << out;
}

TEST(ChatCli, GenerateChatJsonHasTextIdsAndTimings) {
  const std::string model = testing::default_model();
  ASSERT_FALSE(model.empty());
  std::string out;
  ASSERT_EQ(testing::run_command(testing::lancet_binary() + " generate --model " + model +
                                     " --chat --prompt 'What is the capital of France?' --temperature 0.2"
                                     " --top-p 0.9 --seed 1 --max-tokens 40 --json 2>/dev/null",
                                 &out),
            0)
      << out;
  auto j = nlohmann::json::parse(out);
  EXPECT_NE(j["text"].get<std::string>().find("Paris"), std::string::npos) << out;
  EXPECT_EQ(j["finish_reason"], "stop");
  EXPECT_EQ(j["ids"].back(), 2);  // <|im_end|>, SmolLM2's end of turn
  EXPECT_GT(j["timings"]["decode_tok_per_s"].get<double>(), 0);
}

}  // namespace
}  // namespace lancet
