// --load-format dummy: every tensor of the config's architecture, bf16 with the intended
// spread, the same bytes for the same seed whatever the thread count, different for another.
#include "io/dummy_source.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "core/thread_pool.h"
#include "io/llama_tensors.h"
#include "test_paths.h"

namespace lancet {
namespace {

TEST(DummySource, FullTensorTableWithExpectedStatistics) {
  auto src = open_dummy_source(testing::fixture_dir("tiny-llama3") + "/config.json", 5);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_TRUE(check_llama_tensors((*src)->config(), (*src)->tensors()).ok());
  const TensorView* q = (*src)->find("model.layers.1.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->dtype, DType::kBF16);
  const uint16_t* v = static_cast<const uint16_t*>(q->data);
  double sum = 0, sq = 0, maxabs = 0;
  for (int64_t i = 0; i < q->numel(); ++i) {
    const double x = bf16_to_f32(v[i]);
    sum += x;
    sq += x * x;
    maxabs = std::max(maxabs, std::fabs(x));
  }
  const double n = static_cast<double>(q->numel());
  EXPECT_NEAR(sum / n, 0.0, 1e-3);
  EXPECT_NEAR(std::sqrt(sq / n), 0.02, 1e-3);
  EXPECT_LE(maxabs, 0.02 * std::sqrt(3.0) * 1.01);
  const TensorView* norm = (*src)->find("model.norm.weight");
  ASSERT_NE(norm, nullptr);
  EXPECT_EQ(bf16_to_f32(static_cast<const uint16_t*>(norm->data)[7]), 1.0f);
}

TEST(DummySource, SeedDecidesTheBytesNotTheThreadCount) {
  const std::string cfg = testing::fixture_dir("tiny-gqa8") + "/config.json";
  set_default_threads(1);
  auto a = open_dummy_source(cfg, 1);
  set_default_threads(4);
  auto b = open_dummy_source(cfg, 1);
  auto c = open_dummy_source(cfg, 2);
  set_default_threads(0);
  ASSERT_TRUE(a.ok() && b.ok() && c.ok());
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  const TensorView* ta = (*a)->find(name);
  const TensorView* tb = (*b)->find(name);
  const TensorView* tc = (*c)->find(name);
  ASSERT_EQ(ta->nbytes, tb->nbytes);
  EXPECT_EQ(std::memcmp(ta->data, tb->data, ta->nbytes), 0);
  EXPECT_NE(std::memcmp(ta->data, tc->data, ta->nbytes), 0);
}

// FP8 dummy weights: E4M3 layer weights with per-channel scales (the compressed-tensors
// layout the loader checks), dequantizing to the same spread as the BF16 ones; embedding,
// lm_head and norms stay BF16.
TEST(DummySource, Fp8LinearWeightsWithPerChannelScales) {
  DummySourceOptions o;
  o.seed = 3;
  o.fp8_linear = true;
  auto src = open_dummy_source(testing::fixture_dir("tiny-llama3") + "/config.json", o);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_TRUE(check_llama_tensors((*src)->config(), (*src)->tensors()).ok());
  const TensorView* w = (*src)->find("model.layers.1.mlp.down_proj.weight");
  const TensorView* s = (*src)->find("model.layers.1.mlp.down_proj.weight_scale");
  ASSERT_NE(w, nullptr);
  ASSERT_NE(s, nullptr);
  EXPECT_EQ(w->dtype, DType::kF8E4M3);
  ASSERT_EQ(s->dtype, DType::kF32);
  EXPECT_EQ(s->shape, (std::vector<int64_t>{w->shape[0], 1}));
  const float scale = static_cast<const float*>(s->data)[5];
  EXPECT_FLOAT_EQ(scale, 0.02f * std::sqrt(3.0f) / 448.0f);
  const uint8_t* codes = static_cast<const uint8_t*>(w->data);
  double sq = 0, maxabs = 0;
  for (int64_t i = 0; i < w->numel(); ++i) {
    const double x = fp8e4m3_to_f32(codes[i]) * scale;
    ASSERT_TRUE(std::isfinite(x));
    sq += x * x;
    maxabs = std::max(maxabs, std::fabs(x));
  }
  EXPECT_NEAR(std::sqrt(sq / static_cast<double>(w->numel())), 0.02, 1.5e-3);
  EXPECT_LE(maxabs, 0.02 * std::sqrt(3.0) * 1.01);
  EXPECT_GT(maxabs, 0.02 * std::sqrt(3.0) * 0.9);
  EXPECT_EQ((*src)->find("model.embed_tokens.weight")->dtype, DType::kBF16);
  EXPECT_EQ((*src)->find("model.norm.weight")->dtype, DType::kBF16);
}

}  // namespace
}  // namespace lancet
