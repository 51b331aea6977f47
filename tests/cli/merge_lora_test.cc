// `lancet merge-lora` end to end on a fixture checkpoint, checked by numpy
// (tests/cli/merge_lora_check.py: the merged weights bit for bit, rslora, refusals).
#include <gtest/gtest.h>

#include <string>

#include "test_paths.h"

namespace lancet {
namespace {

TEST(MergeLoraCli, MergedWeightsEqualNumpyAndBadAdaptersAreRefused) {
  const std::string work = testing::make_temp_dir();
  std::string out;
  const int rc = testing::run_command(testing::python() + " " + testing::source_dir() +
                                          "/tests/cli/merge_lora_check.py " + testing::lancet_binary() + " " +
                                          testing::fixture_dir("tiny-llama32") + " " + work + " 2>&1",
                                      &out);
  EXPECT_EQ(rc, 0) << out;
  EXPECT_NE(out.find("merge_lora_check: all checks passed"), std::string::npos) << out;
}

}  // namespace
}  // namespace lancet
