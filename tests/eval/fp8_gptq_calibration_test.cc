// Error-compensating FP8 rounding end to end: the second moments the calibration pass
// accumulates equal X^T X of the rows it saw; `lancet quantize --fp8 --calibrate` writes GPTQ
// weights by default (valid E4M3 codes, the round-to-nearest scales, the same layout) that load
// and compute bit for bit the logits of online quantization with the same calibration; they
// sit closer to the unquantized model than round-to-nearest on the calibration prompts; and
// --fp8-rounding nearest gives the round-to-nearest bytes.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <nlohmann/json.hpp>
#include <random>

#include "backend/backend.h"
#include "eval/activation_moments.h"
#include "eval/fp8_gptq_calibration.h"
#include "eval/precision_eval.h"
#include "io/model_source.h"
#include "runner/kv_calibration.h"
#include "model/llama_model.h"
#include "quant/fp8_weights.h"
#include "test_paths.h"

namespace lancet {
namespace {

std::vector<std::vector<int32_t>> prompts() {
  std::vector<int32_t> a = kv_calibration_random_tokens(1024, 200);
  return {std::vector<int32_t>(a.begin(), a.begin() + 9), std::vector<int32_t>(a.begin() + 9, a.begin() + 130),
          std::vector<int32_t>(a.begin() + 130, a.end())};
}

TEST(ActivationMoments, SumsXtXOverEveryObservedRow) {
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  const int64_t k = 37;
  ActivationMomentObserver obs(**be, 2, /*batch_rows=*/5);
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<double> want(k * k, 0.0);
  int64_t total = 0;
  for (int64_t rows : {3, 1, 8, 2}) {  // batches that straddle the 5-row flushes
    std::vector<float> x(rows * k);
    for (float& v : x) v = nd(rng);
    ASSERT_TRUE(obs.observe(1, LinearInput::kDown, x.data(), rows, k).ok());
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t a = 0; a < k; ++a)
        for (int64_t b = 0; b < k; ++b) want[a * k + b] += double(x[t * k + a]) * x[t * k + b];
    total += rows;
  }
  ASSERT_TRUE(obs.finish().ok());
  const std::vector<float>* h = obs.moments(1, LinearInput::kDown);
  ASSERT_NE(h, nullptr);
  EXPECT_EQ(obs.rows_seen(1, LinearInput::kDown), total);
  EXPECT_EQ(obs.cols(1, LinearInput::kDown), k);
  for (int64_t i = 0; i < k * k; ++i) EXPECT_NEAR((*h)[i], want[i], 1e-4 * (1 + std::fabs(want[i]))) << i;
  EXPECT_EQ(obs.moments(0, LinearInput::kDown), nullptr);
  EXPECT_EQ(obs.moments(1, LinearInput::kQkv), nullptr);
  EXPECT_FALSE(obs.saw_non_finite());
  std::vector<float> bad(k, 1.f);
  bad[4] = NAN;
  ASSERT_TRUE(obs.observe(0, LinearInput::kO, bad.data(), 1, k).ok());
  EXPECT_TRUE(obs.saw_non_finite());
  std::vector<float> wide(k + 1, 1.f);
  EXPECT_FALSE(obs.observe(1, LinearInput::kDown, wide.data(), 1, k + 1).ok());
  obs.release(1, LinearInput::kDown);
  EXPECT_EQ(obs.moments(1, LinearInput::kDown), nullptr);
}

TEST(Fp8GptqCheckpoint, LoadsAndMatchesOnlineGptqAndBeatsRoundToNearest) {
  const std::string dir = testing::fixture_dir("tiny-llama32");
  const std::string tmp = testing::make_temp_dir();
  const auto ps = prompts();
  {
    std::ofstream f(tmp + "/prompts.jsonl");
    for (const auto& p : ps) f << nlohmann::json{{"prompt_ids", p}}.dump() << "\n";
  }
  std::string log;
  const std::string q = testing::lancet_binary() + " quantize --fp8 --calibrate " + tmp + "/prompts.jsonl ";
  ASSERT_EQ(testing::run_command(q + dir + " " + tmp + "/gptq 2>&1", &log), 0) << log;
  EXPECT_NE(log.find("gptq factors for"), std::string::npos) << log;
  ASSERT_EQ(testing::run_command(q + "--fp8-rounding nearest " + dir + " " + tmp + "/rtn 2>&1", &log), 0) << log;
  EXPECT_EQ(log.find("gptq factors for"), std::string::npos) << log;

  auto src = open_model_source(dir);
  auto gq = open_model_source(tmp + "/gptq");
  auto rq = open_model_source(tmp + "/rtn");
  ASSERT_TRUE(src.ok() && gq.ok() && rq.ok()) << gq.status().to_string();
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  auto factors = calibrate_fp8_gptq(**src, **be, ps);
  ASSERT_TRUE(factors.ok()) << factors.status().to_string();
  const int64_t L = (*src)->config().num_layers;
  EXPECT_EQ(factors->size(), static_cast<size_t>(7 * L));
  EXPECT_EQ(factors->find("model.layers.0.self_attn.q_proj.weight"),
            factors->find("model.layers.0.self_attn.v_proj.weight"));
  EXPECT_EQ(factors->find("model.layers.1.mlp.gate_proj.weight"), factors->find("model.layers.1.mlp.up_proj.weight"));
  EXPECT_NE(factors->find("model.layers.1.mlp.up_proj.weight"), factors->find("model.layers.1.mlp.down_proj.weight"));

  int64_t differ = 0, total = 0;
  for (const auto& [name, t] : (*src)->tensors()) {
    if (!fp8_quantizes_tensor(name)) continue;
    const TensorView* g = (*gq)->find(name);
    const TensorView* r = (*rq)->find(name);
    const std::string sn = name.substr(0, name.size() - 6) + "weight_scale";
    ASSERT_TRUE(g && r && (*gq)->find(sn)) << name;
    EXPECT_EQ(g->dtype, DType::kF8E4M3);
    EXPECT_EQ(g->shape, t.shape);
    // Same scales (absmax), so the same layout and kernels; the codes move.
    const TensorView* gs = (*gq)->find(sn);
    EXPECT_EQ(gs->dtype, DType::kF32);
    EXPECT_EQ(gs->shape, (std::vector<int64_t>{t.shape[0], 1}));
    EXPECT_EQ(std::memcmp(gs->data, (*rq)->find(sn)->data, gs->nbytes), 0) << name;
    auto ref = quantize_weight_fp8(t, name);
    ASSERT_TRUE(ref.ok());
    EXPECT_EQ(std::memcmp(r->data, ref->weight.bytes.data(), r->nbytes), 0) << name << ": nearest is RTN";
    const auto* gb = static_cast<const uint8_t*>(g->data);
    const auto* rb = static_cast<const uint8_t*>(r->data);
    for (uint64_t i = 0; i < g->nbytes; ++i) {
      ASSERT_NE(gb[i] & 0x7f, 0x7f) << name << ": NaN code at " << i;
      differ += gb[i] != rb[i];
    }
    total += static_cast<int64_t>(g->nbytes);
  }
  EXPECT_GT(differ, total / 10) << "error compensation moves many codes";

  LlamaModelOptions plain, online, rtn_online;
  online.weights.quantize_fp8 = true;
  online.weights.fp8_gptq = &*factors;
  auto m_ref = LlamaModel::create(**src, **be, plain);
  auto m_ckpt = LlamaModel::create(**gq, **be, plain);
  auto m_rtn = LlamaModel::create(**rq, **be, plain);
  auto m_online = LlamaModel::create(**src, **be, online);
  ASSERT_TRUE(m_ref.ok() && m_ckpt.ok() && m_rtn.ok() && m_online.ok());
  const int64_t V = (*src)->config().vocab_size;
  LogitAgreement g_vs_ref, r_vs_ref;
  for (const auto& p : ps) {
    auto a = sequence_logits(**m_online, **be, p, DType::kF32, 16, 0);
    auto b = sequence_logits(**m_ckpt, **be, p, DType::kF32, 16, 0);
    auto r = sequence_logits(**m_rtn, **be, p, DType::kF32, 16, 0);
    auto ref = sequence_logits(**m_ref, **be, p, DType::kF32, 16, 0);
    ASSERT_TRUE(a.ok() && b.ok() && r.ok() && ref.ok());
    EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * 4), 0) << "written != online";
    accumulate_agreement(ref->data(), b->data(), static_cast<int64_t>(p.size()), V, &g_vs_ref);
    accumulate_agreement(ref->data(), r->data(), static_cast<int64_t>(p.size()), V, &r_vs_ref);
  }
  EXPECT_LT(1 - g_vs_ref.mean_cosine, 1 - r_vs_ref.mean_cosine)
      << "gptq " << g_vs_ref.mean_cosine << " rtn " << r_vs_ref.mean_cosine;
  EXPECT_LT(g_vs_ref.mean_kl, r_vs_ref.mean_kl);
}

