// open_hf_source on the HF fixtures (directory, config-only, single .safetensors), side files
// (generation/tokenizer configs), tensor-vs-config checks, and FP8 checkpoints in the
// compressed-tensors and fp8 layouts written with the project's safetensors writer.
#include "io/hf_source.h"

#include <gtest/gtest.h>

#include <cstring>
#include <algorithm>
#include <filesystem>
#include <functional>

#include "io/llama_tensors.h"
#include "io/safetensors.h"
#include "io_test_util.h"
#include "test_paths.h"

namespace lancet {
namespace {

namespace fs = std::filesystem;
using testing::fixture_dir;
using testing::write_file;

std::vector<int64_t> shape_of(const ModelSource& s, const std::string& name) {
  const TensorView* t = s.find(name);
  EXPECT_NE(t, nullptr) << name;
  return t ? t->shape : std::vector<int64_t>{};
}

TEST(HfSource, ShardedTinyLlama3) {
  auto src = open_hf_source(fixture_dir("tiny-llama3"));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const ModelSource& s = **src;
  EXPECT_STREQ(s.format(), "safetensors");
  EXPECT_EQ(s.config().head_dim, 128);
  EXPECT_EQ(s.config().eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(s.tensors().size(), 21u);
  EXPECT_EQ(shape_of(s, "model.embed_tokens.weight"), (std::vector<int64_t>{1024, 256}));
  EXPECT_EQ(shape_of(s, "model.layers.1.self_attn.q_proj.weight"), (std::vector<int64_t>{512, 256}));
  EXPECT_EQ(shape_of(s, "model.layers.1.self_attn.k_proj.weight"), (std::vector<int64_t>{128, 256}));
  EXPECT_EQ(shape_of(s, "model.layers.1.self_attn.o_proj.weight"), (std::vector<int64_t>{256, 512}));
  EXPECT_EQ(shape_of(s, "model.layers.0.mlp.down_proj.weight"), (std::vector<int64_t>{256, 768}));
  EXPECT_EQ(shape_of(s, "lm_head.weight"), (std::vector<int64_t>{1024, 256}));
  EXPECT_EQ(s.find("model.norm.weight")->dtype, DType::kBF16);
  EXPECT_TRUE(s.tokenizer().tokenizer_json_path.empty());
  EXPECT_TRUE(s.tokenizer().chat_template.empty());
  EXPECT_FALSE(s.config().quant.kv_cache_fp8);
}

TEST(HfSource, EveryFixtureLoads) {
  struct Want {
    const char* name;
    int64_t layers, heads, kv_heads, head_dim;
    bool tied;
    RopeType rope;
    double factor;
  };
  for (const Want& w : {Want{"tiny-llama32", 3, 4, 1, 64, true, RopeType::kLlama3, 32.0},
                        Want{"tiny-gqa8", 2, 8, 1, 64, false, RopeType::kLlama3, 8.0},
                        Want{"tiny-rope-linear", 2, 4, 2, 64, false, RopeType::kLinear, 4.0},
                        Want{"tiny-rope-yarn", 2, 4, 2, 64, false, RopeType::kYarn, 4.0}}) {
    auto src = open_hf_source(fixture_dir(w.name));
    ASSERT_TRUE(src.ok()) << w.name << ": " << src.status().to_string();
    const ModelConfig& c = (*src)->config();
    EXPECT_EQ(c.hidden_size, 256) << w.name;
    EXPECT_EQ(c.num_layers, w.layers) << w.name;
    EXPECT_EQ(c.num_heads, w.heads) << w.name;
    EXPECT_EQ(c.num_kv_heads, w.kv_heads) << w.name;
    EXPECT_EQ(c.head_dim, w.head_dim) << w.name;
    EXPECT_EQ(c.tie_word_embeddings, w.tied) << w.name;
    EXPECT_EQ(c.rope_scaling.type, w.rope) << w.name;
    EXPECT_DOUBLE_EQ(c.rope_scaling.factor, w.factor) << w.name;
    EXPECT_EQ((*src)->tensors().size(), static_cast<size_t>(w.layers * 9 + 2 + (w.tied ? 0 : 1)))
        << w.name;
    EXPECT_EQ((*src)->find("lm_head.weight") == nullptr, w.tied) << w.name;
    EXPECT_EQ(shape_of(**src, "model.layers.0.self_attn.k_proj.weight"),
              (std::vector<int64_t>{w.kv_heads * 64, 256}))
        << w.name;
  }
}

TEST(HfSource, ConfigOnlyAndSingleFile) {
  auto cfg = open_hf_source(fixture_dir("tiny-llama32") + "/config.json");
  ASSERT_TRUE(cfg.ok()) << cfg.status().to_string();
  EXPECT_TRUE((*cfg)->tensors().empty());
  EXPECT_EQ((*cfg)->config().num_layers, 3);

  auto file = open_hf_source(fixture_dir("tiny-llama32") + "/model.safetensors");
  ASSERT_TRUE(file.ok()) << file.status().to_string();
  EXPECT_EQ((*file)->tensors().size(), 29u);
  // The embedding's bytes are the ones Python reads from the file.
  const TensorView* e = (*file)->find("model.embed_tokens.weight");
  uint16_t h;
  std::memcpy(&h, static_cast<const uint8_t*>(e->data) + 2, 2);
  EXPECT_EQ(bf16_to_f32(h), -0.169921875f);

  // One shard of a sharded checkpoint lacks most tensors.
  auto shard = open_hf_source(fixture_dir("tiny-llama3") + "/model-00002-of-00004.safetensors");
  ASSERT_FALSE(shard.ok());
  EXPECT_EQ(shard.status().code(), StatusCode::kNotFound);
  EXPECT_NE(shard.status().message().find("model.embed_tokens.weight"), std::string::npos);

  EXPECT_EQ(open_hf_source("/nonexistent/model").status().code(), StatusCode::kNotFound);
  const std::string empty = testing::make_temp_dir();
  EXPECT_FALSE(open_hf_source(empty).ok());
}

// A copy of a fixture with its config.json edited (weights shared by copy).
std::string copy_fixture(const std::string& name, const std::string& from, const std::string& to) {
  const std::string dir = testing::make_temp_dir();
  for (const auto& e : fs::directory_iterator(fixture_dir(name))) {
    fs::copy_file(e.path(), dir + "/" + e.path().filename().string());
    fs::permissions(dir + "/" + e.path().filename().string(), fs::perms::owner_write,
                    fs::perm_options::add);
  }
  std::string cfg = testing::read_file(dir + "/config.json");
  auto pos = cfg.find(from);
  EXPECT_NE(pos, std::string::npos) << from;
  if (pos != std::string::npos) cfg.replace(pos, from.size(), to);
  write_file(dir + "/config.json", cfg);
  return dir;
}

TEST(HfSource, ShapeMismatchNamesTensor) {
  auto src = open_hf_source(copy_fixture("tiny-llama32", "\"num_key_value_heads\": 1",
                                         "\"num_key_value_heads\": 2"));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("model.layers.0.self_attn.k_proj.weight"),
            std::string::npos)
      << src.status().to_string();
  EXPECT_NE(src.status().message().find("[64, 256]"), std::string::npos);

  src = open_hf_source(copy_fixture("tiny-llama32", "\"tie_word_embeddings\": true",
                                    "\"tie_word_embeddings\": false"));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("lm_head.weight"), std::string::npos);

