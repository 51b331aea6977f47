// HF fixtures -> GGUF -> open_gguf_source: the config survives, every tensor holds the HF
// values (exactly for F32, through Q8_0 quantization otherwise), q/k rows follow llama.cpp's
// permutation (written out here independently from its reshape/swapaxes definition), and
// Llama 3 rope scaling arrives as rope_freqs whose divided frequencies equal HF's.
#include "io/gguf_convert.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

#include "io/gguf.h"
#include "io/gguf_source.h"
#include "io/hf_source.h"
#include "quant/gguf_blocks.h"
#include "test_paths.h"

namespace lancet {
namespace {

std::vector<float> row_f32(const TensorView& t, int64_t r) {
  const int64_t cols = t.cols();
  const uint64_t rb = *dtype_row_bytes(t.dtype, cols);
  std::vector<float> out(cols);
  EXPECT_TRUE(dequantize_row(t.dtype, static_cast<const uint8_t*>(t.data) + r * rb, out.data(), cols).ok());
  return out;
}

// llama.cpp: w.reshape(n_head, 2, head_dim/2, cols).swapaxes(1, 2).reshape(w.shape), so output
// row (h, i, j) = h*head_dim + 2*i + j holds input row (h, j, i) = h*head_dim + j*head_dim/2 + i.
std::vector<int64_t> llama_cpp_permutation(int64_t n_head, int64_t head_dim) {
  std::vector<int64_t> src(n_head * head_dim);
  for (int64_t h = 0; h < n_head; ++h)
    for (int64_t i = 0; i < head_dim / 2; ++i)
      for (int64_t j = 0; j < 2; ++j) src[h * head_dim + 2 * i + j] = h * head_dim + j * (head_dim / 2) + i;
  return src;
}

void expect_same_config(const ModelConfig& hf, const ModelConfig& g) {
  EXPECT_EQ(g.vocab_size, hf.vocab_size);
  EXPECT_EQ(g.hidden_size, hf.hidden_size);
  EXPECT_EQ(g.intermediate_size, hf.intermediate_size);
  EXPECT_EQ(g.num_layers, hf.num_layers);
  EXPECT_EQ(g.num_heads, hf.num_heads);
  EXPECT_EQ(g.num_kv_heads, hf.num_kv_heads);
  EXPECT_EQ(g.head_dim, hf.head_dim);
  EXPECT_EQ(g.max_position_embeddings, hf.max_position_embeddings);
  EXPECT_EQ(g.tie_word_embeddings, hf.tie_word_embeddings);
  EXPECT_EQ(g.bos_token_id, hf.bos_token_id);
  EXPECT_EQ(g.eos_token_ids, hf.eos_token_ids);
  // GGUF stores these as f32.
  EXPECT_EQ(g.rms_norm_eps, static_cast<double>(static_cast<float>(hf.rms_norm_eps)));
  EXPECT_EQ(g.rope_theta, static_cast<double>(static_cast<float>(hf.rope_theta)));
  EXPECT_TRUE(g.rope_interleaved);
  EXPECT_FALSE(hf.rope_interleaved);
  if (hf.rope_scaling.type == RopeType::kLlama3) {
    EXPECT_EQ(g.rope_scaling.type, RopeType::kDefault);  // carried by rope_freqs instead
  } else {
    EXPECT_EQ(g.rope_scaling.type, hf.rope_scaling.type);
    EXPECT_FLOAT_EQ(g.rope_scaling.factor, hf.rope_scaling.factor);
  }
  if (hf.rope_scaling.type == RopeType::kYarn) {
    EXPECT_EQ(g.rope_scaling.original_max_position_embeddings,
              hf.rope_scaling.original_max_position_embeddings);
    EXPECT_FLOAT_EQ(g.rope_scaling.beta_fast, hf.rope_scaling.beta_fast);
    EXPECT_FLOAT_EQ(g.rope_scaling.beta_slow, hf.rope_scaling.beta_slow);
  }
}

// HF's llama3 inverse frequencies (transformers _compute_llama3_parameters), in double.
std::vector<double> hf_llama3_inv_freq(const ModelConfig& c) {
  const RopeScaling& rs = c.rope_scaling;
  const double old_ctx = rs.original_max_position_embeddings;
  const double low_wl = old_ctx / rs.low_freq_factor, high_wl = old_ctx / rs.high_freq_factor;
  std::vector<double> out;
  for (int64_t i = 0; i < c.head_dim; i += 2) {
    const double inv = 1.0 / std::pow(c.rope_theta, static_cast<double>(i) / c.head_dim);
    const double wl = 2 * std::numbers::pi / inv;
    double v = wl > low_wl ? inv / rs.factor : inv;
    const double smooth = (old_ctx / wl - rs.low_freq_factor) / (rs.high_freq_factor - rs.low_freq_factor);
    if (!(wl < high_wl) && !(wl > low_wl)) v = (1 - smooth) * v / rs.factor + smooth * v;
    out.push_back(v);
  }
  return out;
}

void convert_and_check(const std::string& fixture, DType wtype) {
  SCOPED_TRACE(fixture + " -> " + dtype_name(wtype));
  auto hf = open_hf_source(testing::fixture_dir(fixture));
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  const std::string out = testing::make_temp_dir() + "/" + fixture + ".gguf";
  Status s = convert_to_gguf(**hf, out, wtype);
  ASSERT_TRUE(s.ok()) << s.to_string();
  auto g = open_gguf_source(out);
  ASSERT_TRUE(g.ok()) << g.status().to_string();
  const ModelConfig& hc = (*hf)->config();
  const ModelConfig& gc = (*g)->config();
  expect_same_config(hc, gc);

  size_t seen = 0;
  for (const auto& [name, ht] : (*hf)->tensors()) {
    const TensorView* gt = (*g)->find(name);
    ASSERT_NE(gt, nullptr) << name;
    ++seen;
    ASSERT_EQ(gt->shape, ht.shape) << name;
    const bool matrix = ht.shape.size() == 2;
    EXPECT_EQ(gt->dtype, matrix ? wtype : DType::kF32) << name;
    const bool is_q = name.find("q_proj.weight") != std::string::npos;
    const bool is_k = name.find("k_proj.weight") != std::string::npos;
    std::vector<int64_t> perm;
    if (is_q) perm = llama_cpp_permutation(hc.num_heads, hc.head_dim);
    if (is_k) perm = llama_cpp_permutation(hc.num_kv_heads, hc.head_dim);
    // Rows to compare: all of q/k (the permutation), a few of the others.
    const int64_t rows = ht.rows();
    for (int64_t r = 0; r < rows; r += (perm.empty() ? std::max<int64_t>(1, rows / 7) : 1)) {
      const std::vector<float> want = row_f32(ht, perm.empty() ? r : perm[r]);
      const std::vector<float> got = row_f32(*gt, r);
      if (wtype == DType::kF32) {
        ASSERT_EQ(got, want) << name << " row " << r;
      } else {
        // Q8_0: half a step (d = amax / 127) plus 127 x the f16 rounding of d (<= 2^-11 d).
        for (size_t b = 0; b < want.size(); b += 32) {
          float amax = 0;
          for (size_t i = b; i < b + 32; ++i) amax = std::max(amax, std::fabs(want[i]));
          for (size_t i = b; i < b + 32; ++i) {
            ASSERT_LE(std::fabs(got[i] - want[i]), amax / 127 * 0.57f + 1e-7f) << name << " row " << r;
          }
        }
      }
    }
  }
  EXPECT_EQ(seen, (*hf)->tensors().size());
  const bool llama3 = hc.rope_scaling.type == RopeType::kLlama3;
  EXPECT_EQ((*g)->tensors().size(), seen + (llama3 ? 1 : 0));
  if (llama3) {
    const TensorView* rf = (*g)->find("rope_freqs");
    ASSERT_NE(rf, nullptr);
    ASSERT_EQ(rf->shape, std::vector<int64_t>{hc.head_dim / 2});
    const float* f = static_cast<const float*>(rf->data);
    // The fixtures are bf16 checkpoints: transformers keeps its inverse frequencies in a bf16
    // buffer, and the converter folds that rounding into the factors.
    const std::vector<double> want = hf_llama3_inv_freq(hc);
    bool some_scaled = false;
    for (int64_t i = 0; i < hc.head_dim / 2; ++i) {
      const double base = 1.0 / std::pow(gc.rope_theta, 2.0 * i / gc.head_dim);
      const double rounded = bf16_to_f32(f32_to_bf16(static_cast<float>(want[i])));
      EXPECT_NEAR(base / f[i], rounded, rounded * 1e-5) << "dim pair " << i;
      some_scaled |= f[i] > 1.5f;
    }
    EXPECT_TRUE(some_scaled);
    EXPECT_NEAR(f[hc.head_dim / 2 - 1], hc.rope_scaling.factor, hc.rope_scaling.factor * 4e-3);
  }
}

TEST(GgufConvert, TinyLlama32F32) { convert_and_check("tiny-llama32", DType::kF32); }
TEST(GgufConvert, TinyLlama32Q8_0) { convert_and_check("tiny-llama32", DType::kQ8_0); }
TEST(GgufConvert, TinyLlama3F32) { convert_and_check("tiny-llama3", DType::kF32); }
TEST(GgufConvert, TinyLlama3Q8_0) { convert_and_check("tiny-llama3", DType::kQ8_0); }
TEST(GgufConvert, RopeYarnKeys) { convert_and_check("tiny-rope-yarn", DType::kF32); }
TEST(GgufConvert, RopeLinearKeys) { convert_and_check("tiny-rope-linear", DType::kF32); }

TEST(GgufConvert, QuantizedTypesLoad) {
  auto hf = open_hf_source(testing::fixture_dir("tiny-llama32"));
  ASSERT_TRUE(hf.ok()) << hf.status().to_string();
  for (DType t : {DType::kQ4_0, DType::kQ4_1, DType::kQ4_K, DType::kBF16, DType::kF16}) {
    const std::string out = testing::make_temp_dir() + "/m.gguf";
    Status s = convert_to_gguf(**hf, out, t);
    ASSERT_TRUE(s.ok()) << dtype_name(t) << ": " << s.to_string();
    auto g = open_gguf_source(out);
    ASSERT_TRUE(g.ok()) << g.status().to_string();
    EXPECT_EQ((*g)->find("model.layers.0.mlp.up_proj.weight")->dtype, t);
    EXPECT_EQ((*g)->config().dtype, t);
  }
  EXPECT_FALSE(convert_to_gguf(**hf, testing::make_temp_dir() + "/x.gguf", DType::kQ2_K).ok());
}

TEST(GgufConvert, PermutationHelperMatchesLlamaCpp) {
  const auto perm = llama_cpp_permutation(3, 8);
  for (int64_t r = 0; r < 24; ++r) EXPECT_EQ(gguf_qk_source_row(r, 8), perm[r]);
}

}  // namespace
}  // namespace lancet
