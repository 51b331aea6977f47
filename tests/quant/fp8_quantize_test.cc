// Per-channel FP8 E4M3 quantizer, checked bit by bit against the E4M3 format's definition:
// scales finite and positive (zero rows included), the row maximum lands exactly on 448,
// the dequantization error stays within half an E4M3 step, bf16 scales never let a row
// overflow, and NaN/inf inputs are errors naming the tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "core/dtype.h"
#include "quant/fp8_quantize.h"
#include "quant/fp8_weights.h"
#include "quant/gguf_blocks.h"

namespace lancet {
namespace {

// E4M3 decoded from its definition (bias 7, 3 mantissa bits, subnormals, 0x7f/0xff NaN),
// independently of core/dtype.cc.
float e4m3_by_definition(uint8_t b) {
  const int s = b >> 7, e = (b >> 3) & 15, m = b & 7;
  if (e == 15 && m == 7) return NAN;
  const float mag = e == 0 ? std::ldexp(m / 8.0f, -6) : std::ldexp(1.0f + m / 8.0f, e - 7);
  return s ? -mag : mag;
}

// Rows with very different magnitudes, a zero row, a row of one value and denormal-sized rows.
std::vector<float> test_matrix(int64_t rows, int64_t cols, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> w(rows * cols);
  for (int64_t r = 0; r < rows; ++r) {
    const float mag = std::ldexp(1.0f, static_cast<int>(r % 17) - 12);  // 2^-12 .. 2^4
    for (int64_t c = 0; c < cols; ++c) w[r * cols + c] = nd(rng) * mag;
  }
  for (int64_t c = 0; c < cols; ++c) w[1 * cols + c] = 0.0f;               // zero row
  for (int64_t c = 0; c < cols; ++c) w[2 * cols + c] = -3.25f;             // constant row
  for (int64_t c = 0; c < cols; ++c) w[3 * cols + c] = 1e-30f * (c % 5);  // below the min scale
  return w;
}

TEST(Fp8Quantize, ScalesFinitePositiveAndRowMaxHits448) {
  const int64_t rows = 37, cols = 300;
  std::vector<float> w = test_matrix(rows, cols, 1);
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(rows);
  ASSERT_TRUE(quantize_fp8_per_channel(w.data(), rows, cols, "w", q.data(), s.data()).ok());
  for (int64_t r = 0; r < rows; ++r) {
    ASSERT_TRUE(std::isfinite(s[r]) && s[r] > 0) << "row " << r;
    float amax = 0;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(w[r * cols + c]));
    EXPECT_EQ(s[r], std::max(amax / 448.0f, kFp8MinWeightScale)) << "row " << r;
    if (amax / 448.0f > kFp8MinWeightScale) {
      // The largest magnitude is stored as +-448 (0x7e / 0xfe), the saturating maximum.
      int64_t hits = 0;
      for (int64_t c = 0; c < cols; ++c) {
        const uint8_t b = q[r * cols + c];
        EXPECT_NE(b & 0x7f, 0x7f) << "NaN encoding in row " << r;
        if (std::fabs(w[r * cols + c]) == amax) {
          EXPECT_EQ(b & 0x7f, 0x7e) << "row " << r;
          ++hits;
        }
      }
      EXPECT_GE(hits, 1);
    }
  }
  // The zero row: the minimum scale, all codes +0 or -0.
  EXPECT_EQ(s[1], kFp8MinWeightScale);
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(q[1 * cols + c] & 0x7f, 0);
  // A constant row is exactly representable: every element decodes to -3.25.
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(e4m3_by_definition(q[2 * cols + c]) * s[2], -3.25f);
}

TEST(Fp8Quantize, DequantErrorWithinHalfAStep) {
  const int64_t rows = 64, cols = 257;
  std::vector<float> w = test_matrix(rows, cols, 2);
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(rows), back(rows * cols);
  ASSERT_TRUE(quantize_fp8_per_channel(w.data(), rows, cols, "w", q.data(), s.data()).ok());
  dequantize_fp8_per_channel(q.data(), s.data(), rows, cols, back.data());
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t c = 0; c < cols; ++c) {
      const int64_t i = r * cols + c;
      // Decoding agrees with the format's definition.
      ASSERT_EQ(back[i], e4m3_by_definition(q[i]) * s[r]);
      // Normal range: 3 mantissa bits -> relative error <= 2^-4; subnormal range (|x/s| < 2^-6):
      // absolute error <= half the subnormal step 2^-9.
      const float x = w[i] / s[r];
      const float bound = std::max(std::fabs(x) * 0.0625f, std::ldexp(1.0f, -10)) * (1 + 1e-6f);
      EXPECT_LE(std::fabs(x - back[i] / s[r]), bound) << "row " << r << " col " << c << " x " << x;
    }
  }
}

