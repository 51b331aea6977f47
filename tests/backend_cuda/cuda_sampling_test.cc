// Device sampling (sampling.cu) against the CPU sampler (runner/sampler.h), which nobody
// tuned to the kernel: on random logits of odd vocabulary sizes, for greedy and a grid of
// temperature / top-k / top-p / min-p, the GPU token equals draw_token's with the same seed
// and counter on every greedy row and on >= 99% of the others (a difference needs the uniform
// to fall within rounding of a CDF boundary, or a top-p cut within rounding of top_p); rows
// with many tied logits and -inf logits included. A chi-square test of 40000 draws of one row
// against sampling_distribution(); structured-output masks applied on the device; and the engine
// on a real (tiny) model gives the same tokens with device sampling as with host sampling.
#include <algorithm>
#include <cmath>
#include <limits>
#include <map>

#include "cuda_fixture_model.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "engine/engine_run_util.h"
#include "runner/llama_executor.h"
#include "runner/sampler.h"

namespace lancet {
namespace {

using namespace lancet::testing;

SamplingParams params_of(const DeviceSampleRow& d) {
  SamplingParams p;
  p.temperature = d.temperature;
  p.top_k = d.top_k;
  p.top_p = d.top_p;
  p.min_p = d.min_p;
  return p;
}

// Logits like a model's: a few large values over a broad base. Row kinds: 0 plain, 1 values on
// a coarse grid (many ties), 2 a third of the vocabulary -inf.
std::vector<float> make_logits(int64_t rows, int64_t vocab, uint32_t seed) {
  std::mt19937 g(seed);
  std::normal_distribution<float> base(0.0f, 2.0f);
  std::uniform_real_distribution<float> peak(4.0f, 12.0f);
  std::vector<float> x(rows * vocab);
  for (int64_t r = 0; r < rows; ++r) {
    float* row = x.data() + r * vocab;
    for (int64_t i = 0; i < vocab; ++i) row[i] = base(g);
    for (int j = 0; j < 20; ++j) row[g() % vocab] = peak(g);
    if (r % 3 == 1)
      for (int64_t i = 0; i < vocab; ++i) row[i] = std::round(row[i] * 2.0f) / 2.0f;
    if (r % 3 == 2)
      for (int64_t i = 0; i < vocab; i += 3) row[i] = -std::numeric_limits<float>::infinity();
  }
  return x;
}

std::vector<int32_t> gpu_sample(Backend& g, const std::vector<float>& logits, int64_t rows, int64_t vocab,
                                const std::vector<DeviceSampleRow>& params) {
  Buffer d = to_device(g, logits);
  std::vector<int32_t> tokens(params.size(), -1);
  Status st = g.sample_rows(d.as<float>(), rows, vocab, params, tokens.data());
  EXPECT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(g.synchronize().ok());
  return tokens;
}

struct Setting {
  float temperature;
  int32_t top_k;
  float top_p;
  float min_p;
};

// A device row of logits row `row` drawn with setting s, its seed and counter.
DeviceSampleRow sample_row(const Setting& s, int64_t row, uint64_t seed, uint64_t counter) {
  DeviceSampleRow d;
  d.row = static_cast<int32_t>(row);
  d.temperature = s.temperature;
  d.top_k = s.top_k;
  d.top_p = s.top_p;
  d.min_p = s.min_p;
  d.seed = seed;
  d.counter = counter;
  return d;
}

TEST(CudaSampling, MatchesCpuSamplerTokenForToken) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  ASSERT_TRUE(g->supports_device_sampling());
  const Setting settings[] = {
      {0.0f, 0, 1.0f, 0.0f},     {1.0f, 0, 1.0f, 0.0f},      {0.7f, 50, 1.0f, 0.0f},   {1.0f, 0, 0.9f, 0.0f},
      {1.3f, 1000, 0.95f, 0.05f}, {0.5f, 0, 1.0f, 0.1f},     {1.0f, 1, 1.0f, 0.0f},    {1.0f, 1 << 20, 1.0f, 0.0f},
      {2.0f, 0, 0.01f, 0.0f},    {0.8f, 40, 0.8f, 0.2f},
  };
  const int64_t vocabs[] = {1000, 32003, 128256};
  for (int64_t vocab : vocabs) {
    const int64_t rows = vocab > 100000 ? 24 : 48;
    const auto logits = make_logits(rows, vocab, static_cast<uint32_t>(vocab));
    for (const Setting& s : settings) {
      std::vector<DeviceSampleRow> params;
      // Every row twice (two counters), in a shuffled row order.
      for (int64_t i = 0; i < 2 * rows; ++i)
        params.push_back(sample_row(s, (i * 7) % rows, 0x1234567ull * (i + 1), static_cast<uint64_t>(i % 5)));
      const auto got = gpu_sample(*g, logits, rows, vocab, params);
      int64_t same = 0;
      for (size_t i = 0; i < params.size(); ++i) {
        const DeviceSampleRow& d = params[i];
        const std::span<const float> row(logits.data() + d.row * vocab, vocab);
        const int32_t want = draw_token(row, params_of(d), d.seed, d.counter);
        same += got[i] == want;
        ASSERT_GE(got[i], 0);
        ASSERT_LT(got[i], vocab);
        if (s.temperature <= 0.0f) EXPECT_EQ(got[i], want) << "greedy, vocab " << vocab << " row " << d.row;
        // Whatever the draw, the token must be a candidate of the distribution.
        if (got[i] != want) {
          const TokenDistribution dist = sampling_distribution(row, params_of(d));
          EXPECT_GT(dist.prob_of(got[i]), 0.0) << "vocab " << vocab << " row " << d.row << ": token " << got[i]
                                               << " is not a candidate";
        }
      }
      const double frac = static_cast<double>(same) / static_cast<double>(params.size());
      EXPECT_GE(frac, 0.99) << "vocab " << vocab << " T " << s.temperature << " top_k " << s.top_k << " top_p "
                            << s.top_p << " min_p " << s.min_p;
    }
  }
}

// Many draws of one row (counters 0..n-1) against the distribution the CPU computes.
void chi_square_check(Backend& g, const std::vector<float>& row, const Setting& s, int64_t draws) {
  const int64_t vocab = static_cast<int64_t>(row.size());
  std::vector<DeviceSampleRow> params(draws);
  for (int64_t i = 0; i < draws; ++i) {
    params[i].row = 0;
    params[i].temperature = s.temperature;
    params[i].top_k = s.top_k;
    params[i].top_p = s.top_p;
    params[i].min_p = s.min_p;
    params[i].seed = 99;
    params[i].counter = static_cast<uint64_t>(i);
  }
  const auto got = gpu_sample(g, row, 1, vocab, params);
  SamplingParams p;
  p.temperature = s.temperature;
  p.top_k = s.top_k;
  p.top_p = s.top_p;
  p.min_p = s.min_p;
  const TokenDistribution dist = sampling_distribution(row, p);
  ASSERT_GT(dist.tokens.size(), 5u) << "the test row should keep several candidates";
  std::map<int32_t, int64_t> hits;
  for (int32_t t : got) hits[t]++;
  for (const auto& [t, n] : hits) EXPECT_GT(dist.prob_of(t), 0.0) << "token " << t << " drawn " << n << " times";
  // Bins with >= 5 expected draws, the rest pooled.
  double chi2 = 0, rest_exp = 0, rest_obs = 0;
  int df = -1;
  for (size_t i = 0; i < dist.tokens.size(); ++i) {
    const double e = dist.probs[i] * static_cast<double>(draws);
    const double o = static_cast<double>(hits.count(dist.tokens[i]) ? hits[dist.tokens[i]] : 0);
    if (e >= 5.0) {
      chi2 += (o - e) * (o - e) / e;
      ++df;
    } else {
      rest_exp += e;
      rest_obs += o;
    }
  }
  if (rest_exp > 0) {
    chi2 += (rest_obs - rest_exp) * (rest_obs - rest_exp) / std::max(rest_exp, 1.0);
    ++df;
  }
  ASSERT_GT(df, 3);
  // Wilson-Hilferty: the chi-square quantile at z = 4.75 (p ~ 1e-6): a real error in any bin
  // of a few percent mass shows up as chi2 in the hundreds at this many draws.
  const double k = df, z = 4.75;
  const double limit = k * std::pow(1.0 - 2.0 / (9.0 * k) + z * std::sqrt(2.0 / (9.0 * k)), 3.0);
  EXPECT_LT(chi2, limit) << "df " << df;
}

TEST(CudaSampling, DrawsFollowTheCpuDistribution) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  std::mt19937 r(5);
  std::normal_distribution<float> nd(0.0f, 1.5f);
  std::vector<float> row(5003);
  for (float& v : row) v = nd(r);
  for (int i = 0; i < 30; ++i) row[r() % row.size()] = 5.0f + 0.1f * static_cast<float>(i % 7);  // ties too
  chi_square_check(*g, row, {1.0f, 0, 1.0f, 0.0f}, 40000);
  chi_square_check(*g, row, {0.8f, 40, 0.9f, 0.0f}, 40000);
  chi_square_check(*g, row, {1.2f, 0, 0.95f, 0.02f}, 40000);
}

