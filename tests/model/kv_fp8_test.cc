// FP8 KV cache at the model level: scales read from checkpoint tensors (the names vLLM
// loads), the online calibration (its absmax equals the K/V actually written to an f32 cache),
// the HF fixtures' golden logits with an FP8 cache, and the real default model (SmolLM2) with
// FP8 vs f32 KV on English prompts tokenized by the PyPI `tokenizers` package.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "backend/backend.h"
#include "io/model_source.h"
#include "io/safetensors.h"
#include "runner/kv_calibration.h"
#include "model/llama_model.h"
#include "runner/llama_executor.h"
#include "runner/sequence_runner.h"
#include "model/step.h"
#include "test_paths.h"

namespace lancet {
namespace {

namespace fs = std::filesystem;

// Copies a fixture and appends extra scalar tensors to its model.safetensors.
// extra: "name:dtype:shape:value" with dtype F32 or BF16 and shape "" (scalar) or "1".
const char* kAddTensors = R"PY(
import sys, json, struct, shutil, os, numpy as np
src, dst = sys.argv[1], sys.argv[2]
os.makedirs(dst, exist_ok=True)
for f in ("config.json", "generation_config.json"):
    shutil.copy(os.path.join(src, f), dst)
raw = open(os.path.join(src, "model.safetensors"), "rb").read()
n = struct.unpack("<Q", raw[:8])[0]
hdr = json.loads(raw[8:8 + n]); data = bytearray(raw[8 + n:])
for spec in sys.argv[3:]:
    name, dt, shape, val = spec.split(":")
    if dt == "F32":
        b = np.array([float(val)], np.float32).tobytes()
    else:  # BF16: the top half of the f32 bits (values chosen to be exact)
        b = (np.array([float(val)], np.float32).view(np.uint32) >> 16).astype(np.uint16).tobytes()
    hdr[name] = {"dtype": dt, "shape": [] if shape == "" else [int(shape)], "data_offsets": [len(data), len(data) + len(b)]}
    data += b
h = json.dumps(hdr).encode(); h += b" " * ((8 - len(h) % 8) % 8)
open(os.path.join(dst, "model.safetensors"), "wb").write(struct.pack("<Q", len(h)) + h + bytes(data))
)PY";

std::string make_checkpoint(const std::vector<std::string>& extra) {
  const std::string dir = testing::make_temp_dir();
  std::ofstream(dir + "/add.py") << kAddTensors;
  std::string cmd = testing::python() + " " + dir + "/add.py " + testing::fixture_dir("tiny-gqa8") + " " + dir + "/ck";
  for (const std::string& e : extra) cmd += " '" + e + "'";
  std::string out;
  EXPECT_EQ(testing::run_command(cmd + " 2>&1", &out), 0) << out;
  return dir + "/ck";
}

TEST(KvScalesCheckpoint, ReadsSelfAttnScales) {
  const std::string ck = make_checkpoint({"model.layers.0.self_attn.k_scale:F32::0.0123",
                                          "model.layers.0.self_attn.v_scale:F32::0.0456",
                                          "model.layers.1.self_attn.k_scale:F32:1:0.5",
                                          "model.layers.1.self_attn.v_scale:F32:1:2.25"});
  auto src = open_model_source(ck);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto s = kv_scales_from_checkpoint(**src);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->source, "checkpoint");
  EXPECT_EQ((*s)->k, (std::vector<float>{0.0123f, 0.5f}));
  EXPECT_EQ((*s)->v, (std::vector<float>{0.0456f, 2.25f}));
}

TEST(KvScalesCheckpoint, ReadsCompressedTensorsOutputScales) {
  // compressed-tensors names the KV scales after the projections' outputs, in bf16.
  const std::string ck = make_checkpoint({"model.layers.0.self_attn.k_proj.output_scale:BF16:1:0.03125",
                                          "model.layers.0.self_attn.v_proj.output_scale:BF16:1:0.75",
                                          "model.layers.1.self_attn.k_proj.output_scale:BF16:1:0.0078125",
                                          "model.layers.1.self_attn.v_proj.output_scale:BF16:1:3.5"});
  auto src = open_model_source(ck);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto s = kv_scales_from_checkpoint(**src);
  ASSERT_TRUE(s.ok()) << s.status().to_string();
  ASSERT_TRUE(s->has_value());
  EXPECT_EQ((*s)->k, (std::vector<float>{0.03125f, 0.0078125f}));
  EXPECT_EQ((*s)->v, (std::vector<float>{0.75f, 3.5f}));
}

