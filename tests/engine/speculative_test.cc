// Speculative decoding pieces on their own: draft verification keeps the target's sampling
// distribution exactly (chi-square against a softmax computed here, not by the sampler),
// n-gram lookup, the cost-based choice of k (back-off at large batches), config parsing.
#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <random>

#include "engine/ngram_proposer.h"
#include "engine/spec_policy.h"
#include "engine/spec_verify.h"
#include "engine/speculative_config.h"

namespace lancet {
namespace {

// softmax(x / t) over the top_k largest entries (0 elsewhere), computed independently.
std::vector<double> reference_probs(const std::vector<float>& x, double t, int top_k) {
  std::vector<int> idx(x.size());
  std::iota(idx.begin(), idx.end(), 0);
  std::sort(idx.begin(), idx.end(), [&](int a, int b) { return x[a] > x[b]; });
  std::vector<double> p(x.size(), 0.0);
  double s = 0;
  for (int i = 0; i < top_k; ++i) s += p[idx[i]] = std::exp(x[idx[i]] / t);
  for (auto& v : p) v /= s;
  return p;
}

// Pearson chi-square of observed counts against probabilities (cells with p > 0); also fails
// (returns infinity) when a zero-probability cell was drawn.
double chi_square(const std::vector<int64_t>& counts, const std::vector<double>& p, int64_t n, int* dof) {
  double chi = 0;
  *dof = -1;
  for (size_t i = 0; i < p.size(); ++i) {
    if (p[i] <= 0) {
      if (counts[i] > 0) return INFINITY;
      continue;
    }
    const double e = p[i] * static_cast<double>(n);
    chi += (counts[i] - e) * (counts[i] - e) / e;
    ++*dof;
  }
  return chi;
}

// Chi-square critical values at significance 1e-4 (so a correct implementation fails about
// once in 10,000 runs; the seeds are fixed, so the test is deterministic anyway).
double chi2_critical_1e4(int dof) {
  static const double table[] = {0, 15.14, 18.42, 21.11, 23.51, 25.74, 27.86, 29.88, 31.83, 33.72};
  return table[dof];
}

struct Case {
  std::vector<float> target0, target1;  // rows 0 and 1 (bonus)
  SamplingParams params;
  int top_k_ref;
};

Case make_case() {
  Case c;
  c.target0 = {1.0f, 2.5f, 0.3f, -1.0f, 2.0f, 0.0f, 1.7f, -0.5f};
  c.target1 = {0.2f, -0.4f, 1.9f, 1.1f, 0.0f, 2.2f, -1.0f, 0.6f};
  c.params.temperature = 0.8f;
  c.params.top_k = 6;
  c.top_k_ref = 6;
  return c;
}

// Draft distribution q deliberately different from the target (and covering a token the
// target's top-k excludes), so acceptance and residual sampling both matter.
TokenDistribution draft_q() {
  TokenDistribution q;
  q.tokens = {3, 0, 2, 1, 7, 5};
  q.probs = {0.30, 0.25, 0.15, 0.10, 0.10, 0.10};
  return q;
}

TEST(SpecVerify, RejectionSamplingFollowsTheTargetDistribution) {
  const Case c = make_case();
  const std::vector<double> p0 = reference_probs(c.target0, 0.8, c.top_k_ref);
  const std::vector<double> p1 = reference_probs(c.target1, 0.8, c.top_k_ref);
  const TokenDistribution q = draft_q();
  std::vector<float> rows = c.target0;
  rows.insert(rows.end(), c.target1.begin(), c.target1.end());
  std::mt19937_64 rng(42);
  std::discrete_distribution<int> pick_q(q.probs.begin(), q.probs.end());
  const int64_t n = 100000;
  std::vector<int64_t> first(8, 0), bonus(8, 0);
  int64_t accepted = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int32_t d = q.tokens[pick_q(rng)];
    VerifyInput in;
    in.logits = rows;
    in.vocab = 8;
    in.drafts = std::span<const int32_t>(&d, 1);
    in.draft_dists = std::span<const TokenDistribution>(&q, 1);
    in.params = &c.params;
    in.seed = 1000003ull * static_cast<uint64_t>(t) + 17;
    VerifyResult r = verify_drafts(in);
    ASSERT_GE(r.tokens.size(), 1u);
    first[r.tokens[0].token]++;
    if (r.num_accepted == 1) {
      ASSERT_EQ(r.tokens.size(), 2u);
      EXPECT_EQ(r.tokens[0].token, d);
      bonus[r.tokens[1].token]++;
      ++accepted;
    } else {
      ASSERT_EQ(r.tokens.size(), 1u);
    }
  }
  int dof = 0;
  const double chi0 = chi_square(first, p0, n, &dof);
  EXPECT_LT(chi0, chi2_critical_1e4(dof)) << "first token does not follow the target (dof " << dof << ")";
  const double chi1 = chi_square(bonus, p1, accepted, &dof);
  EXPECT_LT(chi1, chi2_critical_1e4(dof)) << "bonus token does not follow the target row";
  // Acceptance probability of rejection sampling is sum_x min(p(x), q(x)); its standard error
  // over n draws is below 0.0016, so 0.008 is a 5-sigma band.
  std::vector<double> qd(8, 0);
  for (size_t i = 0; i < q.tokens.size(); ++i) qd[q.tokens[i]] = q.probs[i];
  double expect_acc = 0;
  for (int i = 0; i < 8; ++i) expect_acc += std::min(p0[i], qd[i]);
  EXPECT_NEAR(static_cast<double>(accepted) / n, expect_acc, 0.008);
}

TEST(SpecVerify, DeterministicDraftsGiveExactlyTheNonSpeculativeTokens) {
  const Case c = make_case();
  std::vector<float> rows = c.target0;
  rows.insert(rows.end(), c.target1.begin(), c.target1.end());
  const std::vector<double> p0 = reference_probs(c.target0, 0.8, c.top_k_ref);
  const int64_t n = 60000;
  std::vector<int64_t> first(8, 0);
  int64_t accepted = 0;
  for (int64_t t = 0; t < n; ++t) {
    const int32_t d = 1;  // an n-gram draft: always the same token
    VerifyInput in;
    in.logits = rows;
    in.vocab = 8;
    in.drafts = std::span<const int32_t>(&d, 1);
    in.params = &c.params;
    in.seed = 77 + static_cast<uint64_t>(t) * 7919;
    VerifyResult r = verify_drafts(in);
    // Token for token what sample_token gives without speculation, with the same seed.
    SampleContext ctx;
    ctx.seed = in.seed;
    const SampleResult plain = sample_token(c.target0, c.params, ctx);
    ASSERT_EQ(r.tokens[0].token, plain.token);
    first[r.tokens[0].token]++;
    if (r.num_accepted == 1) {
      ++accepted;
      std::vector<int32_t> out = {d};
      ctx.output_tokens = out;
      ASSERT_EQ(r.tokens[1].token, sample_token(c.target1, c.params, ctx).token);
    }
  }
  int dof = 0;
  const double chi = chi_square(first, p0, n, &dof);
  EXPECT_LT(chi, chi2_critical_1e4(dof));
  EXPECT_NEAR(static_cast<double>(accepted) / n, p0[1], 0.01);
}

TEST(SpecVerify, GreedyAcceptsTheArgmaxPrefixAndCorrectsTheFirstMiss) {
  // Rows: argmax 4, then 2, then 6, then bonus 0.
  const int64_t v = 8;
  std::vector<float> rows(4 * v, 0.0f);
  rows[0 * v + 4] = 5;
  rows[1 * v + 2] = 5;
  rows[2 * v + 6] = 5;
  rows[3 * v + 0] = 5;
  SamplingParams p;
  p.temperature = 0;
  auto run = [&](std::vector<int32_t> drafts) {
    VerifyInput in;
    in.logits = std::span<const float>(rows).first((drafts.size() + 1) * v);
    in.vocab = v;
    in.drafts = drafts;
    in.params = &p;
    std::vector<int32_t> got;
    for (const auto& r : verify_drafts(in).tokens) got.push_back(r.token);
    return got;
  };
  EXPECT_EQ(run({4, 2, 6}), (std::vector<int32_t>{4, 2, 6, 0}));  // all accepted + bonus
  EXPECT_EQ(run({4, 3, 6}), (std::vector<int32_t>{4, 2}));        // miss at 2: corrected, stop
  EXPECT_EQ(run({1, 2, 6}), (std::vector<int32_t>{4}));
  EXPECT_EQ(run({}), (std::vector<int32_t>{4}));
}

TEST(SpecVerify, ForcedAcceptanceFollowsTheRequestedRate) {
  // Benchmark mode: drafts that the target would all reject are accepted at the forced rate;
  // the first refused position yields the target's own token.
  const int64_t v = 8, k = 4;
  std::vector<float> rows((k + 1) * v, 0.0f);
  for (int64_t j = 0; j <= k; ++j) rows[j * v + 7] = 5;  // the target always wants 7
  SamplingParams p;
  p.temperature = 0;
  const std::vector<int32_t> drafts{1, 2, 3, 4};
  for (double rate : {0.0, 0.5, 1.0}) {
    int64_t accepted = 0, trials = 0;
    for (uint64_t seed = 1; seed <= 4000; ++seed) {
      VerifyInput in;
      in.logits = rows;
      in.vocab = v;
      in.drafts = drafts;
      in.params = &p;
      in.seed = seed;
      in.force_acceptance_rate = rate;
      const VerifyResult r = verify_drafts(in);
      ASSERT_EQ(static_cast<int64_t>(r.tokens.size()), r.num_accepted + 1);
      for (int32_t j = 0; j < r.num_accepted; ++j) ASSERT_EQ(r.tokens[j].token, drafts[j]);
      ASSERT_EQ(r.tokens.back().token, 7);  // correction or bonus: the target's token
      // Per-position acceptance: positions reached are trials, accepted ones successes.
      accepted += r.num_accepted;
      trials += std::min<int64_t>(r.num_accepted + 1, k);
    }
    // Binomial over ~4000-16000 trials: 5 standard deviations is under 0.04 at rate 0.5.
    EXPECT_NEAR(static_cast<double>(accepted) / static_cast<double>(trials), rate, 0.04) << rate;
  }
}

TEST(SpecVerify, PenaltiesSeeTheAcceptedDrafts) {
  // With a strong repetition penalty the row-1 argmax (token 3) is a token already drafted:
  // verification must penalise it as non-speculative decoding would after emitting it.
  const int64_t v = 6;
  std::vector<float> rows(2 * v, 0.0f);
  rows[0 * v + 3] = 4.0f;
  rows[1 * v + 3] = 4.0f;
  rows[1 * v + 5] = 3.0f;
  SamplingParams p;
  p.temperature = 0;
  p.repetition_penalty = 2.0f;
  const int32_t d = 3;
  VerifyInput in;
  in.logits = rows;
  in.vocab = v;
  in.drafts = std::span<const int32_t>(&d, 1);
  in.params = &p;
  VerifyResult r = verify_drafts(in);
  ASSERT_EQ(r.tokens.size(), 2u);
  EXPECT_EQ(r.tokens[1].token, 5);  // 4/2 = 2 < 3
}

TEST(NgramProposer, FindsTheLongestRecurringSuffix) {
  // ... 7 8 9 | 1 2 3 4 5 | 7 8 9 -> drafts 1 2 3 (k = 3).
  std::vector<int32_t> t = {5, 7, 8, 9, 1, 2, 3, 4, 5, 6, 6, 7, 8, 9};
  EXPECT_EQ(ngram_propose(t, 1, 3, 3), (std::vector<int32_t>{1, 2, 3}));
  EXPECT_EQ(ngram_propose(t, 2, 3, 8), (std::vector<int32_t>{1, 2, 3, 4, 5, 6, 6, 7}));
  // No recurring n-gram of the asked sizes: no drafts.
  std::vector<int32_t> u = {1, 2, 3, 4, 5};
  EXPECT_TRUE(ngram_propose(u, 1, 3, 4).empty());
  // Short loops: the occurrence with k followers wins over the one right before the suffix.
  std::vector<int32_t> loop = {4, 4, 4, 4, 4, 4};
  EXPECT_EQ(ngram_propose(loop, 2, 2, 3), (std::vector<int32_t>{4, 4, 4}));
  EXPECT_TRUE(ngram_propose(u, 1, 3, 0).empty());
}

TEST(SpecPolicy, LinearFitRecoversCosts) {
  LinearCostFit f(0.999);
  for (int i = 0; i < 200; ++i) {
    const double n = 1 + (i * 37) % 300;
    f.observe(n, 0.010 + 0.0002 * n);
  }
  EXPECT_NEAR(f.intercept(), 0.010, 1e-6);
  EXPECT_NEAR(f.slope(), 0.0002, 1e-8);
}

TEST(SpecPolicy, SpeculatesAtSmallBatchesAndBacksOffAtLargeOnes) {
  SpecPolicy policy(SpecPolicyConfig{.max_k = 4, .draft_model = false});
  // A memory-bound pass: 20 ms fixed, 0.1 ms per token (the knee near 200 tokens).
  for (int i = 0; i < 100; ++i) {
    const int64_t n = 1 + (i * 53) % 2048;
    policy.observe_target(n, 0.020 + 0.0001 * static_cast<double>(n));
  }
  for (int i = 0; i < 50; ++i) policy.observe_acceptance(5, 4);  // ~80% per draft
  EXPECT_EQ(policy.choose_k(1), 4);
  EXPECT_GT(policy.choose_k(16), 0);
  EXPECT_EQ(policy.choose_k(2048), 0);  // 2048 x (k+1) tokens are compute bound: drafts cost more
  // Low acceptance: not worth it even alone.
  SpecPolicy poor(SpecPolicyConfig{.max_k = 4, .draft_model = false});
  for (int i = 0; i < 100; ++i) poor.observe_target(1 + (i * 53) % 2048, 0.001 + 0.001 * ((i * 53) % 2048 + 1));
  for (int i = 0; i < 200; ++i) poor.observe_acceptance(1, 0);
  int probes = 0;
  for (int s = 0; s < SpecPolicy::kProbeEvery * 2; ++s) probes += poor.choose_k(1) > 0;
  EXPECT_EQ(probes, 2);  // off, except the periodic probes
  // A fixed limit.
  SpecPolicy fixed(SpecPolicyConfig{.max_k = 3, .adaptive = false, .disable_by_batch_size = 8});
  EXPECT_EQ(fixed.choose_k(8), 3);
  EXPECT_EQ(fixed.choose_k(9), 0);
}

TEST(SpeculativeConfig, ParsesVllmShapes) {
  auto d = parse_speculative_config(R"({"method": "draft", "model": "/m/draft.gguf", "num_speculative_tokens": 3})");
  ASSERT_TRUE(d.ok()) << d.status().to_string();
  EXPECT_EQ(d->method, SpecMethod::kDraft);
  EXPECT_EQ(d->model, "/m/draft.gguf");
  EXPECT_EQ(d->num_speculative_tokens, 3);
  auto n = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 5, "prompt_lookup_max": 4})");
  ASSERT_TRUE(n.ok());
  EXPECT_EQ(n->method, SpecMethod::kNgram);
  EXPECT_EQ(n->prompt_lookup_min, 4);
  EXPECT_EQ(n->prompt_lookup_max, 4);
  EXPECT_FALSE(parse_speculative_config("").value().enabled());
  EXPECT_NE(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "bogus": 1})")
                .status().message().find("bogus"), std::string::npos);
  EXPECT_FALSE(parse_speculative_config(R"({"method": "draft", "num_speculative_tokens": 2})").ok());
  EXPECT_FALSE(parse_speculative_config(R"({"method": "ngram"})").ok());
  EXPECT_FALSE(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "prompt_lookup_min": 4, "prompt_lookup_max": 2})").ok());
  EXPECT_FALSE(parse_speculative_config("[1]").ok());
  auto f = parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "force_acceptance_rate": 0.7})");
  ASSERT_TRUE(f.ok());
  EXPECT_DOUBLE_EQ(f->force_acceptance_rate, 0.7);
  EXPECT_FALSE(parse_speculative_config(R"({"method": "ngram", "num_speculative_tokens": 2, "force_acceptance_rate": 1.5})").ok());
  // That serving refuses it and benchmarks opt in is the runtime's check
  // (tests/runtime/speculative_runtime_test.cc).
}

}  // namespace
}  // namespace lancet
