// `lancet chat-template` on the Llama 3 tokenizer's own template: --continue-final-message ends
// right after the final assistant text (no <|eot_id|>), the closed rendering is that plus the
// template's ending, and with --add-generation-prompt it is a clear error.
#include <gtest/gtest.h>

#include <fstream>
#include <string>

#include "test_paths.h"

namespace lancet {
namespace {

TEST(ChatTemplateCli, ContinueFinalMessageLeavesTheAssistantTurnOpen) {
  const std::string dir = testing::make_temp_dir();
  std::ofstream(dir + "/m.json") << R"([{"role": "user", "content": "Count to ten."},
                                        {"role": "assistant", "content": "One, two,"}])";
  const std::string base = testing::lancet_binary() + " chat-template --model " + testing::shared_dir() +
                           "/models/llama3-tokenizer < " + dir + "/m.json";
  std::string open, closed, both;
  ASSERT_EQ(testing::run_command(base + " --continue-final-message 2>&1", &open), 0) << open;
  ASSERT_EQ(testing::run_command(base + " 2>&1", &closed), 0) << closed;
  const std::string tail = "<|start_header_id|>assistant<|end_header_id|>\n\nOne, two,";
  ASSERT_GE(open.size(), tail.size());
  EXPECT_EQ(open.substr(open.size() - tail.size()), tail) << open;
  EXPECT_EQ(closed, open + "<|eot_id|>") << closed;
  EXPECT_EQ(testing::run_command(base + " --continue-final-message --add-generation-prompt 2>&1", &both), 1);
  EXPECT_NE(both.find("continue_final_message"), std::string::npos) << both;
}

}  // namespace
}  // namespace lancet
