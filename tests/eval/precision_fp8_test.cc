// FP8 checkpoints end to end: `lancet quantize --fp8` writes the compressed-tensors layout
// (checked here field by field), the loader reads it back, and the written checkpoint computes
// exactly the logits of online quantization (`--quantization fp8`) of the same source; both stay
// close to the HF golden logits of the fixtures. The GGUF route (SmolLM2 Q4_1 -> HF FP8) matches
// online quantization of the GGUF file.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>
#include <nlohmann/json.hpp>

#include "eval/golden_eval.h"
#include "eval/precision_eval.h"
#include "io/model_source.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "quant/fp8_weights.h"
#include "test_paths.h"

namespace lancet {
namespace {

std::string quantize_to_temp(const std::string& input) {
  const std::string out = testing::make_temp_dir() + "/fp8";
  std::string log;
  const int rc = testing::run_command(testing::lancet_binary() + " quantize --fp8 " + input + " " + out, &log);
  EXPECT_EQ(rc, 0) << log;
  return out;
}

std::vector<int32_t> golden_ids(const SafetensorsFile& g, const std::string& name) {
  const TensorView* t = g.find(name);
  EXPECT_TRUE(t != nullptr) << name;
  if (!t) return {};
  std::vector<int32_t> v(t->numel());
  std::memcpy(v.data(), t->data, v.size() * 4);
  return v;
}

class Fp8Fixture : public ::testing::TestWithParam<std::string> {};

TEST_P(Fp8Fixture, ConverterLayoutLoadsAndMatchesOnlineQuantization) {
  const std::string dir = testing::fixture_dir(GetParam());
  const std::string out = quantize_to_temp(dir);

  // config.json: the FP8_DYNAMIC compressed-tensors description vLLM reads.
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out + "/config.json"));
  const auto& qc = cfg["quantization_config"];
  EXPECT_EQ(qc["quant_method"], "compressed-tensors");
  EXPECT_EQ(qc["format"], "float-quantized");
  EXPECT_EQ(qc["ignore"], nlohmann::json::array({"lm_head"}));
  const auto& g = qc["config_groups"]["group_0"];
  EXPECT_EQ(g["targets"], nlohmann::json::array({"Linear"}));
  EXPECT_EQ(g["weights"]["num_bits"], 8);
  EXPECT_EQ(g["weights"]["type"], "float");
  EXPECT_EQ(g["weights"]["strategy"], "channel");
  EXPECT_EQ(g["weights"]["symmetric"], true);
  EXPECT_EQ(g["input_activations"]["dynamic"], true);
  EXPECT_EQ(g["input_activations"]["strategy"], "token");
  nlohmann::json orig = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
  EXPECT_EQ(cfg["hidden_size"], orig["hidden_size"]);

  auto src = open_model_source(dir);
  auto q = open_model_source(out);
  ASSERT_TRUE(src.ok() && q.ok()) << q.status().to_string();
  EXPECT_EQ((*q)->config().quant.method, QuantMethod::kCompressedTensors);
  EXPECT_EQ((*q)->config().quant.weight_granularity, ScaleGranularity::kPerChannel);
  int64_t quantized = 0;
  for (const auto& [name, t] : (*src)->tensors()) {
    const TensorView* w = (*q)->find(name);
    ASSERT_TRUE(w) << name;
    if (fp8_quantizes_tensor(name)) {
      ++quantized;
      ASSERT_EQ(w->dtype, DType::kF8E4M3) << name;
      const TensorView* s = (*q)->find(name.substr(0, name.size() - 6) + "weight_scale");
      ASSERT_TRUE(s) << name;
      EXPECT_EQ(s->dtype, DType::kF32);
      EXPECT_EQ(s->shape, (std::vector<int64_t>{t.shape[0], 1}));
      auto ref = quantize_weight_fp8(t, name);
      ASSERT_TRUE(ref.ok());
      ASSERT_EQ(w->nbytes, ref->weight.bytes.size());
      EXPECT_EQ(std::memcmp(w->data, ref->weight.bytes.data(), w->nbytes), 0) << name;
      EXPECT_EQ(std::memcmp(s->data, ref->scale.bytes.data(), s->nbytes), 0) << name;
    } else {
      // embed_tokens, lm_head and norms stay as they were (bf16 fixtures).
      EXPECT_EQ(w->dtype, t.dtype) << name;
      ASSERT_EQ(w->nbytes, t.nbytes);
      EXPECT_EQ(std::memcmp(w->data, t.data, t.nbytes), 0) << name;
    }
  }
  EXPECT_EQ(quantized, 7 * (*src)->config().num_layers);

