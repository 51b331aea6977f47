// LoraAdapter: the PEFT layout read into factor pairs keyed by the base weight's name, the scale
// (alpha / r, alpha / sqrt(r) with rslora), W + scale * B . A against a hand computation, and
// every adapter it cannot apply as written refused with the reason.
#include "io/lora_adapter.h"

#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <random>
#include <vector>

#include "io/safetensors.h"
#include "test_paths.h"

namespace lancet {
namespace {

namespace fs = std::filesystem;

struct Factor {
  std::string module;  // "model.layers.0.self_attn.q_proj"
  std::vector<float> a, b;
  int64_t r, in, out;
};

std::string write_adapter(const std::string& config, const std::vector<Factor>& factors) {
  const std::string dir = testing::make_temp_dir();
  std::ofstream(dir + "/adapter_config.json") << config;
  std::vector<SafetensorsWriteTensor> t;
  for (const Factor& f : factors) {
    const std::string base = "base_model.model." + f.module;
    if (!f.a.empty()) t.push_back({base + ".lora_A.weight", DType::kF32, {f.r, f.in}, f.a.data(), f.a.size() * 4});
    if (!f.b.empty()) t.push_back({base + ".lora_B.weight", DType::kF32, {f.out, f.r}, f.b.data(), f.b.size() * 4});
  }
  EXPECT_TRUE(write_safetensors(dir + "/adapter_model.safetensors", t).ok());
  return dir;
}

// r = 2, in = 3, out = 2.
Factor q_factor() {
  return {"model.layers.0.self_attn.q_proj", {1, 2, 3, 4, 5, 6}, {1, 0, 0.5f, -1}, 2, 3, 2};
}

TEST(LoraAdapter, ReadsFactorsAndAppliesScaledProduct) {
  const std::string dir = write_adapter(R"({"peft_type": "LORA", "r": 2, "lora_alpha": 4, "bias": "none",
                                            "use_dora": false, "modules_to_save": null, "rank_pattern": {}})",
                                        {q_factor()});
  auto a = LoraAdapter::open(dir);
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_EQ((*a)->rank(), 2);
  EXPECT_DOUBLE_EQ((*a)->scale(), 2.0);
  ASSERT_EQ((*a)->factors().size(), 1u);
  EXPECT_TRUE((*a)->factors().count("model.layers.0.self_attn.q_proj.weight"));
  // B . A = [[1, 2, 3], [0.5 - 4, 1 - 5, 1.5 - 6]] = [[1, 2, 3], [-3.5, -4, -4.5]]; times 2, plus W.
  std::vector<float> w = {10, 20, 30, 40, 50, 60};
  ASSERT_TRUE((*a)->apply("model.layers.0.self_attn.q_proj.weight", w.data(), 2, 3).ok());
  EXPECT_EQ(w, (std::vector<float>{12, 24, 36, 33, 42, 51}));
  // A weight the adapter leaves alone, and one whose shape does not fit.
  std::vector<float> v = {1, 2};
  ASSERT_TRUE((*a)->apply("model.layers.0.self_attn.k_proj.weight", v.data(), 1, 2).ok());
  EXPECT_EQ(v, (std::vector<float>{1, 2}));
  EXPECT_FALSE((*a)->apply("model.layers.0.self_attn.q_proj.weight", w.data(), 3, 2).ok());
}

// Rows computed on a pool give the same bits as one thread.
TEST(LoraAdapter, PoolGivesTheSameWeights) {
  Factor f{"model.layers.1.mlp.down_proj", {}, {}, 8, 96, 200};
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  for (int64_t i = 0; i < f.r * f.in; ++i) f.a.push_back(nd(rng));
  for (int64_t i = 0; i < f.out * f.r; ++i) f.b.push_back(nd(rng));
  auto a = LoraAdapter::open(write_adapter(R"({"r": 8, "lora_alpha": 16})", {f}));
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  std::vector<float> w1(static_cast<size_t>(f.out * f.in));
  for (float& v : w1) v = nd(rng);
  std::vector<float> w2 = w1;
  ThreadPool pool(4);
  ASSERT_TRUE((*a)->apply("model.layers.1.mlp.down_proj.weight", w1.data(), f.out, f.in).ok());
  ASSERT_TRUE((*a)->apply("model.layers.1.mlp.down_proj.weight", w2.data(), f.out, f.in, &pool).ok());
  EXPECT_EQ(w1, w2);
}

TEST(LoraAdapter, RsloraScalesBySqrtRank) {
  const std::string dir = write_adapter(R"({"r": 2, "lora_alpha": 4, "use_rslora": true})", {q_factor()});
  auto a = LoraAdapter::open(dir + "/adapter_config.json");
  ASSERT_TRUE(a.ok()) << a.status().to_string();
  EXPECT_DOUBLE_EQ((*a)->scale(), 4.0 / std::sqrt(2.0));
}

TEST(LoraAdapter, RefusesWhatItCannotApplyAsWritten) {
  struct Case {
    std::string config;
    std::vector<Factor> factors;
    std::string needle;
  };
  Factor only_a = q_factor();
  only_a.b.clear();
  Factor embed = q_factor();
  embed.module = "model.embed_tokens";
  Factor wrong_rank = q_factor();
  wrong_rank.r = 3;
  wrong_rank.a.resize(9, 0.0f);
  wrong_rank.b.resize(6, 0.0f);
  const std::string ok = R"({"r": 2, "lora_alpha": 4})";
  const std::vector<Case> cases = {
      {R"({"r": 2, "lora_alpha": 4, "use_dora": true})", {q_factor()}, "use_dora"},
      {R"({"r": 2, "lora_alpha": 4, "bias": "lora_only"})", {q_factor()}, "bias"},
      {R"({"r": 2, "lora_alpha": 4, "modules_to_save": ["lm_head"]})", {q_factor()}, "modules_to_save"},
      {R"({"r": 2, "lora_alpha": 4, "rank_pattern": {"q_proj": 8}})", {q_factor()}, "rank_pattern"},
      {R"({"r": 2, "lora_alpha": 4, "fan_in_fan_out": true})", {q_factor()}, "fan_in_fan_out"},
      {R"({"peft_type": "IA3", "r": 2, "lora_alpha": 4})", {q_factor()}, "IA3"},
      {R"({"lora_alpha": 4})", {q_factor()}, "'r'"},
      {R"({"r": 2})", {q_factor()}, "lora_alpha"},
      {ok, {only_a}, "lora_A only"},
      {ok, {embed}, "embed_tokens"},
      {ok, {wrong_rank}, "r = 2"},
      {"not json", {q_factor()}, "adapter_config.json"},
  };
  for (const Case& c : cases) {
    auto a = LoraAdapter::open(write_adapter(c.config, c.factors));
    ASSERT_FALSE(a.ok()) << c.config;
    EXPECT_NE(a.status().message().find(c.needle), std::string::npos) << c.config << ": " << a.status().to_string();
  }
  const std::string missing = testing::make_temp_dir();
  std::ofstream(missing + "/adapter_config.json") << ok;
  EXPECT_EQ(LoraAdapter::open(missing).status().code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace lancet