TEST(Fp8Quantize, SaturatesAt448AndRoundsToNearestEven) {
  // One row with scale 1 (max 448): values between codes round to nearest, ties to even.
  std::vector<float> w = {448.0f, 1.0f + 1.0f / 16, 1.0f + 3.0f / 16, 0.0f, -448.0f, 300.0f};
  std::vector<uint8_t> q(w.size());
  float s = 0;
  ASSERT_TRUE(quantize_fp8_per_channel(w.data(), 1, static_cast<int64_t>(w.size()), "w", q.data(), &s).ok());
  EXPECT_EQ(s, 1.0f);
  EXPECT_EQ(q[0], 0x7e);  // 448
  EXPECT_EQ(e4m3_by_definition(q[1]), 1.0f);          // 1 + 1/16 ties to the even code (1.0)
  EXPECT_EQ(e4m3_by_definition(q[2]), 1.25f);         // 1 + 3/16 ties to the even code (1.25)
  EXPECT_EQ(q[4], 0xfe);  // -448
  EXPECT_EQ(e4m3_by_definition(q[5]), 288.0f);        // 300 -> nearest of 288 / 320
}

TEST(Fp8Quantize, Bf16ScalesNeverOverflow) {
  const int64_t rows = 50, cols = 100;
  std::vector<float> w = test_matrix(rows, cols, 3);
  std::vector<uint8_t> q(rows * cols);
  std::vector<float> s(rows);
  Fp8QuantizeOptions o;
  o.scale_dtype = Fp8ScaleDType::kBF16;
  ASSERT_TRUE(quantize_fp8_per_channel(w.data(), rows, cols, "w", q.data(), s.data(), o).ok());
  for (int64_t r = 0; r < rows; ++r) {
    EXPECT_EQ(bf16_to_f32(f32_to_bf16(s[r])), s[r]) << "scale not a bf16 value, row " << r;
    for (int64_t c = 0; c < cols; ++c) EXPECT_LE(std::fabs(w[r * cols + c] / s[r]), 448.0f * (1 + 1e-6f));
  }
}

TEST(Fp8Quantize, NonFiniteInputNamesTheTensor) {
  std::vector<float> w(4 * 8, 1.0f);
  w[2 * 8 + 5] = NAN;
  std::vector<uint8_t> q(w.size());
  std::vector<float> s(4);
  Status st = quantize_fp8_per_channel(w.data(), 4, 8, "model.layers.0.mlp.up_proj.weight", q.data(), s.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("model.layers.0.mlp.up_proj.weight"), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("NaN"), std::string::npos);
  EXPECT_NE(st.message().find("[2, 5]"), std::string::npos) << st.message();
  w[2 * 8 + 5] = INFINITY;
  st = quantize_fp8_per_channel(w.data(), 4, 8, "t", q.data(), s.data());
  ASSERT_FALSE(st.ok());
  EXPECT_NE(st.message().find("infinite"), std::string::npos);
}