  src = open_hf_source(copy_fixture("tiny-llama32", "\"num_hidden_layers\": 3",
                                    "\"num_hidden_layers\": 2"));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("model.layers.2."), std::string::npos);

  src = open_hf_source(copy_fixture("tiny-llama32", "\"vocab_size\": 1024", "\"vocab_size\": 1000"));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("model.embed_tokens.weight"), std::string::npos);
}

TEST(HfSource, SideFiles) {
  const std::string dir = copy_fixture("tiny-llama32", "\"eos_token_id\": 2", "\"eos_token_id\": 2");
  write_file(dir + "/generation_config.json", R"({"bos_token_id": 1, "eos_token_id": [2, 3]})");
  write_file(dir + "/tokenizer_config.json",
             R"({"chat_template": "{{ messages }}", "bos_token": "<s>", "eos_token": "</s>"})");
  write_file(dir + "/tokenizer.json", "{}");
  auto src = open_hf_source(dir);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->config().eos_token_ids, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ((*src)->tokenizer().chat_template, "{{ messages }}");
  EXPECT_EQ((*src)->tokenizer().bos_token, "<s>");
  EXPECT_EQ((*src)->tokenizer().tokenizer_json_path, dir + "/tokenizer.json");
  write_file(dir + "/chat_template.jinja", "J");
  src = open_hf_source(dir);
  ASSERT_TRUE(src.ok());
  EXPECT_EQ((*src)->tokenizer().chat_template, "J");

  write_file(dir + "/generation_config.json", R"({"eos_token_id": [2, 5000]})");
  src = open_hf_source(dir);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("eos_token_id"), std::string::npos);
  write_file(dir + "/generation_config.json", "{broken");
  src = open_hf_source(dir);
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("generation_config.json"), std::string::npos);
}

