// config.json parsing against the HF-written fixtures (both layouts), generation/tokenizer
// configs (the real Llama 3 tokenizer_config.json), FP8 quantization_config layouts, and the
// errors for configs lancet cannot run.
#include "io/hf_config.h"

#include <gtest/gtest.h>

#include "io/text_file.h"
#include "test_paths.h"

namespace lancet {
namespace {

using testing::fixture_dir;

ModelConfig load(const std::string& fixture) {
  auto c = load_hf_config(fixture_dir(fixture) + "/config.json");
  EXPECT_TRUE(c.ok()) << c.status().to_string();
  return c.ok() ? *c : ModelConfig{};
}

// A minimal valid config with `extra` spliced in (extra keys override earlier ones).
std::string config_with(const std::string& extra) {
  std::string base = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
    "vocab_size": 128256, "hidden_size": 256, "intermediate_size": 512,
    "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
    "max_position_embeddings": 4096, "rms_norm_eps": 1e-05)";
  return base + (extra.empty() ? "" : ", " + extra) + "}";
}

StatusOr<ModelConfig> parse(const std::string& extra) {
  return parse_hf_config(config_with(extra), "cfg.json");
}

void expect_error(const std::string& extra, StatusCode code, const std::string& needle) {
  auto c = parse(extra);
  ASSERT_FALSE(c.ok()) << extra;
  EXPECT_EQ(c.status().code(), code) << c.status().to_string();
  EXPECT_NE(c.status().message().find(needle), std::string::npos) << c.status().to_string();
  EXPECT_NE(c.status().message().find("cfg.json"), std::string::npos) << c.status().to_string();
}

TEST(HfConfigFixtures, TinyLlama3ClassicLayout) {
  ModelConfig c = load("tiny-llama3");
  EXPECT_EQ(c.architecture, "LlamaForCausalLM");
  EXPECT_EQ(c.vocab_size, 1024);
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.intermediate_size, 768);
  EXPECT_EQ(c.num_layers, 2);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 128);  // from the config: 4 x 128 != hidden 256
  EXPECT_DOUBLE_EQ(c.rms_norm_eps, 1e-5);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 8.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.low_freq_factor, 1.0);
  EXPECT_DOUBLE_EQ(c.rope_scaling.high_freq_factor, 4.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.max_position_embeddings, 131072);
  EXPECT_FALSE(c.tie_word_embeddings);
  EXPECT_EQ(c.dtype, DType::kBF16);  // torch_dtype
  EXPECT_EQ(c.bos_token_id, 1);
  EXPECT_EQ(c.eos_token_ids, (std::vector<int64_t>{2}));
  EXPECT_EQ(c.pad_token_id, -1);  // null
  EXPECT_EQ(c.quant.method, QuantMethod::kNone);
}

TEST(HfConfigFixtures, TinyLlama32RopeParametersTied) {
  ModelConfig c = load("tiny-llama32");
  EXPECT_EQ(c.hidden_size, 256);
  EXPECT_EQ(c.num_layers, 3);
  EXPECT_EQ(c.num_heads, 4);
  EXPECT_EQ(c.num_kv_heads, 1);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_EQ(c.intermediate_size, 512);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_DOUBLE_EQ(c.rope_theta, 500000.0);  // inside rope_parameters
  EXPECT_EQ(c.rope_scaling.type, RopeType::kLlama3);
  EXPECT_DOUBLE_EQ(c.rope_scaling.factor, 32.0);
  EXPECT_EQ(c.rope_scaling.original_max_position_embeddings, 8192);
  EXPECT_EQ(c.dtype, DType::kBF16);  // "dtype"
}

TEST(HfConfigFixtures, Gqa8LinearYarn) {
  ModelConfig g = load("tiny-gqa8");
  EXPECT_EQ(g.num_heads, 8);
  EXPECT_EQ(g.num_kv_heads, 1);
  EXPECT_EQ(g.head_dim, 64);
  EXPECT_EQ(g.num_layers, 2);
  EXPECT_DOUBLE_EQ(g.rope_scaling.factor, 8.0);

  ModelConfig l = load("tiny-rope-linear");
  EXPECT_EQ(l.rope_scaling.type, RopeType::kLinear);
  EXPECT_DOUBLE_EQ(l.rope_scaling.factor, 4.0);
  EXPECT_DOUBLE_EQ(l.rope_theta, 10000.0);
  EXPECT_EQ(l.num_kv_heads, 2);
  EXPECT_EQ(l.max_position_embeddings, 16384);

  ModelConfig y = load("tiny-rope-yarn");
  EXPECT_EQ(y.rope_scaling.type, RopeType::kYarn);
  EXPECT_DOUBLE_EQ(y.rope_scaling.factor, 4.0);
  EXPECT_EQ(y.rope_scaling.original_max_position_embeddings, 4096);
  EXPECT_DOUBLE_EQ(y.rope_scaling.beta_fast, 32.0);
  EXPECT_DOUBLE_EQ(y.rope_scaling.beta_slow, 1.0);
  EXPECT_DOUBLE_EQ(y.rope_scaling.attention_factor, 0.0);  // not given: derived later
  EXPECT_TRUE(y.rope_scaling.truncate);
  EXPECT_DOUBLE_EQ(y.rope_theta, 10000.0);
  EXPECT_STREQ(rope_type_name(y.rope_scaling.type), "yarn");
}