TEST(KvScalesCheckpoint, MissingLayersAndBadValuesAreErrors) {
  {
    auto src = open_model_source(testing::fixture_dir("tiny-gqa8"));
    ASSERT_TRUE(src.ok());
    auto s = kv_scales_from_checkpoint(**src);
    ASSERT_TRUE(s.ok());
    EXPECT_FALSE(s->has_value());  // no scales: the caller calibrates
  }
  {
    const std::string ck = make_checkpoint({"model.layers.0.self_attn.k_scale:F32::0.5",
                                            "model.layers.0.self_attn.v_scale:F32::0.5"});
    auto src = open_model_source(ck);
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    auto s = kv_scales_from_checkpoint(**src);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("model.layers.1.self_attn.k_scale"), std::string::npos)
        << s.status().to_string();
  }
  {
    const std::string ck = make_checkpoint(
        {"model.layers.0.self_attn.k_scale:F32::0.5", "model.layers.0.self_attn.v_scale:F32::-1",
         "model.layers.1.self_attn.k_scale:F32::0.5", "model.layers.1.self_attn.v_scale:F32::0.5"});
    auto src = open_model_source(ck);
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    auto s = kv_scales_from_checkpoint(**src);
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.status().message().find("model.layers.0.self_attn.v_scale"), std::string::npos);
  }
}

int64_t argmax(const float* x, int64_t n) { return std::max_element(x, x + n) - x; }

double cosine(const float* a, const float* b, int64_t n) {
  double d = 0, na = 0, nb = 0;
  for (int64_t i = 0; i < n; ++i) {
    d += static_cast<double>(a[i]) * b[i];
    na += static_cast<double>(a[i]) * a[i];
    nb += static_cast<double>(b[i]) * b[i];
  }
  return d / std::sqrt(std::max(na * nb, 1e-300));
}

// Logits of every position of `ids` (one prefill step) on a fresh cache of `dtype`.
std::vector<float> all_logits(LlamaModel& model, Backend& be, const std::vector<int32_t>& ids, DType dtype,
                              const KvScales* scales) {
  const int64_t n = static_cast<int64_t>(ids.size());
  auto exec = LlamaExecutor::create(model, KvBlockConfig{(n + 15) / 16, 16}, dtype).value();
  if (scales) EXPECT_TRUE(exec->set_kv_scales(scales->k, scales->v).ok());
  SequenceRunner seq(*exec);
  std::vector<int32_t> all(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) all[i] = static_cast<int32_t>(i);
  std::vector<float> logits;
  Status r = seq.step(ids, all, &logits);
  EXPECT_TRUE(r.ok()) << r.to_string();
  return logits;
}

// Prefill then `steps` greedy decode steps; returns the generated tokens.
std::vector<int32_t> greedy(LlamaModel& model, Backend& be, const std::vector<int32_t>& prompt, int64_t steps,
                            DType dtype, const KvScales* scales) {
  const int64_t n = static_cast<int64_t>(prompt.size()), V = model.config().vocab_size;
  auto exec = LlamaExecutor::create(model, KvBlockConfig{(n + steps + 15) / 16, 16}, dtype).value();
  if (scales) EXPECT_TRUE(exec->set_kv_scales(scales->k, scales->v).ok());
  SequenceRunner seq(*exec);
  std::vector<int32_t> out;
  std::vector<float> logits;
  EXPECT_TRUE(seq.step_last(prompt, &logits).ok());
  for (int64_t i = 0; i < steps; ++i) {
    out.push_back(static_cast<int32_t>(argmax(logits.data(), V)));
    if (i + 1 == steps) break;
    EXPECT_TRUE(seq.step_last(std::span<const int32_t>(&out.back(), 1), &logits).ok());
  }
  return out;
}