TEST(CudaSampling, EdgeCases) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const float inf = std::numeric_limits<float>::infinity();
  // Row 0: all -inf (greedy: index 0). Row 1: one finite logit among -inf (any setting picks
  // it). Row 2: all equal (top_k 1 and greedy take index 0).
  const int64_t vocab = 777;
  std::vector<float> x(3 * vocab, -inf);
  x[vocab + 500] = 1.0f;
  std::fill(x.begin() + 2 * vocab, x.end(), 0.25f);
  std::vector<DeviceSampleRow> params(5);
  params[0].row = 0;
  params[0].temperature = 0.0f;
  params[1].row = 1;
  params[1].top_p = 0.5f;
  params[2].row = 1;
  params[2].min_p = 0.9f;
  params[3].row = 2;
  params[3].top_k = 1;
  params[4].row = 2;
  params[4].temperature = 0.0f;
  const auto got = gpu_sample(*g, x, 3, vocab, params);
  EXPECT_EQ(got, (std::vector<int32_t>{0, 500, 500, 0, 0}));
  // Bad input is a Status.
  Buffer d = to_device(*g, x);
  int32_t t = 0;
  DeviceSampleRow bad;
  bad.row = 3;
  EXPECT_FALSE(g->sample_rows(d.as<float>(), 3, vocab, std::span<const DeviceSampleRow>(&bad, 1), &t).ok());
  bad.row = 0;
  bad.top_p = 0.0f;
  EXPECT_FALSE(g->sample_rows(d.as<float>(), 3, vocab, std::span<const DeviceSampleRow>(&bad, 1), &t).ok());
  bad.top_p = 1.0f;
  EXPECT_FALSE(g->sample_rows(d.as<float>(), 1, int64_t{1} << 20, std::span<const DeviceSampleRow>(&bad, 1), &t).ok());
  EXPECT_TRUE(g->sample_rows(d.as<float>(), 3, vocab, std::span<const DeviceSampleRow>(&bad, 1), &t).ok());
}