TEST(HfConfig, DefaultsAndAlternateSpellings) {
  auto c = parse("");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->head_dim, 64);  // hidden / heads
  EXPECT_DOUBLE_EQ(c->rope_theta, 10000.0);
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDefault);
  EXPECT_EQ(c->bos_token_id, -1);
  EXPECT_TRUE(c->eos_token_ids.empty());

  c = parse(R"("rope_scaling": {"type": "dynamic", "factor": 2.0}, "rope_theta": 1e6,)"
            R"( "bos_token_id": [5, 6], "eos_token_id": [128001, 128009], "torch_dtype": "float16",)"
            R"( "head_dim": null, "max_position_embeddings": 8192.0)");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDynamic);
  EXPECT_DOUBLE_EQ(c->rope_scaling.factor, 2.0);
  EXPECT_DOUBLE_EQ(c->rope_theta, 1e6);
  EXPECT_EQ(c->bos_token_id, 5);
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128009}));
  EXPECT_EQ(c->dtype, DType::kF16);
  EXPECT_EQ(c->head_dim, 64);
  EXPECT_EQ(c->max_position_embeddings, 8192);

  c = parse(R"("rope_parameters": {"rope_type": "yarn", "factor": 8, "rope_theta": 5e5,)"
            R"( "attention_factor": 1.25, "mscale": 0.7, "mscale_all_dim": 0.5,)"
            R"( "truncate": false, "beta_fast": 16, "beta_slow": 2})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_DOUBLE_EQ(c->rope_theta, 5e5);
  EXPECT_DOUBLE_EQ(c->rope_scaling.attention_factor, 1.25);
  EXPECT_DOUBLE_EQ(c->rope_scaling.mscale, 0.7);
  EXPECT_DOUBLE_EQ(c->rope_scaling.mscale_all_dim, 0.5);
  EXPECT_FALSE(c->rope_scaling.truncate);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_fast, 16.0);
  EXPECT_DOUBLE_EQ(c->rope_scaling.beta_slow, 2.0);

  c = parse(R"("rope_parameters": {"rope_type": "default", "rope_theta": 500000.0})");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->rope_scaling.type, RopeType::kDefault);
  EXPECT_DOUBLE_EQ(c->rope_theta, 500000.0);
}

TEST(HfConfig, Errors) {
  expect_error(R"("rope_scaling": {"rope_type": "longrope", "factor": 4})",
               StatusCode::kUnimplemented, "longrope");
  expect_error(R"("rope_scaling": {"rope_type": "linear"})", StatusCode::kInvalidArgument,
               "factor");
  expect_error(R"("rope_scaling": {"rope_type": "llama3", "factor": 8})",
               StatusCode::kInvalidArgument, "original_max_position_embeddings");
  expect_error(R"("num_key_value_heads": 3)", StatusCode::kInvalidArgument,
               "num_key_value_heads");
  expect_error(R"("head_dim": 63)", StatusCode::kInvalidArgument, "head_dim");
  expect_error(R"("num_hidden_layers": 0)", StatusCode::kInvalidArgument, "num_hidden_layers");
  expect_error(R"("hidden_size": "256")", StatusCode::kInvalidArgument, "hidden_size");
  expect_error(R"("vocab_size": null)", StatusCode::kInvalidArgument, "vocab_size");
  expect_error(R"("architectures": ["MixtralForCausalLM"])", StatusCode::kUnimplemented,
               "MixtralForCausalLM");
  expect_error(R"("hidden_act": "gelu")", StatusCode::kUnimplemented, "gelu");
  expect_error(R"("torch_dtype": "int8")", StatusCode::kInvalidArgument, "int8");
  expect_error(R"("eos_token_id": 200000)", StatusCode::kInvalidArgument, "eos_token_id");
  expect_error(R"("rms_norm_eps": -1)", StatusCode::kInvalidArgument, "rms_norm_eps");
  expect_error(R"("tie_word_embeddings": 1)", StatusCode::kInvalidArgument, "tie_word_embeddings");
  auto bad = parse_hf_config("{not json", "cfg.json");
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("cfg.json"), std::string::npos);
  EXPECT_FALSE(parse_hf_config("[]", "cfg.json").ok());
  auto missing = load_hf_config("/nonexistent/config.json");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
}

