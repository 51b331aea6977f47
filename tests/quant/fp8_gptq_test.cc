// Error-compensating FP8 rounding (quant/fp8_gptq.h): on a random layer with correlated
// inputs it gives a lower output error ||X W^T - X Q^T|| than round-to-nearest, every code is a
// finite E4M3 value within the row's range, the factor is the Cholesky factor of the damped
// H^-1, a diagonal H reproduces round-to-nearest bit for bit, and singular or bad second
// moments fall back to more damping or give a clear Status.
#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "quant/fp8_gptq.h"
#include "quant/fp8_quantize.h"

namespace lancet {
namespace {

// Inputs [n, k] whose columns are strongly correlated (a random mix of k / 4 sources plus a
// little noise) and of different magnitudes, as a norm's output is.
std::vector<float> correlated_inputs(int64_t n, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 1.f);
  const int64_t src = k / 4;
  std::vector<float> mix(src * k), x(n * k);
  for (float& v : mix) v = nd(rng);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<float> z(src);
    for (float& v : z) v = nd(rng);
    for (int64_t c = 0; c < k; ++c) {
      float s = 0.1f * nd(rng);
      for (int64_t j = 0; j < src; ++j) s += z[j] * mix[j * k + c];
      x[t * k + c] = s * (1.f + 0.1f * static_cast<float>(c % 7));
    }
  }
  return x;
}

std::vector<float> moments(const std::vector<float>& x, int64_t n, int64_t k) {
  std::vector<float> h(k * k, 0.f);
  for (int64_t t = 0; t < n; ++t)
    for (int64_t a = 0; a < k; ++a)
      for (int64_t b = 0; b < k; ++b) h[a * k + b] += x[t * k + a] * x[t * k + b];
  return h;
}

// ||X W^T - X Q^T||_F with Q = dequantized codes.
double output_error(const std::vector<float>& x, int64_t n, const std::vector<float>& w, const std::vector<uint8_t>& q,
                    const std::vector<float>& scales, int64_t rows, int64_t k) {
  double e = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t r = 0; r < rows; ++r) {
      double d = 0;
      for (int64_t c = 0; c < k; ++c)
        d += static_cast<double>(x[t * k + c]) * (w[r * k + c] - fp8e4m3_to_f32(q[r * k + c]) * scales[r]);
      e += d * d;
    }
  return std::sqrt(e);
}

std::vector<float> random_weight(int64_t rows, int64_t k, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.f, 0.05f);
  std::vector<float> w(rows * k);
  for (float& v : w) v = nd(rng);
  return w;
}

TEST(Fp8Gptq, LowersTheOutputErrorOfRoundToNearest) {
  const int64_t n = 512, k = 96, rows = 40;
  const auto x = correlated_inputs(n, k, 1);
  const auto h = moments(x, n, k);
  const auto w = random_weight(rows, k, 2);
  std::vector<uint8_t> q_rtn(rows * k), q_gptq(rows * k);
  std::vector<float> s_rtn(rows), s_gptq(rows);
  ASSERT_TRUE(quantize_fp8_per_channel(w.data(), rows, k, "w", q_rtn.data(), s_rtn.data()).ok());
  for (bool act_order : {false, true}) {
    Fp8GptqOptions o;
    o.act_order = act_order;
    auto f = fp8_gptq_factor(h.data(), k, "h", o);
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    ASSERT_TRUE(quantize_fp8_gptq(w.data(), rows, k, *f, "w", q_gptq.data(), s_gptq.data()).ok());
    EXPECT_EQ(s_gptq, s_rtn) << "the per-row scales stay the absmax scales";
    const double e_rtn = output_error(x, n, w, q_rtn, s_rtn, rows, k);
    const double e_gptq = output_error(x, n, w, q_gptq, s_gptq, rows, k);
    EXPECT_LT(e_gptq, 0.6 * e_rtn) << "act_order " << act_order << ": rtn " << e_rtn << " gptq " << e_gptq;
    // Every code is a finite E4M3 value, at most 448 in magnitude.
    for (uint8_t c : q_gptq) {
      EXPECT_NE(c & 0x7f, 0x7f) << "NaN code";
      EXPECT_LE(std::fabs(fp8e4m3_to_f32(c)), kFp8E4M3Max);
    }
  }
}

