// StepCostModel: the fit recovers a known linear step cost exactly, keeps coefficients
// non-negative, follows a cost that changes (forgetting), is not used before it has seen
// prompt steps, and max_chunk returns the largest chunk within a time and at most twice the
// largest chunk it has measured.
#include "engine/step_cost_model.h"

#include <gtest/gtest.h>

#include <random>

namespace lancet {
namespace {

// A step cost of the model's form: 3 ms a step, 0.02 ms a token, 0.4 ms per million prompt
// pairs, 1.5 ms per million decode context tokens.
double true_ms(const StepFeatures& f) {
  return 3.0 + 0.02 * static_cast<double>(f.tokens) + 0.4e-6 * f.prompt_pairs +
         1.5e-6 * static_cast<double>(f.decode_context);
}

StepFeatures random_step(std::mt19937& rng) {
  StepFeatures f;
  const int decodes = static_cast<int>(rng() % 64);
  for (int i = 0; i < decodes; ++i) f.add_chunk(100 + rng() % 20000, 1);
  if (rng() % 2) f.add_chunk(rng() % 100000, 16 + rng() % 4000);
  if (f.tokens == 0) f.add_chunk(10, 1);
  return f;
}

TEST(StepCostModel, RecoversAKnownLinearCost) {
  StepCostModel m;
  std::mt19937 rng(7);
  EXPECT_FALSE(m.fitted());
  for (int i = 0; i < 200; ++i) {
    const StepFeatures f = random_step(rng);
    m.observe(f, true_ms(f));
  }
  ASSERT_TRUE(m.fitted());
  EXPECT_NEAR(m.step_ms(), 3.0, 1e-3);
  EXPECT_NEAR(m.decode_row_ms(10000), 0.02 + 1.5e-2, 1e-4);
  // A 2048-token chunk after 60,000 computed tokens: 40.96 ms of tokens, 0.4 ms per million
  // of its 123.9M pairs.
  const double pairs = 2048.0 * 60000 + 0.5 * 2048.0 * 2049;
  EXPECT_NEAR(m.chunk_ms(60000, 2048), 0.02 * 2048 + 0.4e-6 * pairs, 1e-2);
  for (int i = 0; i < 20; ++i) {
    const StepFeatures f = random_step(rng);
    EXPECT_NEAR(m.predict_ms(f), true_ms(f), 1e-3 * true_ms(f));
  }
}

TEST(StepCostModel, NeedsPromptStepsBeforeItIsUsed) {
  StepCostModel m;
  for (int i = 0; i < 50; ++i) {
    StepFeatures f;
    for (int d = 0; d <= i % 7; ++d) f.add_chunk(500 + 10 * i, 1);
    m.observe(f, true_ms(f));
  }
  EXPECT_FALSE(m.fitted());  // decodes only: nothing says what a prompt chunk costs
  for (int i = 0; i < 3; ++i) {
    StepFeatures f;
    f.add_chunk(1000 * i, 512 + 256 * i);
    m.observe(f, true_ms(f));
  }
  EXPECT_TRUE(m.fitted());
}

TEST(StepCostModel, CoefficientsStayNonNegative) {
  StepCostModel m;
  std::mt19937 rng(3);
  // Noisy times where more decode context looks cheaper: the fit must not go negative.
  for (int i = 0; i < 100; ++i) {
    StepFeatures f = random_step(rng);
    const double ms = 2.0 + 0.03 * static_cast<double>(f.tokens) - 1e-7 * static_cast<double>(f.decode_context);
    m.observe(f, std::max(ms, 0.1));
  }
  for (double c : m.coefficients()) EXPECT_GE(c, 0.0);
  EXPECT_NEAR(m.coefficients()[1], 30.0, 3.0);  // ms per thousand tokens
}

TEST(StepCostModel, FollowsACostThatChanges) {
  StepCostModel m(0.9);
  std::mt19937 rng(11);
  for (int i = 0; i < 100; ++i) {
    const StepFeatures f = random_step(rng);
    m.observe(f, true_ms(f));
  }
  // The same steps now cost twice as much (e.g. a slower clock): recent steps dominate.
  for (int i = 0; i < 150; ++i) {
    const StepFeatures f = random_step(rng);
    m.observe(f, 2.0 * true_ms(f));
  }
  EXPECT_NEAR(m.step_ms(), 6.0, 0.05);
}

TEST(StepCostModel, MaxChunkIsTheLargestThatFits) {
  StepCostModel m;
  std::mt19937 rng(5);
  for (int i = 0; i < 100; ++i) {
    const StepFeatures f = random_step(rng);
    m.observe(f, true_ms(f));
  }
  for (int64_t start : {0, 4096, 100000}) {
    const int64_t n = m.max_chunk(start, 8192, 50.0);
    ASSERT_GT(n, 1);
    ASSERT_LT(n, 8192);
    EXPECT_LE(m.chunk_ms(start, n), 50.0);
    EXPECT_GT(m.chunk_ms(start, n + 1), 50.0);
  }
  EXPECT_EQ(m.max_chunk(0, 100, 1000.0), 100);  // all of it fits
  EXPECT_EQ(m.max_chunk(0, 100, 0.0), 0);
  EXPECT_EQ(m.max_chunk(0, 100, 0.001), 0);  // not even one token
}

// Fitted to short chunks only, a model whose time budget admits a much longer chunk gives at
// most twice the longest measured chunk, and grows that bound as longer chunks are measured.
TEST(StepCostModel, MaxChunkGrowsAtMostTwofoldPastWhatWasMeasured) {
  StepCostModel m;
  std::mt19937 rng(9);
  for (int i = 0; i < 40; ++i) {
    StepFeatures f;
    for (int d = 0; d < 16; ++d) f.add_chunk(300 + rng() % 200, 1);
    if (i % 2) f.add_chunk(0, 64 + static_cast<int64_t>(rng() % 193));  // chunks of 64..256 tokens
    m.observe(f, true_ms(f));
  }
  ASSERT_TRUE(m.fitted());
  EXPECT_EQ(m.largest_chunk_seen(), 256) << "the seed's chunks reach 256";
  // The fit alone would allow 8192 tokens in 1000 ms (3 + 0.02 * 8192 + pairs < 1000).
  EXPECT_LT(m.chunk_ms(0, 8192), 1000.0);
  EXPECT_EQ(m.max_chunk(0, 8192, 1000.0), 512);
  EXPECT_EQ(m.max_chunk(0, 300, 1000.0), 300);  // below the bound: as asked
  // Each measured step lets the next one double.
  for (int64_t want : {512, 1024, 2048, 4096}) {
    StepFeatures f;
    f.add_chunk(0, want);
    m.observe(f, true_ms(f));
    EXPECT_EQ(m.max_chunk(0, 8192, 1000.0), std::min<int64_t>(2 * want, 8192)) << want;
  }
  // The time budget still cuts below the bound.
  const int64_t n = m.max_chunk(50000, 8192, 50.0);
  EXPECT_LE(m.chunk_ms(50000, n), 50.0);
  EXPECT_GT(m.chunk_ms(50000, n + 1), 50.0);
}

// Before the fit: kColdStartChunk prompt tokens, then the newest prompt step's tokens scaled
// by 0.8 x budget / its time, at most doubled and at least kMinTimedChunk.
TEST(StepCostModel, ColdChunkFollowsTheNewestPromptStep) {
  StepCostModel m;
  EXPECT_EQ(m.cold_chunk(90.0), kColdStartChunk);
  StepFeatures decode;
  decode.add_chunk(100, 1);
  m.observe(decode, 500.0);  // a decode step says nothing about prompt tokens
  EXPECT_EQ(m.cold_chunk(90.0), kColdStartChunk);
  StepFeatures f;
  f.add_chunk(0, 512);
  f.add_chunk(100, 1);
  m.observe(f, 30.0);
  EXPECT_EQ(m.cold_chunk(90.0), 1024);  // 0.8 * 512 * 90 / 30 = 1228, doubled at most
  StepFeatures g;
  g.add_chunk(1000, 300);
  g.add_chunk(2000, 700);
  m.observe(g, 180.0);
  EXPECT_EQ(m.cold_chunk(90.0), 400);  // both chunks' 1000 tokens took twice the budget: 0.8 * 500
  StepFeatures slow;
  slow.add_chunk(0, 256);
  m.observe(slow, 229.0);  // a first step's warm-up
  EXPECT_EQ(m.cold_chunk(90.0), 80);  // 0.8 * 256 * 90 / 229
  m.observe(slow, 5000.0);
  EXPECT_EQ(m.cold_chunk(90.0), kMinTimedChunk);
  EXPECT_FALSE(m.fitted());
}

TEST(StepCostModel, IgnoresInvalidTimes) {
  StepCostModel m;
  StepFeatures f;
  f.add_chunk(0, 100);
  m.observe(f, -1.0);
  m.observe(f, std::numeric_limits<double>::quiet_NaN());
  m.observe(StepFeatures{}, 5.0);  // an empty step
  EXPECT_EQ(m.coefficients()[0], 0.0);
  EXPECT_EQ(m.coefficients()[1], 0.0);
}

}  // namespace
}  // namespace lancet