  // Same logits as online quantization of the source, and close to HF's float32 reference.
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  LlamaModelOptions online;
  online.weights.quantize_fp8 = true;
  online.max_model_len = 4096;
  LlamaModelOptions plain;
  plain.max_model_len = 4096;
  auto m_online = LlamaModel::create(**src, **be, online);
  auto m_ckpt = LlamaModel::create(**q, **be, plain);
  ASSERT_TRUE(m_online.ok() && m_ckpt.ok()) << m_ckpt.status().to_string();
  auto golden = SafetensorsFile::open(dir + "/golden.safetensors");
  ASSERT_TRUE(golden.ok());
  const int64_t V = (*src)->config().vocab_size;
  LogitAgreement vs_hf;
  for (const char* c : {"case1", "case2", "case3"}) {
    const std::vector<int32_t> ids = golden_ids(**golden, std::string(c) + ".input_ids");
    const std::vector<int32_t> pos = golden_ids(**golden, std::string(c) + ".positions");
    auto a = sequence_logits(**m_online, **be, ids, DType::kF32, 16, 0);
    auto b = sequence_logits(**m_ckpt, **be, ids, DType::kF32, 16, 0);
    ASSERT_TRUE(a.ok() && b.ok());
    ASSERT_EQ(a->size(), b->size());
    EXPECT_EQ(std::memcmp(a->data(), b->data(), a->size() * 4), 0) << c << ": written != online";
    const float* hf = static_cast<const float*>((*golden)->find(std::string(c) + ".logits")->data);
    for (size_t i = 0; i < pos.size(); ++i) accumulate_agreement(hf + i * V, b->data() + pos[i] * V, 1, V, &vs_hf);
  }
  // Random-weight fixtures have nearly flat logits, so top-1 is fragile; the logits themselves
  // stay close (measured: mean cosine 0.98-0.99).
  EXPECT_GE(vs_hf.mean_cosine, 0.97) << GetParam();
  EXPECT_GE(vs_hf.min_cosine, 0.93) << GetParam();
  EXPECT_GE(vs_hf.top1_agreement(), 0.5) << GetParam();
}

INSTANTIATE_TEST_SUITE_P(Fixtures, Fp8Fixture, ::testing::Values("tiny-llama3", "tiny-llama32", "tiny-gqa8"));

TEST(Fp8Checkpoint, ShardedWithBf16Scales) {
  const std::string fx = testing::fixture_dir("tiny-gqa8");
  const std::string out = testing::make_temp_dir() + "/sharded";
  std::string log;
  ASSERT_EQ(testing::run_command(testing::lancet_binary() + " quantize --fp8 --max-shard-size 0.0005 --scale-dtype bf16 " +
                                     fx + " " + out, &log), 0) << log;
  nlohmann::json index = nlohmann::json::parse(std::ifstream(out + "/model.safetensors.index.json"));
  std::set<std::string> files;
  for (const auto& [name, file] : index["weight_map"].items()) files.insert(file.get<std::string>());
  EXPECT_GE(files.size(), 3u);
  auto q = open_model_source(out);
  auto f32 = open_model_source(quantize_to_temp(fx));
  ASSERT_TRUE(q.ok() && f32.ok()) << q.status().to_string();
  for (const auto& [name, t] : (*q)->tensors()) {
    if (name.find("weight_scale") == std::string::npos) continue;
    ASSERT_EQ(t.dtype, DType::kBF16) << name;
    // A bf16 scale is the f32 one rounded up to the next bf16 value.
    const TensorView* s32 = (*f32)->find(name);
    ASSERT_TRUE(s32);
    const uint16_t* b = static_cast<const uint16_t*>(t.data);
    const float* f = static_cast<const float*>(s32->data);
    for (int64_t r = 0; r < t.numel(); ++r) {
      EXPECT_GE(bf16_to_f32(b[r]), f[r]) << name;
      EXPECT_LE(bf16_to_f32(b[r]), f[r] * (1 + 1.0f / 128)) << name;
    }
  }
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  LlamaModelOptions o;
  o.max_model_len = 512;
  auto a = LlamaModel::create(**q, **be, o);
  auto b = LlamaModel::create(**f32, **be, o);
  ASSERT_TRUE(a.ok() && b.ok()) << a.status().to_string();
  const std::vector<int32_t> ids = {1, 17, 400, 3, 999, 250, 61, 62, 63, 5};
  auto la = sequence_logits(**a, **be, ids, DType::kF32, 16, 0);
  auto lb = sequence_logits(**b, **be, ids, DType::kF32, 16, 0);
  ASSERT_TRUE(la.ok() && lb.ok());
  LogitAgreement agree;
  accumulate_agreement(lb->data(), la->data(), static_cast<int64_t>(ids.size()), (*q)->config().vocab_size, &agree);
  EXPECT_GE(agree.min_cosine, 0.99);
}