TEST(Fp8Weights, PolicyAndTensorConversion) {
  EXPECT_TRUE(fp8_quantizes_tensor("model.layers.0.self_attn.q_proj.weight"));
  EXPECT_TRUE(fp8_quantizes_tensor("model.layers.31.mlp.down_proj.weight"));
  EXPECT_FALSE(fp8_quantizes_tensor("model.embed_tokens.weight"));
  EXPECT_FALSE(fp8_quantizes_tensor("lm_head.weight"));
  EXPECT_FALSE(fp8_quantizes_tensor("model.layers.0.input_layernorm.weight"));
  EXPECT_FALSE(fp8_quantizes_tensor("model.layers.0.self_attn.q_proj.weight_scale"));

  // A Q4_1 matrix: quantized from its dequantized f32 values, scales [rows, 1] f32.
  const int64_t rows = 3, cols = 64;
  std::vector<float> src = test_matrix(rows + 4, cols, 4);
  src.resize(rows * cols);
  std::vector<uint8_t> blocks(rows * *dtype_row_bytes(DType::kQ4_1, cols));
  ASSERT_TRUE(quantize_row(DType::kQ4_1, src.data(), blocks.data(), rows * cols).ok());
  TensorView t{DType::kQ4_1, {rows, cols}, blocks.data(), blocks.size()};
  auto w = quantize_weight_fp8(t, "x");
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  EXPECT_EQ(w->weight.dtype, DType::kF8E4M3);
  EXPECT_EQ(w->scale.shape, (std::vector<int64_t>{rows, 1}));
  std::vector<float> deq(rows * cols), s(rows);
  std::vector<uint8_t> q(rows * cols);
  ASSERT_TRUE(dequantize_row(DType::kQ4_1, blocks.data(), deq.data(), rows * cols).ok());
  ASSERT_TRUE(quantize_fp8_per_channel(deq.data(), rows, cols, "x", q.data(), s.data()).ok());
  EXPECT_EQ(w->weight.bytes, q);
  EXPECT_EQ(std::memcmp(w->scale.bytes.data(), s.data(), rows * 4), 0);

  // Kept tensors: bf16 as is, an f32 matrix -> bf16, an f32 vector as is, already-FP8 refused.
  std::vector<uint16_t> bf(6, f32_to_bf16(1.5f));
  TensorView tb{DType::kBF16, {2, 3}, bf.data(), 12};
  auto kb = fp8_kept_tensor(tb, "e");
  ASSERT_TRUE(kb.ok());
  EXPECT_FALSE(kb->has_value());
  std::vector<float> f32(6, 2.0f);
  TensorView tf{DType::kF32, {2, 3}, f32.data(), 24};
  auto kf = fp8_kept_tensor(tf, "e");
  ASSERT_TRUE(kf.ok() && kf->has_value());
  EXPECT_EQ((*kf)->dtype, DType::kBF16);
  TensorView tv{DType::kF32, {6}, f32.data(), 24};
  auto kv = fp8_kept_tensor(tv, "n");
  ASSERT_TRUE(kv.ok());
  EXPECT_FALSE(kv->has_value());
  std::vector<uint8_t> f8(6, 0x38);
  TensorView t8{DType::kF8E4M3, {2, 3}, f8.data(), 6};
  EXPECT_FALSE(quantize_weight_fp8(t8, "already").ok());
}

// Per-token activation quantization (the GPU's W8A8 input, emulated on the CPU): each row's
// largest magnitude lands on 448 * scale, every value is an E4M3 code times the row scale within
// half a step of the input, and a zero row stays zero.
TEST(Fp8Quantize, ActivationRowsPerTokenScale) {
  const int64_t rows = 4, cols = 77;
  std::mt19937 rng(9);
  std::normal_distribution<float> nd(0.f, 1.f);
  std::vector<float> x(rows * cols);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) x[r * cols + c] = nd(rng) * std::ldexp(1.f, static_cast<int>(r) * 5 - 6);
  for (int64_t c = 0; c < cols; ++c) x[2 * cols + c] = 0.f;
  x[1 * cols + 10] = 5000.f;  // an outlier sets row 1's scale
  std::vector<float> out(rows * cols);
  fake_quantize_fp8_rows(x.data(), 0, rows, cols, out.data());
  for (int64_t r = 0; r < rows; ++r) {
    float amax = 0.f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(x[r * cols + c]));
    const float s = std::max(amax / 448.f, kFp8MinActivationScale);
    for (int64_t c = 0; c < cols; ++c) {
      const float v = x[r * cols + c], o = out[r * cols + c];
      const float code = e4m3_by_definition(f32_to_fp8e4m3(v * (1.f / s)));
      EXPECT_EQ(o, code * s) << r << "," << c;
      // Half a step: 1/16 relative for normal values, 2^-10 * s absolute for subnormals.
      EXPECT_LE(std::fabs(o - v), std::max(std::fabs(v) / 16.f, std::ldexp(1.f, -10) * s) * 1.0001f) << r << "," << c;
      if (std::fabs(v) == amax && amax > 0.f) EXPECT_EQ(code, std::copysign(448.f, v));
    }
  }
  for (int64_t c = 0; c < cols; ++c) EXPECT_EQ(out[2 * cols + c], 0.f);
  // In place gives the same values.
  std::vector<float> inplace = x;
  fake_quantize_fp8_rows(inplace.data(), 0, rows, cols, inplace.data());
  EXPECT_EQ(inplace, out);
}

}  // namespace
}  // namespace lancet