TEST(KvCalibration, AbsmaxIsWhatTheCacheHolds) {
  auto src = open_model_source(testing::fixture_dir("tiny-gqa8"));
  ASSERT_TRUE(src.ok());
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  LlamaModelOptions mo;
  mo.max_model_len = 1024;
  auto model = LlamaModel::create(**src, **be, mo);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  const std::vector<int32_t> a = kv_calibration_random_tokens(1024, 200);
  std::vector<int32_t> b = kv_calibration_random_tokens(1024, 300);
  b.erase(b.begin(), b.begin() + 150);
  KvCalibrationOptions co;
  co.margin = 1.25f;
  auto scales = calibrate_kv_scales(**model, {a, b}, co);
  ASSERT_TRUE(scales.ok()) << scales.status().to_string();
  ASSERT_EQ(scales->k.size(), 2u);
  ASSERT_EQ(scales->v.size(), 2u);
  EXPECT_EQ(scales->source, "calibration");
  // Independent absmax: run the same prompts with an f32 cache (host memory on CPU) and read
  // back what kv_write stored (K after rope).
  std::vector<float> kmax(2, 0.f), vmax(2, 0.f);
  for (const auto& p : {a, b}) {
    const int64_t n = static_cast<int64_t>(p.size());
    auto exec = LlamaExecutor::create(**model, KvBlockConfig{(n + 15) / 16, 16}, DType::kF32).value();
    SequenceRunner seq(*exec);
    std::vector<float> lg;
    ASSERT_TRUE(seq.step_last(p, &lg, false).ok());
    const int64_t row = 64;  // one kv head of 64
    const auto* table = &seq.block_table();
    for (int l = 0; l < 2; ++l) {
      const KvCacheLayer& c = exec->kv(0).layer(l);
      for (int64_t t = 0; t < n; ++t) {
        const int64_t slot = (*table)[t / 16] * 16 + t % 16;
        for (int64_t i = 0; i < row; ++i) {
          kmax[l] = std::max(kmax[l], std::fabs(static_cast<const float*>(c.k)[slot * row + i]));
          vmax[l] = std::max(vmax[l], std::fabs(static_cast<const float*>(c.v)[slot * row + i]));
        }
      }
    }
  }
  for (int l = 0; l < 2; ++l) {
    EXPECT_TRUE(std::isfinite(scales->k[l]) && scales->k[l] > 0.f && scales->k[l] != 1.f);
    EXPECT_TRUE(std::isfinite(scales->v[l]) && scales->v[l] > 0.f && scales->v[l] != 1.f);
    EXPECT_FLOAT_EQ(scales->k[l], kmax[l] * 1.25f / 448.f) << "layer " << l;
    EXPECT_FLOAT_EQ(scales->v[l], vmax[l] * 1.25f / 448.f) << "layer " << l;
  }
  std::printf("  tiny-gqa8 calibrated: %s\n", format_kv_scales(*scales).c_str());
}