TEST(Fp8Gptq, FactorIsTheCholeskyFactorOfTheDampedInverse) {
  const int64_t n = 200, k = 48;
  const auto x = correlated_inputs(n, k, 3);
  const auto h = moments(x, n, k);
  Fp8GptqOptions o;
  auto f = fp8_gptq_factor(h.data(), k, "h", o);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(f->damp_used, o.damp);
  double mean_diag = 0;
  for (int64_t i = 0; i < k; ++i) mean_diag += h[i * k + i] / k;
  // (U^T U) (P H P^T + damp I) = I, in the quantization order P.
  double worst = 0;
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < k; ++j) {
      double v = 0;
      for (int64_t m = 0; m < k; ++m) {
        double uu = 0;
        for (int64_t p = 0; p <= std::min(i, m); ++p) uu += double(f->u[p * k + i]) * f->u[p * k + m];
        double hm = h[f->order[m] * k + f->order[j]];
        if (m == j) hm += o.damp * mean_diag;
        v += uu * hm;
      }
      worst = std::max(worst, std::fabs(v - (i == j ? 1.0 : 0.0)));
      if (j < i) EXPECT_EQ(f->u[i * k + j], 0.f);
    }
  EXPECT_LT(worst, 2e-3);
  // act order: decreasing diagonal.
  for (int64_t i = 1; i < k; ++i) EXPECT_GE(h[f->order[i - 1] * (k + 1)], h[f->order[i] * (k + 1)]);
}

TEST(Fp8Gptq, DiagonalMomentsGiveRoundToNearest) {
  const int64_t k = 64, rows = 20;
  std::vector<float> h(k * k, 0.f);
  for (int64_t i = 0; i < k; ++i) h[i * k + i] = 1.f + static_cast<float>(i % 5);
  const auto w = random_weight(rows, k, 4);
  auto f = fp8_gptq_factor(h.data(), k, "h");
  ASSERT_TRUE(f.ok());
  std::vector<uint8_t> q1(rows * k), q2(rows * k);
  std::vector<float> s1(rows), s2(rows);
  ASSERT_TRUE(quantize_fp8_per_channel(w.data(), rows, k, "w", q1.data(), s1.data()).ok());
  ASSERT_TRUE(quantize_fp8_gptq(w.data(), rows, k, *f, "w", q2.data(), s2.data()).ok());
  EXPECT_EQ(q1, q2);
  EXPECT_EQ(s1, s2);
}

TEST(Fp8Gptq, SingularMomentsAreDampedOrRefused) {
  // Rank 3 from 3 rows, with a dead input column; no damping asked for: the factor still
  // comes out (with the damping raised) and the quantization is valid.
  const int64_t n = 3, k = 16, rows = 4;
  auto x = correlated_inputs(n, k, 5);
  for (int64_t t = 0; t < n; ++t) x[t * k + 7] = 0.f;
  const auto h = moments(x, n, k);
  Fp8GptqOptions o;
  o.damp = 0;
  auto f = fp8_gptq_factor(h.data(), k, "layer0.qkv", o);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_GT(f->damp_used, 0.0);
  const auto w = random_weight(rows, k, 6);
  std::vector<uint8_t> q(rows * k);
  std::vector<float> s(rows);
  ASSERT_TRUE(quantize_fp8_gptq(w.data(), rows, k, *f, "w", q.data(), s.data()).ok());
  for (uint8_t c : q) EXPECT_NE(c & 0x7f, 0x7f);

  const std::vector<float> zero(k * k, 0.f);
  auto z = fp8_gptq_factor(zero.data(), k, "layer0.qkv");
  ASSERT_FALSE(z.ok());
  EXPECT_EQ(z.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(z.status().message().find("layer0.qkv"), std::string::npos) << z.status().to_string();

  // An indefinite matrix (negative eigenvalue far past any damping) is refused by name.
  std::vector<float> bad(k * k, 0.f);
  for (int64_t i = 0; i < k; ++i) bad[i * k + i] = 1.f;
  bad[0 * k + 1] = bad[1 * k + 0] = 1000.f;
  auto b = fp8_gptq_factor(bad.data(), k, "layer1.o");
  ASSERT_FALSE(b.ok());
  EXPECT_EQ(b.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_NE(b.status().message().find("singular"), std::string::npos) << b.status().to_string();

  std::vector<float> nan = h;
  nan[5] = NAN;
  EXPECT_EQ(fp8_gptq_factor(nan.data(), k, "h").status().code(), StatusCode::kInvalidArgument);
}

TEST(Fp8Gptq, BadWeightsAreErrors) {
  const int64_t k = 8, rows = 2;
  std::vector<float> h(k * k, 0.f);
  for (int64_t i = 0; i < k; ++i) h[i * k + i] = 1.f;
  auto f = fp8_gptq_factor(h.data(), k, "h");
  ASSERT_TRUE(f.ok());
  std::vector<float> w(rows * k, 0.5f);
  w[1 * k + 3] = INFINITY;
  std::vector<uint8_t> q(rows * k);
  std::vector<float> s(rows);
  Status st = quantize_fp8_gptq(w.data(), rows, k, *f, "model.layers.0.mlp.up_proj.weight", q.data(), s.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("[1, 3]"), std::string::npos) << st.to_string();
  std::vector<float> w2(rows * (k + 1), 0.5f);
  EXPECT_EQ(quantize_fp8_gptq(w2.data(), rows, k + 1, *f, "w", q.data(), s.data()).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lancet