// Structured-output masks (DeviceSampleRow::allowed) on the device, through sample_rows and
// sample_rows_async: every token drawn is one the mask allows, and the draw is draw_sample_row's
// (the CPU sampler's with SampleContext::allowed_tokens) on every greedy row and >= 99% of the
// others. Masks: a few tokens of a 128256 vocabulary, one token, every token, a mask shorter
// than the vocabulary's words, and rows without a mask beside them.
TEST(CudaSampling, MasksAllowOnlyTheirTokens) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const int64_t vocab = 128256, rows = 6, W = (vocab + 31) / 32;
  const auto logits = make_logits(rows, vocab, 77);
  std::mt19937 r(78);
  std::vector<std::vector<uint32_t>> masks(5, std::vector<uint32_t>(static_cast<size_t>(W), 0u));
  for (int i = 0; i < 300; ++i) {  // about 300 tokens
    const int64_t t = static_cast<int64_t>(r() % vocab);
    masks[0][t >> 5] |= 1u << (t & 31);
  }
  masks[1][4000 >> 5] |= 1u << (4000 & 31);                     // one token
  std::fill(masks[2].begin(), masks[2].end(), 0xffffffffu);       // every token
  for (int i = 0; i < 50; ++i) masks[3][r() % 100] |= 1u << (r() % 32);  // tokens < 3200, 100 words given
  masks[4] = masks[0];                                           // with the best logits allowed
  for (int64_t row = 0; row < rows; ++row) {
    const float* x = logits.data() + row * vocab;
    const int64_t best = std::max_element(x, x + vocab) - x;
    masks[4][best >> 5] |= 1u << (best & 31);
  }
  const int32_t words[] = {static_cast<int32_t>(W), static_cast<int32_t>(W), static_cast<int32_t>(W), 100,
                           static_cast<int32_t>(W)};
  const Setting settings[] = {{0.0f, 0, 1.0f, 0.0f}, {1.0f, 0, 1.0f, 0.0f}, {0.8f, 40, 0.9f, 0.05f}};
  std::vector<DeviceSampleRow> params;
  for (const Setting& s : settings)
    for (int64_t i = 0; i < 36; ++i) {
      DeviceSampleRow d = sample_row(s, i % rows, 0x9e37ull * (i + 1), static_cast<uint64_t>(i % 7));
      const int m = static_cast<int>(i % 6);  // 5: no mask
      if (m < 5) {
        d.allowed = masks[m].data();
        d.allowed_words = words[m];
      }
      params.push_back(d);
    }
  auto allowed = [&](const DeviceSampleRow& d, int32_t t) {
    return !d.allowed || (t >> 5 < d.allowed_words && (d.allowed[t >> 5] >> (t & 31) & 1));
  };
  auto check = [&](const std::vector<int32_t>& got, const std::string& how) {
    ASSERT_EQ(got.size(), params.size());
    int64_t same = 0;
    for (size_t i = 0; i < params.size(); ++i) {
      const DeviceSampleRow& d = params[i];
      const std::span<const float> row(logits.data() + d.row * vocab, vocab);
      const int32_t want = draw_sample_row(row, d);
      ASSERT_GE(got[i], 0) << how;
      ASSERT_LT(got[i], vocab) << how;
      EXPECT_TRUE(allowed(d, got[i])) << how << ": param " << i << " drew refused token " << got[i];
      if (d.temperature <= 0.0f) EXPECT_EQ(got[i], want) << how << ": greedy param " << i;
      same += got[i] == want;
    }
    EXPECT_GE(static_cast<double>(same) / static_cast<double>(params.size()), 0.99) << how;
  };
  check(gpu_sample(*g, logits, rows, vocab, params), "sample_rows");
  Buffer d = to_device(*g, logits);
  auto tokens = g->alloc(params.size() * sizeof(int32_t));
  ASSERT_TRUE(tokens.ok());
  ASSERT_TRUE(g->sample_rows_async(d.as<float>(), rows, vocab, params, tokens->as<int32_t>()).ok());
  ASSERT_TRUE(g->synchronize().ok());
  check(to_host<int32_t>(*g, *tokens, params.size()), "sample_rows_async");
  // A mask of words without its words is refused.
  DeviceSampleRow bad;
  bad.allowed_words = 3;
  int32_t t = 0;
  EXPECT_FALSE(g->sample_rows(d.as<float>(), rows, vocab, std::span<const DeviceSampleRow>(&bad, 1), &t).ok());
}

