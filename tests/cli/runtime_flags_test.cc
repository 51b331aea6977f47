// The engine flags every model-running command shares (src/cli/runtime_flags.cc), through the
// lancet binary: what --async-scheduling's spellings (flag, negation, the =value form a config
// file writes) and its absence select, as the runtime reports it at start.
#include <gtest/gtest.h>

#include <string>

#include "test_paths.h"

namespace lancet {
namespace {

std::string start_log(const std::string& flags) {
  std::string out;
  const std::string cmd = testing::lancet_binary() + " generate --model " + testing::fixture_dir("tiny-llama32") +
                          " --prompt-ids 5,6,7 --max-tokens 2 --ignore-eos " + flags + " 2>&1";
  EXPECT_EQ(testing::run_command(cmd, &out), 0) << flags << ": " << out;
  return out;
}

TEST(RuntimeFlags, AsyncSchedulingDefaultsByBackendAndFollowsEverySpelling) {
  struct Case {
    const char* flags;
    const char* line;
  };
  for (const Case& c : {Case{"", "asynchronous scheduling off"},  // the CPU backend's default
                        Case{"--async-scheduling", "asynchronous scheduling on"},
                        Case{"--async-scheduling=true", "asynchronous scheduling on"},
                        Case{"--no-async-scheduling", "asynchronous scheduling off"},
                        Case{"--async-scheduling=false", "asynchronous scheduling off"}}) {
    const std::string log = start_log(c.flags);
    const size_t at = log.find(c.line);
    ASSERT_NE(at, std::string::npos) << c.flags << ": " << log;
    // Given flags are not reported as chosen.
    const bool chosen = log.compare(at + std::string(c.line).size(), 9, " (chosen)") == 0;
    EXPECT_EQ(chosen, std::string(c.flags).empty()) << c.flags << ": " << log;
  }
}

}  // namespace
}  // namespace lancet