TEST(HfConfig, ValidateNamesFields) {
  ModelConfig c = load("tiny-llama3");
  EXPECT_TRUE(c.validate().ok());
  c.num_kv_heads = 3;
  EXPECT_NE(c.validate().message().find("num_key_value_heads"), std::string::npos);
  c = load("tiny-llama3");
  c.rope_scaling.high_freq_factor = 0.5;
  EXPECT_NE(c.validate().message().find("high_freq_factor"), std::string::npos);
  c = load("tiny-llama3");
  c.vocab_size = 0;
  EXPECT_NE(c.validate().message().find("vocab_size"), std::string::npos);
  c = load("tiny-rope-yarn");
  c.rope_scaling.beta_fast = 0.5;
  EXPECT_NE(c.validate().message().find("beta_fast"), std::string::npos);
}

TEST(HfConfig, GenerationConfigOverrides) {
  auto c = parse(R"("eos_token_id": 128001, "bos_token_id": 128000)");
  ASSERT_TRUE(c.ok());
  ASSERT_TRUE(apply_generation_config(R"({"bos_token_id": 128000, "eos_token_id": [128001,)"
                                      R"( 128008, 128009], "pad_token_id": 128004,)"
                                      R"( "temperature": 0.6})",
                                      "gen.json", &*c)
                  .ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{128001, 128008, 128009}));
  EXPECT_EQ(c->pad_token_id, 128004);
  ASSERT_TRUE(apply_generation_config(R"({"eos_token_id": null})", "gen.json", &*c).ok());
  EXPECT_EQ(c->eos_token_ids.size(), 3u);  // null leaves it alone
  ASSERT_TRUE(apply_generation_config(R"({"eos_token_id": 7})", "gen.json", &*c).ok());
  EXPECT_EQ(c->eos_token_ids, (std::vector<int64_t>{7}));
  Status st = apply_generation_config(R"({"eos_token_id": "x"})", "gen.json", &*c);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("gen.json"), std::string::npos);
  EXPECT_NE(st.message().find("eos_token_id"), std::string::npos);

  // The fixture's generation_config.json agrees with its config.json.
  ModelConfig f = load("tiny-llama3");
  auto text = read_text_file(fixture_dir("tiny-llama3") + "/generation_config.json");
  ASSERT_TRUE(text.ok());
  ASSERT_TRUE(apply_generation_config(*text, "generation_config.json", &f).ok());
  EXPECT_EQ(f.bos_token_id, 1);
  EXPECT_EQ(f.eos_token_ids, (std::vector<int64_t>{2}));
}

TEST(HfConfig, TokenizerConfig) {
  const std::string path = testing::shared_dir() + "/models/llama3-tokenizer/tokenizer_config.json";
  auto text = read_text_file(path);
  ASSERT_TRUE(text.ok()) << text.status().to_string();
  TokenizerSource t;
  ASSERT_TRUE(parse_tokenizer_config(*text, path, &t).ok());
  EXPECT_EQ(t.bos_token, "<|begin_of_text|>");
  EXPECT_EQ(t.eos_token, "<|eot_id|>");
  EXPECT_EQ(t.chat_template.size(), 389u);
  EXPECT_EQ(t.chat_template.rfind("{% set loop_messages = messages %}", 0), 0u);

  TokenizerSource l;
  ASSERT_TRUE(parse_tokenizer_config(
                  R"({"chat_template": [{"name": "tool_use", "template": "T"},)"
                  R"( {"name": "default", "template": "D"}],)"
                  R"( "bos_token": {"__type": "AddedToken", "content": "<s>", "lstrip": false},)"
                  R"( "eos_token": {"content": "</s>"}})",
                  "tok.json", &l)
                  .ok());
  EXPECT_EQ(l.chat_template, "D");
  EXPECT_EQ(l.bos_token, "<s>");
  EXPECT_EQ(l.eos_token, "</s>");

  TokenizerSource e;
  Status st = parse_tokenizer_config(R"({"chat_template": 5})", "tok.json", &e);
  EXPECT_FALSE(st.ok());
  EXPECT_NE(st.message().find("chat_template"), std::string::npos);
  EXPECT_FALSE(parse_tokenizer_config(R"({"chat_template": [{"name": "x", "template": "T"}]})",
                                      "tok.json", &e)
                   .ok());
  EXPECT_FALSE(parse_tokenizer_config(R"({"bos_token": 1})", "tok.json", &e).ok());
}