std::vector<std::vector<int32_t>> run_engine(ModelExecutor& exec, const std::vector<GenerationRequest>& reqs) {
  return run_engine_to_end(exec, reqs, {.max_num_batched_tokens = 512, .max_num_seqs = 64, .max_model_len = 1024});
}

TEST(CudaSampling, EngineOnTinyModelMatchesHostSampling) {
  auto fixture = gpu_fixture_model("tiny-llama3");
  ASSERT_TRUE(fixture.ok()) << fixture.status().to_string();
  LlamaModel& model = *fixture->model;
  auto executor = LlamaExecutor::create(model, KvBlockConfig{512, 16});
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  LlamaExecutor& exec = **executor;
  ASSERT_TRUE(exec.supports_device_sampling());
  std::mt19937 r(17);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 24; ++i) {
    GenerationRequest q;
    const int len = 5 + r() % 60;
    for (int j = 0; j < len; ++j) q.prompt.push_back(static_cast<int32_t>(r() % exec.vocab_size()));
    q.params.max_tokens = 24;
    q.params.seed = 500 + i;
    q.params.temperature = i % 4 == 0 ? 0.0f : 0.9f;
    if (i % 4 == 2) q.params.top_p = 0.8f;
    if (i % 4 == 3) q.params.top_k = 20;
    if (i % 6 == 5) q.params.logprobs = 1;  // host rows in the same steps
    reqs.push_back(q);
  }
  HostOnlyExecutor host(exec);
  const auto want = run_engine(host, reqs);
  const auto got = run_engine(exec, reqs);
  int same = 0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    if (reqs[i].params.temperature == 0.0f || reqs[i].params.logprobs >= 0) EXPECT_EQ(got[i], want[i]) << i;
    same += got[i] == want[i];
  }
  // A sampled sequence diverges for good after one rounding-boundary difference; allow one.
  EXPECT_GE(same, static_cast<int>(reqs.size()) - 1);
}

}  // namespace
}  // namespace lancet