TEST(KvCalibration, ForwardRefusesFp8CacheWithoutScales) {
  auto src = open_model_source(testing::fixture_dir("tiny-gqa8"));
  ASSERT_TRUE(src.ok());
  auto be = make_backend("cpu");
  auto model = LlamaModel::create(**src, **be, {});
  ASSERT_TRUE(model.ok());
  auto exec = LlamaExecutor::create(**model, KvBlockConfig{4, 16}, DType::kF8E4M3).value();
  EXPECT_FALSE(exec->kv(0).has_scales());
  EXPECT_EQ(exec->set_kv_scales({0.1f}, {0.1f}).code(), StatusCode::kInvalidArgument);  // one per layer
  EXPECT_EQ(exec->set_kv_scales({0.1f, 0.f}, {0.1f, 0.1f}).code(), StatusCode::kInvalidArgument);
  const std::vector<int32_t> ids = {1, 5, 9};
  SequenceRunner seq(*exec);
  std::vector<float> lg;
  EXPECT_EQ(seq.step_last(ids, &lg).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE(exec->set_kv_scales({0.1f, 0.2f}, {0.3f, 0.4f}).ok());
  EXPECT_EQ(exec->kv(0).layer(1).k_scale, 0.2f);
  EXPECT_EQ(exec->kv(0).layer(1).v_scale, 0.4f);
  EXPECT_TRUE(seq.step_last(ids, &lg).ok());
}

// HF golden logits (fixtures/README.md) with an FP8 cache calibrated on random token ids (the
// fixtures' weights are random and they ship no tokenizer, as with a dummy model): prompts up
// to 333 tokens, logits at every stored position, and the greedy continuation teacher-forced
// (one decode step per token, so decode reads FP8 too).
TEST(KvFp8Fixtures, GoldenLogitsWithinFp8Tolerance) {
  double worst_cos = 1, worst_rel = 0;
  int64_t top1 = 0, positions = 0, greedy_ok = 0, greedy_n = 0;
  for (const char* name : {"tiny-llama3", "tiny-llama32", "tiny-gqa8", "tiny-rope-linear", "tiny-rope-yarn"}) {
    const std::string dir = testing::fixture_dir(name);
    auto src = open_model_source(dir);
    ASSERT_TRUE(src.ok()) << src.status().to_string();
    auto be = make_backend("cpu");
    LlamaModelOptions mo;
    mo.max_model_len = 1024;
    auto model = LlamaModel::create(**src, **be, mo);
    ASSERT_TRUE(model.ok());
    const int64_t V = (*model)->config().vocab_size;
    auto scales = calibrate_kv_scales(**model, {kv_calibration_random_tokens(V, 400)});
    ASSERT_TRUE(scales.ok()) << scales.status().to_string();
    auto golden = SafetensorsFile::open(dir + "/golden.safetensors");
    ASSERT_TRUE(golden.ok());
    for (const char* c : {"case1", "case2", "case3"}) {
      const std::string cn = c;
      auto read_i32 = [&](const std::string& n) {
        const TensorView* t = (*golden)->find(cn + "." + n);
        std::vector<int32_t> v(t->numel());
        std::memcpy(v.data(), t->data, v.size() * 4);
        return v;
      };
      std::vector<int32_t> ids = read_i32("input_ids"), pos = read_i32("positions"), gr = read_i32("greedy");
      const float* ref = static_cast<const float*>((*golden)->find(cn + ".logits")->data);
      std::vector<int32_t> seq = ids;
      seq.insert(seq.end(), gr.begin(), gr.end() - 1);
      const std::vector<float> lg = all_logits(**model, **be, seq, DType::kF8E4M3, &*scales);
      double err = 0, mx = 0, cmin = 1;
      for (size_t p = 0; p < pos.size(); ++p) {
        const float* a = lg.data() + static_cast<int64_t>(pos[p]) * V;
        const float* b = ref + p * V;
        for (int64_t i = 0; i < V; ++i) {
          err = std::max(err, std::fabs(static_cast<double>(a[i]) - b[i]));
          mx = std::max(mx, std::fabs(static_cast<double>(b[i])));
        }
        cmin = std::min(cmin, cosine(a, b, V));
        top1 += argmax(a, V) == argmax(b, V);
        ++positions;
      }
      // Teacher-forced greedy: the reference's next token is our argmax at each step.
      for (size_t i = 0; i < gr.size(); ++i)
        greedy_ok += argmax(lg.data() + (ids.size() - 1 + i) * V, V) == gr[i];
      greedy_n += static_cast<int64_t>(gr.size());
      std::printf("  %s/%s len %zu: rel_err %.3e min_cos %.6f\n", name, c, ids.size(), err / mx, cmin);
      worst_cos = std::min(worst_cos, cmin);
      worst_rel = std::max(worst_rel, err / mx);
    }
  }
  std::printf("  fp8 kv on fixtures: worst rel_err %.3e, worst cos %.6f, top1 %lld/%lld, greedy %lld/%lld\n",
              worst_rel, worst_cos, (long long)top1, (long long)positions, (long long)greedy_ok,
              (long long)greedy_n);
  // f32 KV meets 1e-4 / 0.99999 / every token (golden_logits_test). These random-weight models
  // amplify KV rounding: bf16 KV already gives rel_err ~8e-3 and cos ~0.99995, and E4M3 rounds
  // 16x coarser (3 mantissa bits, not 7), so measured: worst rel_err 0.16, worst cos 0.984,
  // top1 84-88%, teacher-forced greedy ~81%; the same with the scales from the golden prompts
  // themselves or with margins 1 to 4, so it is the format, not the calibration.
  EXPECT_LT(worst_rel, 0.25);
  EXPECT_GT(worst_cos, 0.97);
  EXPECT_GE(static_cast<double>(top1), 0.75 * positions);
  EXPECT_GE(static_cast<double>(greedy_ok), 0.7 * greedy_n);
}

// The real default model, calibrated as the runtime does (the built-in text, plain and as a
// ChatML conversation), then English text with FP8 vs f32 KV: the logits of every position of
// whole conversations (prompt and answer, one prefill each), and free-running greedy decoding
// (which reads the FP8 cache one token at a time). Tokens come from the PyPI `tokenizers`
// package over the GGUF's vocabulary and merges.
const char* kTokenize = R"PY(
import sys, json, gguf
from tokenizers import Tokenizer, AddedToken, models, pre_tokenizers
r = gguf.GGUFReader(sys.argv[1])
def arr(k):
    f = r.fields[k]; return [bytes(f.parts[i]) for i in f.data]
toks = [t.decode("utf-8") for t in arr("tokenizer.ggml.tokens")]
merges = [tuple(m.decode("utf-8").split(" ")) for m in arr("tokenizer.ggml.merges")]
f = r.fields["tokenizer.ggml.token_type"]; types = [int(f.parts[i][0]) for i in f.data]
tk = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(toks)}, merges=merges))
tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
tk.add_special_tokens([AddedToken(t, special=True) for t, ty in zip(toks, types) if ty == 3])  # <|im_start|> ...
texts = open(sys.argv[2]).read().split("\n=====\n")
chat = json.loads(texts[1])  # the calibration conversation, rendered as SmolLM2's ChatML template does
texts[1] = "".join("<|im_start|>%s\n%s<|im_end|>\n" % (m["role"], m["content"]) for m in chat)
for text in texts:
    print(",".join(str(i) for i in tk.encode(text).ids))
)PY";

