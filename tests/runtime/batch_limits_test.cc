// The chosen --max-num-seqs / --max-num-batched-tokens: given values kept, GPU counts from the
// KV capacity at 2048 tokens a sequence (multiples of 8 within [64, 1024]), CPU 64 / 2048, and
// a Runtime reports what it chose.
#include "runtime/batch_limits.h"

#include <gtest/gtest.h>

#include "runtime/runtime.h"
#include "test_paths.h"

namespace lancet {
namespace {

TEST(BatchLimits, GivenValuesAreKept) {
  const BatchLimits l = initial_batch_limits("cuda", 300, 4096);
  EXPECT_EQ(l.max_num_seqs, 300);
  EXPECT_EQ(l.max_num_batched_tokens, 4096);
}

TEST(BatchLimits, ChosenForTheBackend) {
  const BatchLimits gpu = initial_batch_limits("cuda", 0, 0);
  EXPECT_EQ(gpu.max_num_batched_tokens, 8192);
  EXPECT_EQ(gpu.max_num_seqs, 1024);  // the bound the activation reserve is planned for
  const BatchLimits cpu = initial_batch_limits("cpu", 0, 0);
  EXPECT_EQ(cpu.max_num_batched_tokens, 2048);
  EXPECT_EQ(cpu.max_num_seqs, 64);
}

TEST(BatchLimits, GpuSequencesFromTheKvCapacity) {
  // Llama-3-8B on an H200: 54,054 BF16 blocks of 16 tokens hold 422 sequences of 2048 tokens.
  EXPECT_EQ(auto_max_num_seqs("cuda", 54054 * 16), 416);
  EXPECT_EQ(auto_max_num_seqs("cuda", 114258 * 16), 888);  // the FP8 cache
  EXPECT_EQ(auto_max_num_seqs("cuda", 10'000'000), 1024);
  EXPECT_EQ(auto_max_num_seqs("cuda", 4096), 64);
  EXPECT_EQ(auto_max_num_seqs("cpu", 10'000'000), 64);
}

TEST(BatchLimits, RuntimeReportsWhatItChose) {
  RuntimeConfig rc;
  rc.model = testing::fixture_dir("tiny-llama3");
  auto rt = Runtime::create(rc);
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  EXPECT_EQ((*rt)->config().max_num_seqs, 64);
  EXPECT_EQ((*rt)->config().max_num_batched_tokens, 2048);
  rc.max_num_seqs = -1;
  EXPECT_EQ(Runtime::create(rc).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lancet
