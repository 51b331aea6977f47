// Rope inverse frequencies for every scaling type vs an independent numpy script that follows
// transformers' `_compute_*_rope_parameters` formulas (float32 tensors, python scalars), and
// table values vs cos/sin of the float32 angle.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <sstream>

#include "model/rope.h"
#include "test_paths.h"

namespace lancet {
namespace {

const char* kScript = R"PY(
import math, sys, numpy as np
f32 = np.float32
def default(base, dim):
    return f32(1.0) / (f32(base) ** (np.arange(0, dim, 2).astype(f32) / f32(dim)))
kind, base, dim = sys.argv[1], float(sys.argv[2]), int(sys.argv[3])
a = [float(x) for x in sys.argv[4:]]
if kind == "default":
    inv = default(base, dim)
elif kind == "linear":
    inv = default(base, dim) / f32(a[0])
elif kind == "dynamic":
    factor, orig, seq = a
    if seq > orig:
        base = base * ((factor * seq / orig) - (factor - 1)) ** (dim / (dim - 2))
    inv = default(base, dim)
elif kind == "llama3":
    factor, low, high, old = a
    inv = default(base, dim)
    wavelen = f32(2 * math.pi) * (f32(1) / inv)
    inv_l = np.where(wavelen > f32(old / low), inv / f32(factor), inv)
    smooth = ((f32(1) / wavelen) * f32(old) - f32(low)) / f32(high - low)
    smoothed = ((f32(1) - smooth) * inv_l) / f32(factor) + smooth * inv_l
    med = ~(wavelen < f32(old / high)) & ~(wavelen > f32(old / low))
    inv = np.where(med, smoothed, inv_l)
elif kind == "yarn":
    factor, orig, beta_fast, beta_slow = a
    def cdim(rot): return (dim * math.log(orig / (rot * 2 * math.pi))) / (2 * math.log(base))
    low, high = max(math.floor(cdim(beta_fast)), 0), min(math.ceil(cdim(beta_slow)), dim - 1)
    if low == high: high += 0.001
    pf = f32(base) ** (np.arange(0, dim, 2).astype(f32) / f32(dim))
    extra, inter = f32(1) / pf, f32(1) / (f32(factor) * pf)
    ramp = np.clip((np.arange(dim // 2).astype(f32) - f32(low)) / f32(high - low), 0, 1).astype(f32)
    ef = f32(1) - ramp
    inv = inter * (f32(1) - ef) + extra * ef
    print("attn %.9g" % (0.1 * math.log(factor) + 1.0))
print(" ".join("%.9e" % x for x in np.asarray(inv, dtype=f32)))
)PY";

std::vector<double> run_script(const std::string& args, double* attn = nullptr) {
  const std::string dir = testing::make_temp_dir();
  {
    std::ofstream(dir + "/rope_ref.py") << kScript;
  }
  std::string out;
  const int rc = testing::run_command(testing::python() + " " + dir + "/rope_ref.py " + args, &out);
  EXPECT_EQ(rc, 0) << out;
  std::istringstream in(out);
  std::vector<double> v;
  std::string tok;
  while (in >> tok) {
    if (tok == "attn") {
      double a;
      in >> a;
      if (attn) *attn = a;
      continue;
    }
    v.push_back(std::stod(tok));
  }
  return v;
}

void expect_inv_freq(const ModelConfig& cfg, int64_t seq_len, const std::string& args, double* attn_out = nullptr) {
  double attn = 1.0;
  const std::vector<double> ref = run_script(args, &attn);
  auto got = compute_rope_inv_freq(cfg, seq_len);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(ref.size(), got->inv_freq.size());
  for (size_t i = 0; i < ref.size(); ++i)
    EXPECT_NEAR(got->inv_freq[i], ref[i], std::fabs(ref[i]) * 3e-7) << args << " i=" << i;
  EXPECT_NEAR(got->attention_factor, attn, 1e-6) << args;
}

ModelConfig base_cfg(double theta, int64_t head_dim) {
  ModelConfig c;
  c.rope_theta = theta;
  c.head_dim = head_dim;
  c.max_position_embeddings = 16384;
  return c;
}

TEST(Rope, DefaultMatchesHfFormula) { expect_inv_freq(base_cfg(500000, 128), 10, "default 500000 128"); }

TEST(Rope, LinearMatchesHfFormula) {
  ModelConfig c = base_cfg(10000, 64);
  c.rope_scaling.type = RopeType::kLinear;
  c.rope_scaling.factor = 4;
  expect_inv_freq(c, 10, "linear 10000 64 4");
}

TEST(Rope, Llama3MatchesHfFormula) {
  ModelConfig c = base_cfg(500000, 128);
  c.rope_scaling.type = RopeType::kLlama3;
  c.rope_scaling.factor = 8;
  c.rope_scaling.low_freq_factor = 1;
  c.rope_scaling.high_freq_factor = 4;
  c.rope_scaling.original_max_position_embeddings = 8192;
  expect_inv_freq(c, 10, "llama3 500000 128 8 1 4 8192");
  c.rope_scaling.factor = 32;
  c.head_dim = 64;
  expect_inv_freq(c, 10, "llama3 500000 64 32 1 4 8192");
}

TEST(Rope, YarnMatchesHfFormula) {
  ModelConfig c = base_cfg(10000, 64);
  c.rope_scaling.type = RopeType::kYarn;
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_position_embeddings = 4096;
  expect_inv_freq(c, 10, "yarn 10000 64 4 4096 32 1");
  c.rope_theta = 1000000;
  c.head_dim = 128;
  c.rope_scaling.factor = 8;
  expect_inv_freq(c, 10, "yarn 1000000 128 8 4096 32 1");
}

TEST(Rope, DynamicRescalesOnlyPastOriginalContext) {
  ModelConfig c = base_cfg(10000, 64);
  c.rope_scaling.type = RopeType::kDynamic;
  c.rope_scaling.factor = 2;
  c.max_position_embeddings = 4096;
  expect_inv_freq(c, 4096, "dynamic 10000 64 2 4096 4096");   // not past: plain
  expect_inv_freq(c, 10000, "dynamic 10000 64 2 4096 10000");  // rescaled base
}

TEST(Rope, TableIsCosSinOfFloatAngleTimesAttentionFactor) {
  ModelConfig c = base_cfg(10000, 64);
  c.rope_scaling.type = RopeType::kYarn;
  c.rope_scaling.factor = 4;
  c.rope_scaling.original_max_position_embeddings = 4096;
  auto t = build_rope_table(c, 9001);
  ASSERT_TRUE(t.ok());
  const float attn = static_cast<float>(0.1 * std::log(4.0) + 1.0);
  EXPECT_FLOAT_EQ(t->attention_factor, attn);
  for (int64_t p : {0, 1, 777, 9000}) {
    for (int64_t i : {0, 5, 31}) {
      const float angle = static_cast<float>(p) * t->inv_freq[i];
      EXPECT_FLOAT_EQ(t->cos[p * 32 + i], static_cast<float>(std::cos(static_cast<double>(angle))) * attn);
      EXPECT_FLOAT_EQ(t->sin[p * 32 + i], static_cast<float>(std::sin(static_cast<double>(angle))) * attn);
    }
  }
  // Position 0 is the identity rotation scaled by the attention factor.
  EXPECT_FLOAT_EQ(t->cos[5], attn);
  EXPECT_FLOAT_EQ(t->sin[5], 0.f);
}

TEST(Rope, FreqFactorsDivideDefaultFrequencies) {
  ModelConfig c = base_cfg(500000, 8);
  const float factors[4] = {1.f, 2.f, 4.f, 8.f};
  auto plain = compute_rope_inv_freq(c, 1);
  auto scaled = compute_rope_inv_freq(c, 1, factors);
  ASSERT_TRUE(plain.ok() && scaled.ok());
  for (int i = 0; i < 4; ++i) EXPECT_FLOAT_EQ(scaled->inv_freq[i], plain->inv_freq[i] / factors[i]);
  EXPECT_FLOAT_EQ(plain->inv_freq[1], static_cast<float>(std::pow(500000.0, -0.25)));
}

TEST(Rope, Bf16RoundingOfFrequencies) {
  ModelConfig c = base_cfg(500000, 64);
  auto t = build_rope_table(c, 4, nullptr, DType::kBF16);
  ASSERT_TRUE(t.ok());
  for (float x : t->inv_freq) EXPECT_EQ(x, bf16_to_f32(f32_to_bf16(x)));
  EXPECT_NE(t->inv_freq[3], compute_rope_inv_freq(c, 4)->inv_freq[3]);
}

TEST(Rope, RejectsBadConfig) {
  ModelConfig c = base_cfg(10000, 63);
  EXPECT_FALSE(compute_rope_inv_freq(c, 1).ok());
  c = base_cfg(10000, 64);
  c.rope_scaling.type = RopeType::kLlama3;  // missing original_max_position_embeddings
  EXPECT_FALSE(compute_rope_inv_freq(c, 1).ok());
}

}  // namespace
}  // namespace lancet