// Whole conversations (evaluated at every position) ...
const char* kTexts[] = {
    "<|im_start|>system\nYou are a helpful AI assistant named SmolLM, trained by Hugging Face<|im_end|>\n"
    "<|im_start|>user\nWhat is the capital of France, and what is it famous for?<|im_end|>\n<|im_start|>assistant\n"
    "The capital of France is Paris. It is famous for the Eiffel Tower, the Louvre museum, its cafes and fashion "
    "houses, and the river Seine that runs through the city.<|im_end|>\n",
    "<|im_start|>user\nWrite a Python function that returns the n-th Fibonacci number.<|im_end|>\n"
    "<|im_start|>assistant\nHere is a simple iterative version:\n\ndef fib(n):\n    a, b = 0, 1\n    for _ in "
    "range(n):\n        a, b = b, a + b\n    return a\n<|im_end|>\n",
    "<|im_start|>user\nGive me three tips for staying focused while studying.<|im_end|>\n<|im_start|>assistant\n"
    "1. Put your phone in another room.\n2. Work in short blocks of 25 minutes with 5-minute breaks.\n3. Decide "
    "before you start exactly what you want to finish.<|im_end|>\n",
    "Photosynthesis is the process by which green plants use sunlight to turn water and carbon dioxide into sugar "
    "and oxygen. It takes place mostly in the leaves, inside small structures called chloroplasts.",
};
// ... and prompts for free-running greedy decoding.
const char* kGreedyPrompts[] = {
    "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n",
    "<|im_start|>user\nName three planets of the solar system.<|im_end|>\n<|im_start|>assistant\n",
};

