// `lancet quantize --fp8 --calibrate PROMPTS`: the written checkpoint carries one F32 scalar
// k_scale / v_scale per layer (read here straight from the safetensors header, not through
// our reader) equal to calibrate_kv_scales run in-process on the source with the same prompts
// and margin; config.json gets the compressed-tensors static kv_cache_scheme; loading the
// output with an FP8 KV cache uses those scales (model level, and the runtime through
// `lancet generate --kv-cache-dtype fp8`). The real model (SmolLM2 GGUF) goes through the
// text route: its prompts are tokenized by the GGUF's own tokenizer.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>

#include "backend/backend.h"
#include "eval/activation_scales.h"
#include "eval/golden_eval.h"
#include "eval/precision_eval.h"
#include "io/model_source.h"
#include "runner/kv_calibration.h"
#include "model/llama_model.h"
#include "model/step.h"
#include "quant/fp8_weights.h"
#include "test_paths.h"

namespace lancet {
namespace {

using nlohmann::json;

std::string ids_line(const std::vector<int32_t>& ids) { return json{{"prompt_ids", ids}}.dump(); }

// Random-id prompts of a few lengths (the fixtures ship no tokenizer).
std::vector<std::vector<int32_t>> fixture_prompts() {
  std::vector<int32_t> a = kv_calibration_random_tokens(1024, 180);
  return {std::vector<int32_t>(a.begin(), a.begin() + 7), std::vector<int32_t>(a.begin() + 7, a.begin() + 120),
          std::vector<int32_t>(a.begin() + 120, a.end())};
}

// name -> value of every F32 scalar tensor whose name ends in one of `suffixes` in the
// checkpoint's safetensors files, parsed from the raw header (the format's spec: u64 length,
// JSON, data).
std::map<std::string, float> raw_scalars(const std::string& dir, const std::vector<std::string>& suffixes) {
  std::map<std::string, float> out;
  for (const auto& e : std::filesystem::directory_iterator(dir)) {
    if (e.path().extension() != ".safetensors") continue;
    std::ifstream f(e.path(), std::ios::binary);
    uint64_t n = 0;
    f.read(reinterpret_cast<char*>(&n), 8);
    std::string hdr(n, '\0');
    f.read(hdr.data(), static_cast<std::streamsize>(n));
    const json h = json::parse(hdr);
    for (const auto& [name, t] : h.items()) {
      bool match = false;
      for (const std::string& sfx : suffixes)
        match = match || (name.size() > sfx.size() && name.compare(name.size() - sfx.size(), sfx.size(), sfx) == 0);
      if (!match) continue;
      EXPECT_EQ(t["dtype"], "F32") << name;
      EXPECT_EQ(t["shape"], json::array()) << name << ": scalar, as vLLM's k_scale/v_scale/input_scale parameters";
      const uint64_t off = t["data_offsets"][0].get<uint64_t>();
      EXPECT_EQ(t["data_offsets"][1].get<uint64_t>() - off, 4u) << name;
      float v = 0.f;
      f.seekg(static_cast<std::streamoff>(8 + n + off));
      f.read(reinterpret_cast<char*>(&v), 4);
      out[name] = v;
    }
  }
  return out;
}

std::map<std::string, float> raw_kv_scales(const std::string& dir) { return raw_scalars(dir, {".k_scale", ".v_scale"}); }

StatusOr<KvScales> in_process_scales(const ModelSource& src, const std::vector<std::vector<int32_t>>& prompts,
                                     float margin) {
  ASSIGN_OR_RETURN(auto be, make_backend("cpu"));
  ASSIGN_OR_RETURN(auto model, LlamaModel::create(src, *be, {}));
  KvCalibrationOptions co;
  co.margin = margin;
  return calibrate_kv_scales(*model, prompts, co);
}

void expect_rel_near(float got, float want, const std::string& what) {
  EXPECT_TRUE(std::isfinite(got) && got > 0.f) << what << " = " << got;
  EXPECT_LE(std::fabs(got - want), 1e-6f * std::fabs(want)) << what << ": " << got << " vs " << want;
}

struct CalibCase {
  const char* name;
  const char* fixture;
  const char* extra_flags;  // e.g. sharded output
  float margin;
};

class QuantizeCalibrate : public ::testing::TestWithParam<CalibCase> {};

TEST_P(QuantizeCalibrate, WritesScalesOfTheSourceModelAndTheRuntimeUsesThem) {
  const CalibCase c = GetParam();
  const std::string dir = testing::fixture_dir(c.fixture);
  const std::string tmp = testing::make_temp_dir();
  const auto prompts = fixture_prompts();
  {
    std::ofstream f(tmp + "/prompts.jsonl");
    f << "# calibration prompts\n";
    for (const auto& p : prompts) f << ids_line(p) << "\n";
  }
  const std::string out = tmp + "/fp8";
  std::string log;
  char margin[32];
  std::snprintf(margin, sizeof(margin), "%g", c.margin);
  ASSERT_EQ(testing::run_command(testing::lancet_binary() + " quantize --fp8 " + c.extra_flags + " --calibrate " + tmp +
                                     "/prompts.jsonl --calibrate-margin " + margin + " " + dir + " " + out + " 2>&1",
                                 &log),
            0)
      << log;
  EXPECT_NE(log.find("static KV cache scales"), std::string::npos) << log;

  // (a) one scalar per layer and kind, equal to the in-process calibration of the source.
  auto src = open_model_source(dir);
  ASSERT_TRUE(src.ok());
  const int64_t L = (*src)->config().num_layers;
  auto want = in_process_scales(**src, prompts, c.margin);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  const std::map<std::string, float> raw = raw_kv_scales(out);
  EXPECT_EQ(raw.size(), static_cast<size_t>(2 * L));
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    ASSERT_TRUE(raw.count(p + "k_scale") && raw.count(p + "v_scale")) << p;
    expect_rel_near(raw.at(p + "k_scale"), want->k[l], p + "k_scale");
    expect_rel_near(raw.at(p + "v_scale"), want->v[l], p + "v_scale");
    EXPECT_NE(raw.at(p + "k_scale"), raw.at(p + "v_scale"));
  }
  // A different margin would have given different scales: the flag reaches the calibration.
  auto other = in_process_scales(**src, prompts, c.margin * 2);
  ASSERT_TRUE(other.ok());
  EXPECT_GT(std::fabs(other->k[0] - raw.at("model.layers.0.self_attn.k_scale")), 1e-3f * other->k[0]);