// ---- FP8 checkpoints written with the safetensors writer ----

constexpr int64_t kVocab = 64, kHidden = 64, kHeads = 2, kKvHeads = 1, kHeadDim = 32,
                  kInter = 96;

struct Spec {
  std::string name;
  DType dtype;
  std::vector<int64_t> shape;
};

// Tensors of a one-layer FP8 model; `scale_shape(rows, cols)` gives each weight_scale shape.
std::vector<Spec> fp8_specs(const std::function<std::vector<int64_t>(int64_t, int64_t)>& scale_shape,
                            const std::string& scale_suffix = "weight_scale") {
  std::vector<Spec> s = {
      {"model.embed_tokens.weight", DType::kBF16, {kVocab, kHidden}},
      {"model.norm.weight", DType::kBF16, {kHidden}},
      {"lm_head.weight", DType::kBF16, {kVocab, kHidden}},  // ignored: stays bf16
      {"model.layers.0.input_layernorm.weight", DType::kBF16, {kHidden}},
      {"model.layers.0.post_attention_layernorm.weight", DType::kBF16, {kHidden}},
  };
  const std::pair<const char*, std::pair<int64_t, int64_t>> linears[] = {
      {"self_attn.q_proj", {kHeads * kHeadDim, kHidden}},
      {"self_attn.k_proj", {kKvHeads * kHeadDim, kHidden}},
      {"self_attn.v_proj", {kKvHeads * kHeadDim, kHidden}},
      {"self_attn.o_proj", {kHidden, kHeads * kHeadDim}},
      {"mlp.gate_proj", {kInter, kHidden}},
      {"mlp.up_proj", {kInter, kHidden}},
      {"mlp.down_proj", {kHidden, kInter}},
  };
  for (const auto& [n, rc] : linears) {
    const std::string p = std::string("model.layers.0.") + n;
    s.push_back({p + ".weight", DType::kF8E4M3, {rc.first, rc.second}});
    s.push_back({p + "." + scale_suffix, DType::kBF16, scale_shape(rc.first, rc.second)});
  }
  return s;
}

// Writes config.json + model.safetensors; tensor bytes are a deterministic pattern.
std::string write_checkpoint(const std::string& quant_json, const std::vector<Spec>& specs) {
  const std::string dir = testing::make_temp_dir();
  write_file(dir + "/config.json",
             R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "vocab_size": 64,
  "hidden_size": 64, "intermediate_size": 96, "num_hidden_layers": 1, "num_attention_heads": 2,
  "num_key_value_heads": 1, "head_dim": 32, "max_position_embeddings": 2048,
  "rms_norm_eps": 1e-05, "rope_theta": 500000.0, "torch_dtype": "bfloat16",
  "bos_token_id": 1, "eos_token_id": 2, "quantization_config": )" +
                 quant_json + "}");
  std::vector<std::vector<uint8_t>> bufs;
  std::vector<SafetensorsWriteTensor> ts;
  for (const Spec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.shape) n *= d;
    std::vector<uint8_t> b(static_cast<size_t>(n) * dtype_info(s.dtype).block_bytes);
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>((i * 7 + s.name.size()) & 0x77);
    bufs.push_back(std::move(b));
  }
  for (size_t i = 0; i < specs.size(); ++i) {
    ts.push_back({specs[i].name, specs[i].dtype, specs[i].shape, bufs[i].data(), bufs[i].size()});
  }
  Status st = write_safetensors(dir + "/model.safetensors", ts, {{"format", "pt"}});
  EXPECT_TRUE(st.ok()) << st.to_string();
  return dir;
}

