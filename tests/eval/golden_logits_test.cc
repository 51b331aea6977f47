// Every HF fixture (fixtures/README.md) through the CPU backend: logits within 1e-4 of
// max |ref| at every stored position, identical top-1, and the greedy continuation identical
// for every step. Prompts up to 2500 tokens always run; the 9000-token cases (past the
// original context, where rope scaling matters) take ~15 s each on 2 cores and run in the
// *Long tests.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdio>

#include "backend/backend.h"
#include "eval/golden_eval.h"
#include "io/model_source.h"
#include "test_paths.h"

namespace lancet {
namespace {

struct EvalSetup {
  int64_t prefill_chunk = 0;
  int64_t block_size = 16;
};

void check_fixture(const std::string& name, bool long_cases, const EvalSetup& setup = {}) {
  const std::string dir = testing::fixture_dir(name);
  const std::string golden_path = dir + "/golden.safetensors";
  auto src = open_model_source(dir);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  auto cases = read_golden_cases(golden_path);
  ASSERT_TRUE(cases.ok()) << cases.status().to_string();
  auto golden = SafetensorsFile::open(golden_path);
  ASSERT_TRUE(golden.ok());
  LlamaModelOptions mo;
  mo.max_model_len = 9100;
  auto model = LlamaModel::create(**src, **be, mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  GoldenEvalOptions eo;
  eo.prefill_chunk = setup.prefill_chunk;
  eo.block_size = setup.block_size;
  int ran = 0;
  for (const GoldenCase& c : *cases) {
    if ((c.prompt_len > 2500) != long_cases) continue;
    auto r = eval_golden_case(**model, **be, **golden, c, eo);
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    std::printf("  %s/%s len %lld: rel_err %.3e cos %.7f top1 %lld/%lld greedy %lld/%lld prefill %.3fs decode %.3fs\n",
                name.c_str(), c.name.c_str(), (long long)r->prompt_len, r->rel_err, r->min_cosine,
                (long long)r->top1_agree, (long long)r->num_positions, (long long)r->greedy_match,
                (long long)r->greedy_total, r->prefill_seconds, r->decode_seconds);
    EXPECT_LE(r->rel_err, 1e-4) << name << "/" << c.name;
    EXPECT_GE(r->min_cosine, 0.99999) << name << "/" << c.name;
    EXPECT_EQ(r->top1_agree, r->num_positions) << name << "/" << c.name;
    EXPECT_EQ(r->greedy_match, r->greedy_total) << name << "/" << c.name;
    EXPECT_GT(r->greedy_total, 0);
    ++ran;
  }
  EXPECT_GT(ran, 0) << "no cases ran for " << name;
}

TEST(GoldenLogits, TinyLlama3Sharded) { check_fixture("tiny-llama3", false); }
TEST(GoldenLogits, TinyLlama32Tied) { check_fixture("tiny-llama32", false); }
TEST(GoldenLogits, TinyGqa8) { check_fixture("tiny-gqa8", false); }
TEST(GoldenLogits, TinyRopeLinear) { check_fixture("tiny-rope-linear", false); }
TEST(GoldenLogits, TinyRopeYarn) { check_fixture("tiny-rope-yarn", false); }
// Chunked prefill (chunk offsets in the cache) and single-token blocks give the same answers.
TEST(GoldenLogits, ChunkedPrefillBlockSize1) { check_fixture("tiny-llama3", false, {97, 1}); }
TEST(GoldenLogits, ChunkedPrefillYarn) { check_fixture("tiny-rope-yarn", false, {256, 16}); }

TEST(GoldenLogitsLong, TinyLlama3) { check_fixture("tiny-llama3", true, {2048, 16}); }
TEST(GoldenLogitsLong, TinyLlama32) { check_fixture("tiny-llama32", true); }
TEST(GoldenLogitsLong, TinyGqa8) { check_fixture("tiny-gqa8", true); }
TEST(GoldenLogitsLong, TinyRopeLinear) { check_fixture("tiny-rope-linear", true); }
TEST(GoldenLogitsLong, TinyRopeYarn) { check_fixture("tiny-rope-yarn", true); }

}  // namespace
}  // namespace lancet