  // config.json: compressed-tensors' static per-tensor FP8 kv_cache_scheme.
  const json cfg = json::parse(std::ifstream(out + "/config.json"));
  const json& kv = cfg["quantization_config"]["kv_cache_scheme"];
  EXPECT_EQ(kv["num_bits"], 8);
  EXPECT_EQ(kv["type"], "float");
  EXPECT_EQ(kv["strategy"], "tensor");
  EXPECT_EQ(kv["dynamic"], false);
  EXPECT_EQ(kv["symmetric"], true);
  if (std::string(c.extra_flags).find("max-shard-size") != std::string::npos) {
    const json idx = json::parse(std::ifstream(out + "/model.safetensors.index.json"));
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
      EXPECT_EQ(idx["weight_map"][p + "k_scale"], idx["weight_map"][p + "k_proj.weight"]) << p;
      EXPECT_EQ(idx["weight_map"][p + "v_scale"], idx["weight_map"][p + "k_proj.weight"]) << p;
    }
  }

  // (b) the loader: checkpoint scales, kv_cache_fp8 set, and an FP8 cache with them runs the
  // fixture's golden prompt close to the f32 cache.
  auto q = open_model_source(out);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  EXPECT_TRUE((*q)->config().quant.kv_cache_fp8);
  auto ck = kv_scales_from_checkpoint(**q);
  ASSERT_TRUE(ck.ok() && ck->has_value()) << ck.status().to_string();
  EXPECT_EQ((*ck)->source, "checkpoint");
  for (int64_t l = 0; l < L; ++l) {
    expect_rel_near((*ck)->k[l], want->k[l], "loaded k_scale");
    expect_rel_near((*ck)->v[l], want->v[l], "loaded v_scale");
  }
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  LlamaModelOptions mo;
  mo.max_model_len = 1024;
  auto model = LlamaModel::create(**q, **be, mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  PrecisionEvalConfig pc;
  pc.kv_k_scales = (*ck)->k;
  pc.kv_v_scales = (*ck)->v;
  const std::vector<int32_t>& ids = prompts[2];
  auto f32 = sequence_logits(**model, **be, ids, DType::kF32, 16, 0);
  auto fp8 = sequence_logits(**model, **be, ids, DType::kF8E4M3, 16, 0, &pc);
  ASSERT_TRUE(f32.ok() && fp8.ok()) << fp8.status().to_string();
  LogitAgreement ag;
  const int64_t V = (*q)->config().vocab_size;
  accumulate_agreement(f32->data(), fp8->data(), static_cast<int64_t>(ids.size()), V, &ag);
  // Random-weight fixtures amplify KV rounding (docs/FP8.md: worst cosine 0.984); measured
  // here: mean cosine 0.9915 (tiny-llama32) and 0.9962 (tiny-llama3).
  std::printf("  %s: fp8 vs f32 KV with the written scales: mean cosine %.5f, top-1 %.3f\n", c.fixture,
              ag.mean_cosine, ag.top1_agreement());
  EXPECT_GE(ag.mean_cosine, 0.98) << c.fixture;
  EXPECT_LT(ag.mean_cosine, 1.0 - 1e-9) << "the FP8 cache changed nothing: scales not applied?";

  // The runtime (generate --kv-cache-dtype fp8) reports the checkpoint's scales, no calibration.
  std::string glog;
  ASSERT_EQ(testing::run_command(testing::lancet_binary() + " generate --model " + out +
                                     " --kv-cache-dtype fp8 --max-model-len 256 --max-tokens 2 --prompt-ids 1,5,9 2>&1",
                                 &glog),
            0)
      << glog;
  KvScales expect = **ck;
  expect.source = "checkpoint";
  EXPECT_NE(glog.find("fp8 kv cache scales (checkpoint): " + format_kv_scales(expect)), std::string::npos) << glog;
  EXPECT_EQ(glog.find("calibrated on"), std::string::npos) << glog;
}

INSTANTIATE_TEST_SUITE_P(Fixtures, QuantizeCalibrate,
                         ::testing::Values(CalibCase{"TinyLlama32", "tiny-llama32", "", 1.5f},
                                           CalibCase{"TinyLlama3Sharded", "tiny-llama3", "--max-shard-size 0.0005", 1.25f}),
                         [](const auto& info) { return std::string(info.param.name); });

// --static-activation-scales: every quantized projection gets an input_scale; layer 0's q/k/v
// scale is recomputed here from the weights alone (RMSNorm of the prompt tokens' embedding
// rows), the others equal the in-process calibration; config.json says static per-tensor
// input activations; and lancet, which quantizes activations per token anyway, computes the
// same logits from this checkpoint as from one converted without the flag.
TEST(QuantizeStaticActivations, InputScalesFollowTheLayerInputsAndLeaveLancetsLogitsAlone) {
  const std::string dir = testing::fixture_dir("tiny-llama32");
  const std::string tmp = testing::make_temp_dir();
  const auto prompts = fixture_prompts();
  {
    std::ofstream f(tmp + "/prompts.jsonl");
    for (const auto& p : prompts) f << ids_line(p) << "\n";
  }
  std::string log;
  const std::string cmd = testing::lancet_binary() + " quantize --fp8 --calibrate " + tmp + "/prompts.jsonl ";
  ASSERT_EQ(testing::run_command(cmd + "--static-activation-scales " + dir + " " + tmp + "/static 2>&1", &log), 0) << log;
  EXPECT_NE(log.find("wrote static activation scales (input_scale) for"), std::string::npos) << log;
  ASSERT_EQ(testing::run_command(cmd + dir + " " + tmp + "/dynamic 2>&1", &log), 0) << log;

  auto src = open_model_source(dir);
  ASSERT_TRUE(src.ok());
  const ModelConfig& mc = (*src)->config();
  const int64_t L = mc.num_layers, H = mc.hidden_size;
  const std::map<std::string, float> raw = raw_scalars(tmp + "/static", {".input_scale"});
  ASSERT_EQ(raw.size(), static_cast<size_t>(7 * L));
  EXPECT_TRUE(raw_scalars(tmp + "/dynamic", {".input_scale"}).empty());
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    for (const char* m : {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                          "mlp.gate_proj", "mlp.up_proj", "mlp.down_proj"}) {
      ASSERT_TRUE(raw.count(p + m + ".input_scale")) << p << m;
      const float v = raw.at(p + m + ".input_scale");
      EXPECT_TRUE(std::isfinite(v) && v > 0.f) << p << m << " = " << v;
    }
    EXPECT_EQ(raw.at(p + "self_attn.q_proj.input_scale"), raw.at(p + "self_attn.k_proj.input_scale"));
    EXPECT_EQ(raw.at(p + "self_attn.q_proj.input_scale"), raw.at(p + "self_attn.v_proj.input_scale"));
    EXPECT_EQ(raw.at(p + "mlp.gate_proj.input_scale"), raw.at(p + "mlp.up_proj.input_scale"));
  }