const char* kCtChannel = R"({"quant_method": "compressed-tensors", "format": "float-quantized",
  "config_groups": {"group_0": {"targets": ["Linear"],
    "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true},
    "input_activations": {"num_bits": 8, "type": "float", "strategy": "token", "dynamic": true}}},
  "ignore": ["lm_head"],
  "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": false}})";

auto per_channel = [](int64_t rows, int64_t) { return std::vector<int64_t>{rows, 1}; };

TEST(HfSourceFp8, CompressedTensorsPerChannel) {
  auto specs = fp8_specs(per_channel);
  specs.push_back({"model.layers.0.self_attn.k_scale", DType::kF32, {}});
  specs.push_back({"model.layers.0.self_attn.v_scale", DType::kF32, {1}});
  const std::string dir = write_checkpoint(kCtChannel, specs);
  auto src = open_hf_source(dir);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const QuantConfig& q = (*src)->config().quant;
  EXPECT_EQ(q.method, QuantMethod::kCompressedTensors);
  EXPECT_EQ(q.weight_granularity, ScaleGranularity::kPerChannel);
  EXPECT_TRUE(q.dynamic_activations);
  EXPECT_TRUE(q.kv_cache_fp8);
  EXPECT_EQ(q.ignored, (std::vector<std::string>{"lm_head"}));

  const TensorView* w = (*src)->find("model.layers.0.mlp.down_proj.weight");
  ASSERT_NE(w, nullptr);
  EXPECT_EQ(w->dtype, DType::kF8E4M3);
  EXPECT_EQ(w->shape, (std::vector<int64_t>{64, 96}));
  EXPECT_EQ(shape_of(**src, "model.layers.0.mlp.down_proj.weight_scale"),
            (std::vector<int64_t>{64, 1}));
  EXPECT_EQ(shape_of(**src, "model.layers.0.self_attn.k_proj.weight_scale"),
            (std::vector<int64_t>{32, 1}));
  EXPECT_EQ(shape_of(**src, "model.layers.0.self_attn.k_scale"), (std::vector<int64_t>{}));
  EXPECT_EQ((*src)->find("lm_head.weight")->dtype, DType::kBF16);
  // The fp8 bytes are the ones written.
  const std::string name = "model.layers.0.mlp.down_proj.weight";
  EXPECT_EQ(static_cast<const uint8_t*>(w->data)[5], static_cast<uint8_t>((5 * 7 + name.size()) & 0x77));
}

TEST(HfSourceFp8, ScaleShapeMustMatchGranularity) {
  // Per-tensor scales in a checkpoint whose config says per-channel.
  auto specs = fp8_specs([](int64_t, int64_t) { return std::vector<int64_t>{}; });
  auto src = open_hf_source(write_checkpoint(kCtChannel, specs));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("model.layers.0.self_attn.q_proj.weight_scale"),
            std::string::npos)
      << src.status().to_string();
  EXPECT_NE(src.status().message().find("per-channel"), std::string::npos);

  // Missing scale for an FP8 weight.
  specs = fp8_specs(per_channel);
  specs.erase(std::remove_if(specs.begin(), specs.end(),
                             [](const Spec& s) {
                               return s.name == "model.layers.0.mlp.up_proj.weight_scale";
                             }),
              specs.end());
  src = open_hf_source(write_checkpoint(kCtChannel, specs));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("model.layers.0.mlp.up_proj.weight"), std::string::npos)
      << src.status().to_string();

  // A KV scale must be one value.
  specs = fp8_specs(per_channel);
  specs.push_back({"model.layers.0.self_attn.k_scale", DType::kF32, {2}});
  src = open_hf_source(write_checkpoint(kCtChannel, specs));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("self_attn.k_scale"), std::string::npos);

  // A scale on a bf16 weight is a mismatch.
  specs = fp8_specs(per_channel);
  specs.push_back({"lm_head.weight_scale", DType::kBF16, {kVocab, 1}});
  src = open_hf_source(write_checkpoint(kCtChannel, specs));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("lm_head.weight_scale"), std::string::npos);
}

