// Every subcommand answers a bad flag with a usage error (exit 2, docs/CLI.md) and --help with 0,
// whatever CLI11 would return on its own.
#include <gtest/gtest.h>

#include <string>

#include "test_paths.h"

namespace lancet {
namespace {

TEST(CliUsage, UnknownFlagsAreUsageErrorsAndHelpIsZero) {
  for (const char* cmd : {"generate", "run", "bench latency", "bench serve", "serve", "inspect", "verify",
                          "quantize", "merge-lora", "eval-logits", "eval-precision", "eval-needle", "tokenize", "detokenize",
                          "chat-template", "run-batch"}) {
    std::string out;
    const std::string base = testing::lancet_binary() + " " + cmd;
    EXPECT_EQ(testing::run_command(base + " --no-such-flag-here", &out), 2) << cmd << ": " << out;
    // CLI11's message (the unknown flag, or a required one checked first) and its pointer to --help.
    EXPECT_NE(out.find("--help"), std::string::npos) << cmd << ": " << out;
    EXPECT_EQ(testing::run_command(base + " --help", &out), 0) << cmd << ": " << out;
    EXPECT_NE(out.find("--"), std::string::npos) << cmd << ": --help lists the options";
  }
}

}  // namespace
}  // namespace lancet