  // Layer 0's q/k/v input from the weights alone: RMSNorm(embedding row) * input_layernorm.
  auto emb = tensor_to_f32(*(*src)->find("model.embed_tokens.weight"), "embed");
  auto norm = tensor_to_f32(*(*src)->find("model.layers.0.input_layernorm.weight"), "norm");
  ASSERT_TRUE(emb.ok() && norm.ok());
  double absmax = 0;
  for (const auto& p : prompts)
    for (int32_t id : p) {
      const float* row = emb->data() + static_cast<int64_t>(id) * H;
      double ss = 0;
      for (int64_t i = 0; i < H; ++i) ss += static_cast<double>(row[i]) * row[i];
      const double inv = 1.0 / std::sqrt(ss / static_cast<double>(H) + mc.rms_norm_eps);
      for (int64_t i = 0; i < H; ++i) absmax = std::max(absmax, std::fabs(row[i] * inv * (*norm)[i]));
    }
  const float want_qkv0 = static_cast<float>(absmax * 1.5 / 448.0);
  EXPECT_NEAR(raw.at("model.layers.0.self_attn.q_proj.input_scale"), want_qkv0, 1e-4 * want_qkv0);

  // The rest: what the calibration pass gives in process.
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  auto model = LlamaModel::create(**src, **be, {});
  ASSERT_TRUE(model.ok());
  ActivationScales act;
  ASSERT_TRUE(calibrate_kv_and_activation_scales(**model, **be, prompts, KvCalibrationOptions{}, &act).ok());
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    expect_rel_near(raw.at(p + "self_attn.q_proj.input_scale"), act.qkv[l], p + "qkv");
    expect_rel_near(raw.at(p + "self_attn.o_proj.input_scale"), act.o[l], p + "o");
    expect_rel_near(raw.at(p + "mlp.gate_proj.input_scale"), act.gate_up[l], p + "gate/up");
    expect_rel_near(raw.at(p + "mlp.down_proj.input_scale"), act.down[l], p + "down");
  }
  // Distinct inputs, distinct scales (the hooks sit at four different places).
  EXPECT_NE(act.qkv[1], act.o[1]);
  EXPECT_NE(act.gate_up[1], act.down[1]);

  const json cs = json::parse(std::ifstream(tmp + "/static/config.json"));
  const json& ia = cs["quantization_config"]["config_groups"]["group_0"]["input_activations"];
  EXPECT_EQ(ia["dynamic"], false);
  EXPECT_EQ(ia["strategy"], "tensor");
  const json cd = json::parse(std::ifstream(tmp + "/dynamic/config.json"));
  EXPECT_EQ(cd["quantization_config"]["config_groups"]["group_0"]["input_activations"]["dynamic"], true);

  // Both load; lancet's logits do not depend on the activation scheme.
  auto qs = open_model_source(tmp + "/static");
  auto qd = open_model_source(tmp + "/dynamic");
  ASSERT_TRUE(qs.ok() && qd.ok()) << qs.status().to_string();
  EXPECT_FALSE((*qs)->config().quant.dynamic_activations);
  EXPECT_TRUE((*qd)->config().quant.dynamic_activations);
  auto ms = LlamaModel::create(**qs, **be, {});
  auto md = LlamaModel::create(**qd, **be, {});
  ASSERT_TRUE(ms.ok() && md.ok());
  auto ls = sequence_logits(**ms, **be, prompts[1], DType::kF32, 16, 0);
  auto ld = sequence_logits(**md, **be, prompts[1], DType::kF32, 16, 0);
  ASSERT_TRUE(ls.ok() && ld.ok());
  EXPECT_EQ(*ls, *ld);
}