TEST(HfSourceFp8, Fp8MethodPerTensorStaticWithOldKvNames) {
  auto specs = fp8_specs([](int64_t, int64_t) { return std::vector<int64_t>{}; });
  for (const char* p : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                        "self_attn.o_proj", "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
    specs.push_back({std::string("model.layers.0.") + p + ".input_scale", DType::kF32, {}});
  }
  specs.push_back({"model.layers.0.self_attn.k_proj.k_scale", DType::kF32, {}});
  specs.push_back({"model.layers.0.self_attn.v_proj.v_scale", DType::kF32, {}});
  auto src = open_hf_source(write_checkpoint(
      R"({"quant_method": "fp8", "activation_scheme": "static", "ignored_layers": ["lm_head"]})",
      specs));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const QuantConfig& q = (*src)->config().quant;
  EXPECT_EQ(q.method, QuantMethod::kFp8);
  EXPECT_EQ(q.weight_granularity, ScaleGranularity::kPerTensor);
  EXPECT_FALSE(q.dynamic_activations);
  EXPECT_TRUE(q.kv_cache_fp8);  // found k_scale tensors
  EXPECT_NE((*src)->find("model.layers.0.self_attn.k_scale"), nullptr);
  EXPECT_NE((*src)->find("model.layers.0.self_attn.v_scale"), nullptr);
  EXPECT_EQ((*src)->find("model.layers.0.self_attn.k_proj.k_scale"), nullptr);
  EXPECT_EQ(shape_of(**src, "model.layers.0.mlp.gate_proj.input_scale"), (std::vector<int64_t>{}));
}

TEST(HfSourceFp8, Fp8MethodBlockScales) {
  auto blocks = [](int64_t rows, int64_t cols) {
    return std::vector<int64_t>{(rows + 31) / 32, (cols + 63) / 64};
  };
  const char* quant = R"({"quant_method": "fp8", "weight_block_size": [32, 64]})";
  auto src = open_hf_source(write_checkpoint(quant, fp8_specs(blocks, "weight_scale_inv")));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  EXPECT_EQ((*src)->config().quant.weight_granularity, ScaleGranularity::kPerBlock);
  // down_proj [64, 96] -> [2, 2] blocks (96 columns round up to two blocks of 64).
  EXPECT_EQ(shape_of(**src, "model.layers.0.mlp.down_proj.weight_scale_inv"),
            (std::vector<int64_t>{2, 2}));

  auto wrong = [](int64_t rows, int64_t cols) { return std::vector<int64_t>{rows / 32, cols / 64}; };
  src = open_hf_source(write_checkpoint(quant, fp8_specs(wrong, "weight_scale_inv")));
  ASSERT_FALSE(src.ok());
  EXPECT_NE(src.status().message().find("down_proj.weight_scale_inv"), std::string::npos)
      << src.status().to_string();
}

TEST(LlamaTensors, CheckIsUsableOnItsOwn) {
  auto src = open_hf_source(fixture_dir("tiny-gqa8"));
  ASSERT_TRUE(src.ok());
  std::map<std::string, TensorView> t = (*src)->tensors();
  EXPECT_TRUE(check_llama_tensors((*src)->config(), t).ok());
  t.erase("model.layers.1.post_attention_layernorm.weight");
  Status st = check_llama_tensors((*src)->config(), t);
  EXPECT_EQ(st.code(), StatusCode::kNotFound);
  EXPECT_NE(st.message().find("model.layers.1.post_attention_layernorm.weight"), std::string::npos);
  t = (*src)->tensors();
  t["model.layers.0.mlp.up_proj.weight"].nbytes -= 2;  // bytes disagree with the shape
  EXPECT_FALSE(check_llama_tensors((*src)->config(), t).ok());
  EXPECT_EQ(llama_linears((*src)->config(), 1)[0].prefix, "model.layers.1.self_attn.q_proj");
  EXPECT_EQ(llama_linears((*src)->config(), 1)[0].rows, 512);
}

}  // namespace
}  // namespace lancet
