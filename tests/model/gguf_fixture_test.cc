// The HF fixtures converted to GGUF (our writer, with llama.cpp's q/k row permutation) run
// through the GGUF loader and interleaved rope: in F32 and BF16 they give HF's greedy
// continuations and top-1; in Q8_0 they stay close to HF's logits (tolerance below).
#include <gtest/gtest.h>

#include <cstdio>

#include "backend/backend.h"
#include "eval/golden_eval.h"
#include "io/gguf_convert.h"
#include "io/model_source.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "test_paths.h"

namespace lancet {
namespace {

struct Expect {
  double max_rel_err;
  bool exact_greedy;
};

void check_converted(const std::string& fixture, DType type, const Expect& expect) {
  const std::string dir = testing::fixture_dir(fixture);
  auto hf = open_model_source(dir);
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  const std::string out = testing::make_temp_dir() + "/model.gguf";
  ASSERT_TRUE(convert_to_gguf(**hf, out, type).ok());
  auto src = open_model_source(out);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_TRUE((*src)->config().rope_interleaved);
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  LlamaModelOptions mo;
  mo.max_model_len = 2600;
  auto model = LlamaModel::create(**src, **be, mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const std::string golden_path = dir + "/golden.safetensors";
  auto cases = read_golden_cases(golden_path);
  auto golden = SafetensorsFile::open(golden_path);
  ASSERT_TRUE(cases.ok() && golden.ok());
  int ran = 0;
  for (const GoldenCase& c : *cases) {
    if (c.prompt_len > 400) continue;
    auto r = eval_golden_case(**model, **be, **golden, c, GoldenEvalOptions{});
    ASSERT_TRUE(r.ok()) << r.status().to_string();
    std::printf("  %s %s %s: rel_err %.3e top1 %lld/%lld greedy %lld/%lld\n", fixture.c_str(), dtype_name(type),
                c.name.c_str(), r->rel_err, (long long)r->top1_agree, (long long)r->num_positions,
                (long long)r->greedy_match, (long long)r->greedy_total);
    EXPECT_LE(r->rel_err, expect.max_rel_err) << c.name;
    if (expect.exact_greedy) {
      EXPECT_EQ(r->top1_agree, r->num_positions) << c.name;
      EXPECT_EQ(r->greedy_match, r->greedy_total) << c.name;
    }
    ++ran;
  }
  EXPECT_GE(ran, 3);
}

// F32 and BF16 hold the bf16 checkpoint exactly, and the converter folds transformers' rope
// frequency rounding into rope_freqs (gguf_convert.h), so logits stay within the CPU backend's
// 1e-4 of HF (measured <= 6.4e-6) with identical top-1 and greedy continuations. Q8_0 rounds
// each weight to 1/127 of its 32-weight block's max |w|; on these random-weight models that
// moves the logits by up to 7e-2 of max |logit| (measured, 2 layers), so the bound is 1e-1, and
// greedy continuations may part at near-ties, so only the logits are bounded.
TEST(GgufConvertedFixture, F32GivesHfGreedy) { check_converted("tiny-llama32", DType::kF32, {1e-4, true}); }
TEST(GgufConvertedFixture, BF16GivesHfGreedyWithLlama3RopeFreqs) {
  check_converted("tiny-llama3", DType::kBF16, {1e-4, true});
}
TEST(GgufConvertedFixture, Q8_0StaysClose) { check_converted("tiny-gqa8", DType::kQ8_0, {1e-1, false}); }

}  // namespace
}  // namespace lancet