// `--static-activation-scales` without `--calibrate` is a usage error that writes nothing.
TEST(QuantizeStaticActivations, NeedsCalibrate) {
  const std::string tmp = testing::make_temp_dir();
  std::string log;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " quantize --fp8 --static-activation-scales " +
                                     testing::fixture_dir("tiny-llama32") + " " + tmp + "/o 2>&1",
                                 &log),
            2);
  EXPECT_NE(log.find("--static-activation-scales needs --calibrate"), std::string::npos) << log;
  EXPECT_FALSE(std::filesystem::exists(tmp + "/o"));
}

// Independent token ids for the text route: the PyPI `tokenizers` package over the GGUF's
// vocabulary and merges (SmolLM2 adds no BOS), one comma-separated line per text of the JSON
// list in argv[2].
const char* kTokenize = R"PY(
import sys, json, gguf
from tokenizers import Tokenizer, models, pre_tokenizers
r = gguf.GGUFReader(sys.argv[1])
def arr(k):
    f = r.fields[k]; return [bytes(f.parts[i]) for i in f.data]
toks = [t.decode("utf-8") for t in arr("tokenizer.ggml.tokens")]
merges = [tuple(m.decode("utf-8").split(" ")) for m in arr("tokenizer.ggml.merges")]
tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges))
tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
for text in json.load(open(sys.argv[2])):
    print(",".join(str(i) for i in tk.encode(text).ids))
)PY";