TEST(Fp8GptqCheckpoint, RoundingFlagIsChecked) {
  const std::string dir = testing::fixture_dir("tiny-llama32");
  const std::string tmp = testing::make_temp_dir();
  std::string log;
  const std::string q = testing::lancet_binary() + " quantize --fp8 ";
  EXPECT_EQ(testing::run_command(q + "--fp8-rounding gptq " + dir + " " + tmp + "/a 2>&1", &log), 2) << log;
  EXPECT_NE(log.find("--fp8-rounding gptq needs --calibrate"), std::string::npos) << log;
  EXPECT_EQ(testing::run_command(q + "--fp8-rounding best " + dir + " " + tmp + "/b 2>&1", &log), 2) << log;
  EXPECT_NE(log.find("--fp8-rounding must be nearest or gptq"), std::string::npos) << log;
}

TEST(Fp8GptqCalibration, MemoryEstimateCountsOneFactorPerLinearInput) {
  // Llama-3-8B: per layer q/k/v and gate/up share 4096^2 factors, o reads 4096^2, down 14336^2;
  // plus one 14336^2 factor in flight.
  ModelConfig c;
  c.hidden_size = 4096;
  c.intermediate_size = 14336;
  c.num_layers = 32;
  c.num_heads = 32;
  c.head_dim = 128;
  const int64_t per_layer = 3 * int64_t{4096} * 4096 + int64_t{14336} * 14336;
  EXPECT_EQ(fp8_gptq_calibration_bytes(c), (32 * per_layer + int64_t{14336} * 14336) * 4);
  EXPECT_GT(fp8_gptq_calibration_bytes(c), int64_t{24} << 30);  // more than a 24 GiB machine holds
}

}  // namespace
}  // namespace lancet