TEST(Fp8Checkpoint, BadInputIsAnErrorNamingTheTensor) {
  // A copy of a fixture with a NaN in one projection.
  const std::string dir = testing::make_temp_dir();
  const std::string fx = testing::fixture_dir("tiny-gqa8");
  for (const char* f : {"config.json", "model.safetensors"})
    std::filesystem::copy_file(fx + "/" + f, dir + "/" + f);
  std::filesystem::permissions(dir + "/model.safetensors", std::filesystem::perms::owner_write,
                               std::filesystem::perm_options::add);
  {
    // Locate the tensor's bytes in the file through the header and poke a bf16 NaN in.
    std::ifstream in(dir + "/model.safetensors", std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    in.close();
    uint64_t hlen = 0;
    std::memcpy(&hlen, bytes.data(), 8);
    auto hdr = nlohmann::json::parse(bytes.substr(8, hlen));
    const uint64_t begin = 8 + hlen + hdr["model.layers.1.mlp.up_proj.weight"]["data_offsets"][0].get<uint64_t>();
    bytes[begin + 10] = static_cast<char>(0xc0);  // bf16 0x7fc0: NaN
    bytes[begin + 11] = static_cast<char>(0x7f);
    std::ofstream(dir + "/model.safetensors", std::ios::binary) << bytes;
  }
  std::string log;
  const int rc = testing::run_command(testing::lancet_binary() + " quantize --fp8 " + dir + " " + dir + "/out", &log);
  EXPECT_NE(rc, 0);
  EXPECT_NE(log.find("model.layers.1.mlp.up_proj.weight"), std::string::npos) << log;
  EXPECT_NE(log.find("NaN"), std::string::npos) << log;
  // An FP8 checkpoint is not quantized twice.
  const std::string once = quantize_to_temp(fx);
  EXPECT_NE(testing::run_command(testing::lancet_binary() + " quantize --fp8 " + once + " " + dir + "/twice", &log), 0);
  EXPECT_NE(log.find("already quantized"), std::string::npos) << log;
}

TEST(Fp8Checkpoint, GgufConvertedMatchesOnlineQuantization) {
  const std::string gguf = testing::default_model();
  ASSERT_FALSE(gguf.empty()) << "the default model is missing (make model)";
  const std::string out = quantize_to_temp(gguf);
  nlohmann::json cfg = nlohmann::json::parse(std::ifstream(out + "/config.json"));
  EXPECT_EQ(cfg["num_hidden_layers"], 30);
  EXPECT_EQ(cfg["hidden_size"], 576);
  EXPECT_EQ(cfg["rms_norm_eps"], 1e-5);
  EXPECT_EQ(cfg["tie_word_embeddings"], true);
  auto src = open_model_source(gguf);
  auto q = open_model_source(out);
  ASSERT_TRUE(src.ok() && q.ok()) << q.status().to_string();
  EXPECT_FALSE((*q)->config().rope_interleaved);  // q/k rows back in HF order
  EXPECT_EQ((*q)->find("model.embed_tokens.weight")->dtype, DType::kBF16);
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  LlamaModelOptions online, plain;
  online.weights.quantize_fp8 = true;
  online.max_model_len = plain.max_model_len = 256;
  plain.hf_rope_rounding = false;  // the GGUF path keeps float32 rope frequencies
  auto a = LlamaModel::create(**src, **be, online);
  auto b = LlamaModel::create(**q, **be, plain);
  ASSERT_TRUE(a.ok() && b.ok());
  // "The capital of France is" and a few more ids of SmolLM2's vocabulary.
  const std::vector<int32_t> ids = {1, 504, 3575, 282, 4649, 314, 7042, 30, 378, 1012, 2913, 281, 253, 1345, 28};
  auto la = sequence_logits(**a, **be, ids, DType::kF32, 16, 0);
  auto lb = sequence_logits(**b, **be, ids, DType::kF32, 16, 0);
  ASSERT_TRUE(la.ok() && lb.ok());
  LogitAgreement agree;
  accumulate_agreement(la->data(), lb->data(), static_cast<int64_t>(ids.size()), 49152, &agree);
  // Rope over interleaved pairs (GGUF order) and rotate-half (HF order) are the same arithmetic.
  EXPECT_EQ(agree.top1_agree, agree.positions);
  EXPECT_GE(agree.min_cosine, 0.99999);
}

}  // namespace
}  // namespace lancet