TEST(QuantizeCalibrateSmolLM2, TextPromptsUseTheGgufTokenizer) {
  const std::string gguf = testing::default_model();
  ASSERT_FALSE(gguf.empty()) << "the default model is missing (make model)";
  const std::string tmp = testing::make_temp_dir();
  // Plain text, a JSON "prompt", a text line with a \n escape, and ids, mixed in one file.
  const std::vector<std::string> texts = {
      "The lighthouse keeper climbed the stairs every evening to check the lamp and the oil.",
      "def area(r):\n    return 3.14159 * r * r",
      "Dear Sam,\nthe meeting moved to Tuesday at 10:30; bring the Q3 numbers."};
  const std::vector<int32_t> raw_ids = {504, 3575, 282, 4649, 314, 7042, 28, 284, 260, 3575};
  {
    std::ofstream f(tmp + "/prompts.txt");
    f << texts[0] << "\n# a comment line\n"
      << json{{"prompt", texts[1]}}.dump() << "\n"
      << "Dear Sam,\\nthe meeting moved to Tuesday at 10:30; bring the Q3 numbers.\n\n"
      << ids_line(raw_ids) << "\n";
    std::ofstream(tmp + "/texts.json") << json(texts).dump();
    std::ofstream(tmp + "/tok.py") << kTokenize;
  }
  std::string tok_out;
  ASSERT_EQ(testing::run_command(testing::python() + " " + tmp + "/tok.py " + gguf + " " + tmp + "/texts.json 2>&1",
                                 &tok_out),
            0)
      << tok_out;
  std::vector<std::vector<int32_t>> prompts;
  std::istringstream lines(tok_out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<int32_t> v;
    std::istringstream f(line);
    for (std::string t; std::getline(f, t, ',');) v.push_back(std::stoi(t));
    prompts.push_back(v);
  }
  ASSERT_EQ(prompts.size(), texts.size()) << tok_out;
  prompts.push_back(raw_ids);

  const std::string out = tmp + "/fp8";
  std::string log;
  // The KV scales are the subject here; round-to-nearest keeps the conversion quick
  // (error-compensated rounding of this model: tests/cli/eval_precision_test.cc).
  ASSERT_EQ(testing::run_command(testing::lancet_binary() + " quantize --fp8 --fp8-rounding nearest --calibrate " +
                                     tmp + "/prompts.txt " + gguf + " " + out + " 2>&1",
                                 &log),
            0)
      << log;
  auto src = open_model_source(gguf);
  ASSERT_TRUE(src.ok());
  auto want = in_process_scales(**src, prompts, KvCalibrationOptions{}.margin);
  ASSERT_TRUE(want.ok()) << want.status().to_string();
  const std::map<std::string, float> raw = raw_kv_scales(out);
  const int64_t L = (*src)->config().num_layers;
  ASSERT_EQ(raw.size(), static_cast<size_t>(2 * L));
  for (int64_t l = 0; l < L; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".self_attn.";
    expect_rel_near(raw.at(p + "k_scale"), want->k[l], p + "k_scale");
    expect_rel_near(raw.at(p + "v_scale"), want->v[l], p + "v_scale");
  }
  // Dropping a prompt changes some layer's absmax: every prompt reached the calibration.
  auto fewer = in_process_scales(**src, {prompts[0], prompts[1], prompts[3]}, KvCalibrationOptions{}.margin);
  ASSERT_TRUE(fewer.ok());
  EXPECT_TRUE(fewer->k != want->k || fewer->v != want->v);
  auto q = open_model_source(out);
  ASSERT_TRUE(q.ok()) << q.status().to_string();
  auto ck = kv_scales_from_checkpoint(**q);
  ASSERT_TRUE(ck.ok() && ck->has_value());
  EXPECT_EQ((*ck)->source, "checkpoint");
  std::printf("  SmolLM2 static scales: %s\n", format_kv_scales(**ck).c_str());
}

}  // namespace
}  // namespace lancet
