// Sampler: exact penalty arithmetic, seeded reproducibility, and draws that follow the
// requested distribution (statistical tests with a stated tolerance).
#include "runner/sampler.h"

#include <gtest/gtest.h>

#include <cmath>
#include <map>
#include <vector>

namespace lancet {
namespace {

// Empirical frequencies of `draws` samples (seed varies per draw through the counter).
std::vector<double> frequencies(const std::vector<float>& logits, const SamplingParams& p,
                                int draws, uint64_t seed) {
  std::vector<double> f(logits.size(), 0);
  std::vector<int32_t> outputs;
  for (int i = 0; i < draws; ++i) {
    SampleContext ctx;
    ctx.seed = seed + static_cast<uint64_t>(i) * 7919;
    SampleResult r = sample_token(logits, p, ctx);
    f[r.token] += 1.0 / draws;
  }
  return f;
}

std::vector<double> softmax(const std::vector<float>& x, double t) {
  double m = -1e30;
  for (float v : x) m = std::max<double>(m, v);
  std::vector<double> p(x.size());
  double s = 0;
  for (size_t i = 0; i < x.size(); ++i) s += p[i] = std::exp((x[i] - m) / t);
  for (auto& v : p) v /= s;
  return p;
}

// 200k draws: the standard error of a frequency is <= sqrt(0.25/200000) ~ 0.0011; we allow
// 0.006 (over 5 sigma) so the test is stable yet catches any real distribution error.
constexpr int kDraws = 200000;
constexpr double kTol = 0.006;

const std::vector<float> kLogits = {2.0f, 1.5f, 1.0f, 0.5f, 0.0f, -0.5f, -1.0f, -3.0f};

TEST(Sampler, GreedyIsArgmaxWithLowestIndexOnTies) {
  SamplingParams p;
  p.temperature = 0;
  std::vector<float> x = {0.1f, 3.0f, 3.0f, -1.0f};
  EXPECT_EQ(sample_token(x, p, {}).token, 1);
}

TEST(Sampler, TemperatureFollowsSoftmax) {
  for (float t : {0.5f, 1.0f, 2.0f}) {
    SamplingParams p;
    p.temperature = t;
    auto f = frequencies(kLogits, p, kDraws, 11);
    auto ref = softmax(kLogits, t);
    for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(f[i], ref[i], kTol) << "t=" << t << " i=" << i;
  }
}

TEST(Sampler, TopKKeepsOnlyKRenormalised) {
  SamplingParams p;
  p.temperature = 1.0f;
  p.top_k = 3;
  auto f = frequencies(kLogits, p, kDraws, 5);
  std::vector<float> top(kLogits.begin(), kLogits.begin() + 3);
  auto ref = softmax(top, 1.0);
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(f[i], ref[i], kTol);
  for (size_t i = 3; i < kLogits.size(); ++i) EXPECT_EQ(f[i], 0.0);
}

TEST(Sampler, TopPKeepsSmallestSetReachingP) {
  auto full = softmax(kLogits, 1.0);
  // A top_p between the mass of the best two and the best three tokens keeps three tokens.
  const double two = full[0] + full[1], three = two + full[2];
  SamplingParams p;
  p.top_p = static_cast<float>((two + three) / 2);
  auto f = frequencies(kLogits, p, kDraws, 9);
  double z = full[0] + full[1] + full[2];
  for (int i = 0; i < 3; ++i) EXPECT_NEAR(f[i], full[i] / z, kTol);
  for (size_t i = 3; i < kLogits.size(); ++i) EXPECT_EQ(f[i], 0.0);
}

TEST(Sampler, TopPOnLargeVocabularyGrowsCandidateSet) {
  // 1000 equal logits: top_p 0.5 must keep 500 of them (more than the first partial sort).
  std::vector<float> x(1000, 0.0f);
  SamplingParams p;
  p.top_p = 0.5f;
  std::vector<int> hits(1000, 0);
  for (int i = 0; i < 20000; ++i) {
    SampleContext ctx;
    ctx.seed = i;
    hits[sample_token(x, p, ctx).token]++;
  }
  int distinct = 0, beyond = 0;
  for (int i = 0; i < 1000; ++i) {
    distinct += hits[i] > 0;
    if (i >= 500) beyond += hits[i];
  }
  EXPECT_EQ(beyond, 0);
  EXPECT_GT(distinct, 480);
}

TEST(Sampler, MinPDropsTokensBelowFractionOfTop) {
  auto full = softmax(kLogits, 1.0);
  SamplingParams p;
  p.min_p = 0.3f;  // keeps tokens with prob >= 0.3 * p0
  auto f = frequencies(kLogits, p, kDraws, 3);
  double z = 0;
  for (size_t i = 0; i < full.size(); ++i) if (full[i] >= 0.3 * full[0]) z += full[i];
  for (size_t i = 0; i < full.size(); ++i) {
    if (full[i] >= 0.3 * full[0]) EXPECT_NEAR(f[i], full[i] / z, kTol);
    else EXPECT_EQ(f[i], 0.0);
  }
}

TEST(Sampler, SeededDrawIsReproducibleAndDependsOnPositionOnly) {
  SamplingParams p;
  p.temperature = 1.0f;
  std::vector<int32_t> out1 = {1, 2, 3};
  SampleContext a;
  a.seed = 42;
  a.output_tokens = out1;
  int32_t t1 = sample_token(kLogits, p, a).token;
  for (int i = 0; i < 10; ++i) EXPECT_EQ(sample_token(kLogits, p, a).token, t1);
  // A different seed gives a different sequence of draws somewhere in 64 positions.
  int differ = 0;
  for (uint64_t pos = 0; pos < 64; ++pos) differ += counter_uniform(42, pos) != counter_uniform(43, pos);
  EXPECT_EQ(differ, 64);
  // Uniformity of the counter RNG: mean of many draws near 0.5.
  double s = 0;
  for (uint64_t i = 0; i < 100000; ++i) s += counter_uniform(7, i);
  EXPECT_NEAR(s / 100000, 0.5, 0.005);
}

TEST(Sampler, PenaltiesAndBiasChangeLogitsExactly) {
  std::vector<float> x = {1.0f, -1.0f, 0.5f, 0.0f};
  SamplingParams p;
  p.temperature = 0;
  p.logprobs = 4;
  p.repetition_penalty = 2.0f;
  p.presence_penalty = 0.25f;
  p.frequency_penalty = 0.5f;
  p.logit_bias = {{3, 2.0f}};
  std::vector<int32_t> prompt = {0};
  std::vector<int32_t> output = {1, 1, 2};
  SampleContext ctx;
  ctx.prompt_tokens = prompt;
  ctx.output_tokens = output;
  SampleResult r = sample_token(x, p, ctx);
  // Processed: t0 = 1/2 = 0.5; t1 = -1*2 - (0.5*2 + 0.25) = -3.25; t2 = 0.5/2 - 0.75 = -0.5;
  // t3 = 0 + 2 = 2.
  std::vector<double> proc = {0.5, -3.25, -0.5, 2.0};
  double lse = 0;
  for (double v : proc) lse += std::exp(v);
  lse = std::log(lse);
  EXPECT_EQ(r.token, 3);
  EXPECT_NEAR(r.logprob, 2.0 - lse, 1e-6);
  ASSERT_EQ(r.top_logprobs.size(), 4u);
  EXPECT_EQ(r.top_logprobs[0].token, 3);
  EXPECT_EQ(r.top_logprobs[1].token, 0);
  EXPECT_EQ(r.top_logprobs[2].token, 2);
  EXPECT_EQ(r.top_logprobs[3].token, 1);
  EXPECT_NEAR(r.top_logprobs[3].logprob, -3.25 - lse, 1e-6);
}

TEST(Sampler, MinTokensMasksEos) {
  std::vector<float> x = {0.0f, 5.0f, 1.0f};
  std::vector<int32_t> eos = {1};
  SamplingParams p;
  p.temperature = 0;
  p.min_tokens = 2;
  SampleContext ctx;
  ctx.eos_token_ids = eos;
  EXPECT_EQ(sample_token(x, p, ctx).token, 2);
  std::vector<int32_t> out = {2, 2};
  ctx.output_tokens = out;
  EXPECT_EQ(sample_token(x, p, ctx).token, 1);
}

TEST(SamplingParams, ValidationNamesTheField) {
  SamplingParams p;
  p.top_p = 0;
  EXPECT_NE(p.validate(100).message().find("top_p"), std::string::npos);
  p = SamplingParams();
  p.logit_bias = {{100, 1.0f}};
  EXPECT_NE(p.validate(100).message().find("logit_bias"), std::string::npos);
  p = SamplingParams();
  EXPECT_TRUE(p.validate(100).ok());
}

}  // namespace
}  // namespace lancet