TEST(HfConfigQuant, Fp8Method) {
  auto c = parse(R"("quantization_config": {"quant_method": "fp8", "activation_scheme": "static",)"
                 R"( "ignored_layers": ["lm_head"]})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->quant.method, QuantMethod::kFp8);
  EXPECT_EQ(c->quant.weight_granularity, ScaleGranularity::kPerTensor);
  EXPECT_FALSE(c->quant.dynamic_activations);
  EXPECT_EQ(c->quant.ignored, (std::vector<std::string>{"lm_head"}));

  c = parse(R"("quantization_config": {"quant_method": "fp8", "activation_scheme": "dynamic",)"
            R"( "fmt": "e4m3", "weight_block_size": [128, 128],)"
            R"( "modules_to_not_convert": ["model.layers.0.mlp"]})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->quant.weight_granularity, ScaleGranularity::kPerBlock);
  EXPECT_EQ(c->quant.weight_block_size, (std::vector<int64_t>{128, 128}));
  EXPECT_TRUE(c->quant.dynamic_activations);
  EXPECT_EQ(c->quant.ignored, (std::vector<std::string>{"model.layers.0.mlp"}));

  expect_error(R"("quantization_config": {"quant_method": "fp8", "activation_scheme": "x"})",
               StatusCode::kInvalidArgument, "activation_scheme");
  expect_error(R"("quantization_config": {"quant_method": "fp8", "weight_block_size": [128]})",
               StatusCode::kInvalidArgument, "weight_block_size");
  expect_error(R"("quantization_config": {"quant_method": "gptq", "bits": 4})",
               StatusCode::kUnimplemented, "gptq");
}

TEST(HfConfigQuant, CompressedTensors) {
  // As llm-compressor writes FP8_DYNAMIC with an FP8 KV cache.
  auto c = parse(R"("quantization_config": {"quant_method": "compressed-tensors",
      "format": "float-quantized", "quantization_status": "compressed",
      "config_groups": {"group_0": {"targets": ["Linear"],
        "weights": {"num_bits": 8, "type": "float", "strategy": "channel", "symmetric": true,
                    "dynamic": false},
        "input_activations": {"num_bits": 8, "type": "float", "strategy": "token",
                              "dynamic": true}}},
      "ignore": ["lm_head"],
      "kv_cache_scheme": {"num_bits": 8, "type": "float", "strategy": "tensor",
                          "dynamic": false, "symmetric": true}})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->quant.method, QuantMethod::kCompressedTensors);
  EXPECT_EQ(c->quant.weight_granularity, ScaleGranularity::kPerChannel);
  EXPECT_TRUE(c->quant.dynamic_activations);
  EXPECT_TRUE(c->quant.kv_cache_fp8);
  EXPECT_EQ(c->quant.ignored, (std::vector<std::string>{"lm_head"}));

  c = parse(R"("quantization_config": {"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "tensor"},
                              "input_activations": {"num_bits": 8, "type": "float",
                                                    "strategy": "tensor", "dynamic": false}}},
      "kv_cache_scheme": null})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->quant.weight_granularity, ScaleGranularity::kPerTensor);
  EXPECT_FALSE(c->quant.dynamic_activations);
  EXPECT_FALSE(c->quant.kv_cache_fp8);

  c = parse(R"("quantization_config": {"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "block",
                                          "block_structure": [128, 64]}}}})");
  ASSERT_TRUE(c.ok()) << c.status().to_string();
  EXPECT_EQ(c->quant.weight_granularity, ScaleGranularity::kPerBlock);
  EXPECT_EQ(c->quant.weight_block_size, (std::vector<int64_t>{128, 64}));

  expect_error(R"("quantization_config": {"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 4, "type": "int", "strategy": "group"}}}})",
               StatusCode::kUnimplemented, "num_bits 4");
  expect_error(R"("quantization_config": {"quant_method": "compressed-tensors",
      "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float", "strategy": "group"}}}})",
               StatusCode::kUnimplemented, "group");
  expect_error(R"("quantization_config": {"quant_method": "compressed-tensors",
      "config_groups": {"a": {"weights": {"num_bits": 8, "type": "float", "strategy": "tensor"}},
                        "b": {"weights": {"num_bits": 8, "type": "float", "strategy": "channel"}}}})",
               StatusCode::kUnimplemented, "config_groups");
  expect_error(R"("quantization_config": {"quant_method": "compressed-tensors"})",
               StatusCode::kInvalidArgument, "config_groups");
}

}  // namespace
}  // namespace lancet