TEST(KvFp8SmolLM2, CosineAndGreedyVsF32Kv) {
  const std::string path = testing::default_model();
  if (path.empty()) FAIL() << "default model not downloaded (tools/fetch_model.sh)";
  const std::string dir = testing::make_temp_dir();
  std::ofstream(dir + "/tok.py") << kTokenize;
  {
    std::ofstream t(dir + "/texts.txt");
    t << kv_calibration_text() << "\n=====\n" << kv_calibration_chat_json();
    for (const char* p : kTexts) t << "\n=====\n" << p;
    for (const char* p : kGreedyPrompts) t << "\n=====\n" << p;
  }
  std::string out;
  ASSERT_EQ(testing::run_command(testing::python() + " " + dir + "/tok.py " + path + " " + dir + "/texts.txt 2>&1", &out), 0)
      << out;
  std::vector<std::vector<int32_t>> ids;
  std::istringstream lines(out);
  for (std::string line; std::getline(lines, line);) {
    std::vector<int32_t> v;  // SmolLM2 adds no BOS: the ids are the tokenizer's as they are
    std::istringstream f(line);
    for (std::string tok; std::getline(f, tok, ',');) v.push_back(std::stoi(tok));
    ids.push_back(v);
  }
  const size_t n_texts = std::size(kTexts), n_greedy = std::size(kGreedyPrompts);
  ASSERT_EQ(ids.size(), 2 + n_texts + n_greedy) << out;
  ASSERT_GT(ids[0].size(), 250u);  // "a few hundred tokens"
  ASSERT_EQ(ids[2][0], 1);         // <|im_start|> is one special token

  auto src = open_model_source(path);
  ASSERT_TRUE(src.ok());
  auto be = make_backend("cpu");
  LlamaModelOptions mo;
  mo.max_model_len = 1024;
  auto model = LlamaModel::create(**src, **be, mo);
  ASSERT_TRUE(model.ok());
  const int64_t V = (*model)->config().vocab_size;
  auto scales = calibrate_kv_scales(**model, {ids[0], ids[1]});
  ASSERT_TRUE(scales.ok()) << scales.status().to_string();
  std::printf("  SmolLM2 calibrated: %s\n", format_kv_scales(*scales).c_str());

  double cos_sum = 0, cos_min = 1;
  int64_t n_pos = 0, top1 = 0;
  for (size_t p = 2; p < 2 + n_texts; ++p) {
    const std::vector<float> ref = all_logits(**model, **be, ids[p], DType::kF32, nullptr);
    const std::vector<float> got = all_logits(**model, **be, ids[p], DType::kF8E4M3, &*scales);
    for (size_t i = 0; i < ids[p].size(); ++i) {
      const double c = cosine(got.data() + i * V, ref.data() + i * V, V);
      cos_sum += c;
      cos_min = std::min(cos_min, c);
      top1 += argmax(got.data() + i * V, V) == argmax(ref.data() + i * V, V);
      ++n_pos;
    }
  }
  constexpr int64_t kSteps = 12;
  int64_t greedy_same = 0;
  for (size_t p = 2 + n_texts; p < ids.size(); ++p) {
    const std::vector<int32_t> a = greedy(**model, **be, ids[p], kSteps, DType::kF32, nullptr);
    const std::vector<int32_t> b = greedy(**model, **be, ids[p], kSteps, DType::kF8E4M3, &*scales);
    int64_t same = 0;
    while (same < kSteps && a[same] == b[same]) ++same;
    greedy_same += same;
  }
  const double mean_cos = cos_sum / n_pos;
  std::printf("  SmolLM2 fp8 vs f32 KV: mean cos %.6f min cos %.6f top1 %lld/%lld, greedy prefix %lld/%lld\n",
              mean_cos, cos_min, (long long)top1, (long long)n_pos, (long long)greedy_same,
              (long long)(kSteps * n_greedy));
  // Measured: mean cos 0.996, top1 ~93%, greedy prefix 15/24 (bf16 KV: 0.9987, ~97%); the issue
  // asks for a mean cosine >= 0.99.
  EXPECT_GE(mean_cos, 0.99);
  EXPECT_GE(static_cast<double>(top1), 0.9 * n_pos);
  EXPECT_GE(greedy_same, kSteps);  // at least one prompt decodes exactly the same
}

}  // namespace
}  // namespace lancet
