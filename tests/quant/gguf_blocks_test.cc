// GGUF block formats against the PyPI gguf package (gguf-py): dequantization of random blocks
// and the reference quantizers must match it bit for bit (both evaluate the same float
// operations in the same order); our own K quantizers are checked by error bounds.
#include "quant/gguf_blocks.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <fstream>
#include <iterator>
#include <random>
#include <vector>

#include "test_paths.h"

namespace lancet {
namespace {

std::vector<uint8_t> read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(f), {});
}

std::vector<float> read_f32(const std::string& path) {
  auto b = read_bytes(path);
  std::vector<float> v(b.size() / 4);
  std::memcpy(v.data(), b.data(), v.size() * 4);
  return v;
}

// Runs the reference script once per test binary.
const std::string& ref_dir() {
  static const std::string dir = [] {
    std::string d = testing::make_temp_dir();
    std::string out;
    int rc = testing::run_command(testing::python() + " " + testing::source_dir() +
                                      "/tests/quant/gguf_blocks_ref.py " + d,
                                  &out);
    EXPECT_EQ(rc, 0) << out;
    return d;
  }();
  return dir;
}

struct TypeCase {
  const char* ggml_name;  // gguf-py's GGMLQuantizationType name
  DType dtype;
};

class DequantVsGgufPy : public ::testing::TestWithParam<TypeCase> {};

TEST_P(DequantVsGgufPy, BitIdentical) {
  const TypeCase& c = GetParam();
  auto blocks = read_bytes(ref_dir() + "/" + c.ggml_name + ".blocks");
  auto want = read_f32(ref_dir() + "/" + c.ggml_name + ".deq");
  const DTypeInfo& info = dtype_info(c.dtype);
  ASSERT_GT(blocks.size(), 0u);
  ASSERT_EQ(blocks.size() % info.block_bytes, 0u);
  const int64_t n = static_cast<int64_t>(blocks.size() / info.block_bytes * info.block_elems);
  ASSERT_EQ(want.size(), static_cast<size_t>(n));
  std::vector<float> got(n);
  ASSERT_TRUE(dequantize_row(c.dtype, blocks.data(), got.data(), n).ok());
  int mismatches = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (f32_to_bits(got[i]) != f32_to_bits(want[i]) && mismatches++ < 5) {
      ADD_FAILURE() << c.ggml_name << " element " << i << " (block " << i / info.block_elems
                    << "): got " << got[i] << " want " << want[i];
    }
  }
  EXPECT_EQ(mismatches, 0);
}

INSTANTIATE_TEST_SUITE_P(
    AllBlockTypes, DequantVsGgufPy,
    ::testing::Values(TypeCase{"Q4_0", DType::kQ4_0}, TypeCase{"Q4_1", DType::kQ4_1},
                      TypeCase{"Q5_0", DType::kQ5_0}, TypeCase{"Q5_1", DType::kQ5_1},
                      TypeCase{"Q8_0", DType::kQ8_0}, TypeCase{"Q2_K", DType::kQ2_K},
                      TypeCase{"Q3_K", DType::kQ3_K}, TypeCase{"Q4_K", DType::kQ4_K},
                      TypeCase{"Q5_K", DType::kQ5_K}, TypeCase{"Q6_K", DType::kQ6_K}),
    [](const auto& info) { return std::string(info.param.ggml_name); });

class QuantVsGgufPy : public ::testing::TestWithParam<TypeCase> {};

TEST_P(QuantVsGgufPy, SameBytes) {
  const TypeCase& c = GetParam();
  auto x = read_f32(ref_dir() + "/input.f32");
  auto want = read_bytes(ref_dir() + "/" + c.ggml_name + ".quant");
  ASSERT_EQ(x.size(), 4096u);
  auto nbytes = dtype_row_bytes(c.dtype, x.size());
  ASSERT_TRUE(nbytes.has_value());
  ASSERT_EQ(want.size(), *nbytes);
  std::vector<uint8_t> got(*nbytes);
  ASSERT_TRUE(quantize_row(c.dtype, x.data(), got.data(), static_cast<int64_t>(x.size())).ok());
  const uint32_t bb = dtype_info(c.dtype).block_bytes;
  int bad_blocks = 0;
  for (size_t b = 0; b < got.size() / bb; ++b) {
    if (std::memcmp(got.data() + b * bb, want.data() + b * bb, bb) != 0 && bad_blocks++ < 5) {
      ADD_FAILURE() << c.ggml_name << " block " << b << " differs";
    }
  }
  EXPECT_EQ(bad_blocks, 0);
}

INSTANTIATE_TEST_SUITE_P(
    GgufPyQuantizers, QuantVsGgufPy,
    ::testing::Values(TypeCase{"Q8_0", DType::kQ8_0}, TypeCase{"Q4_0", DType::kQ4_0},
                      TypeCase{"Q4_1", DType::kQ4_1}, TypeCase{"Q5_0", DType::kQ5_0},
                      TypeCase{"Q5_1", DType::kQ5_1}, TypeCase{"BF16", DType::kBF16},
                      TypeCase{"F16", DType::kF16}),
    [](const auto& info) { return std::string(info.param.ggml_name); });

// Our K quantizers: per sub-block the scale is rounded up to the 6-bit (Q6_K: 8-bit) grid of
// the super-block scale, so the error of each element is at most half a step, and a step is
// at most the ideal step plus one grid unit (max over sub-blocks / 63 or / 127).
void check_k_error(DType t, int sub, int levels, int grid, bool symmetric, float spread) {
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, spread);
  const int64_t n = 4 * kQK_K;
  std::vector<float> x(n);
  for (auto& v : x) v = nd(rng);
  for (int i = 0; i < 32; ++i) x[320 + i] = 0.0f;  // a zero sub-block
  std::vector<uint8_t> q(*dtype_row_bytes(t, n));
  ASSERT_TRUE(quantize_row(t, x.data(), q.data(), n).ok());
  std::vector<float> y(n);
  ASSERT_TRUE(dequantize_row(t, q.data(), y.data(), n).ok());
  for (int64_t sb = 0; sb < n / kQK_K; ++sb) {
    std::vector<float> ideal(kQK_K / sub);
    float max_ideal = 0.0f, max_neg_min = 0.0f;
    for (int j = 0; j < kQK_K / sub; ++j) {
      float lo = 0.0f, hi = 0.0f, amax = 0.0f;
      for (int l = 0; l < sub; ++l) {
        float v = x[sb * kQK_K + j * sub + l];
        lo = std::min(lo, v);
        hi = std::max(hi, v);
        amax = std::max(amax, std::fabs(v));
      }
      ideal[j] = symmetric ? amax / levels : (hi - lo) / levels;
      max_ideal = std::max(max_ideal, ideal[j]);
      max_neg_min = std::max(max_neg_min, -lo);
    }
    for (int j = 0; j < kQK_K / sub; ++j) {
      // The min is rounded up by at most one dmin unit, which widens the range to cover.
      const float step = ideal[j] + max_ideal / grid * 1.01f +
                         (symmetric ? 0.0f : max_neg_min / 63.0f * 1.01f / levels);
      for (int l = 0; l < sub; ++l) {
        const int64_t i = sb * kQK_K + j * sub + l;
        ASSERT_LE(std::fabs(y[i] - x[i]), 0.5f * step * 1.001f + 1e-7f)
            << dtype_name(t) << " element " << i << " x=" << x[i] << " y=" << y[i];
      }
    }
  }
  for (int i = 0; i < 32; ++i) EXPECT_EQ(y[320 + i], 0.0f);
}

TEST(KQuantize, Q4KErrorBound) { check_k_error(DType::kQ4_K, 32, 15, 63, false, 1.0f); }
TEST(KQuantize, Q5KErrorBound) { check_k_error(DType::kQ5_K, 32, 31, 63, false, 0.05f); }
TEST(KQuantize, Q6KErrorBound) { check_k_error(DType::kQ6_K, 16, 31, 127, true, 3.0f); }

TEST(KQuantize, Q4KIsMuchBetterThanNothing) {
  // A sanity anchor independent of the bound formula: RMS error well below the data's RMS.
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(kQK_K * 8), y(x.size());
  for (auto& v : x) v = nd(rng);
  std::vector<uint8_t> q(*dtype_row_bytes(DType::kQ4_K, x.size()));
  ASSERT_TRUE(quantize_row(DType::kQ4_K, x.data(), q.data(), x.size()).ok());
  ASSERT_TRUE(dequantize_row(DType::kQ4_K, q.data(), y.data(), x.size()).ok());
  double se = 0;
  for (size_t i = 0; i < x.size(); ++i) se += (x[i] - y[i]) * (x[i] - y[i]);
  EXPECT_LT(std::sqrt(se / x.size()), 0.12);  // 4-bit over ~[-2.5, 2.5]: step ~0.33, rms ~0.1
}

TEST(GgufBlocks, RejectsBadInput) {
  std::vector<float> x(64, 1.0f);
  std::vector<uint8_t> q(1024);
  EXPECT_EQ(quantize_row(DType::kQ8_0, x.data(), q.data(), 33).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(dequantize_row(DType::kQ4_K, q.data(), x.data(), 32).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(quantize_row(DType::kQ2_K, x.data(), q.data(), 0).code(), StatusCode::kUnimplemented);
  x[5] = std::nanf("");
  EXPECT_EQ(quantize_row(DType::kQ4_0, x.data(), q.data(), 32).code(),
            StatusCode::kInvalidArgument);
  x[5] = 1e6f;
  EXPECT_EQ(quantize_row(DType::kQ4_1, x.data(), q.data(), 32).code(), StatusCode::kOutOfRange);
}

TEST(GgufBlocks, GgmlTypeIds) {
  // Ids from ggml.h's enum ggml_type.
  EXPECT_EQ(dtype_from_ggml_type(0), DType::kF32);
  EXPECT_EQ(dtype_from_ggml_type(1), DType::kF16);
  EXPECT_EQ(dtype_from_ggml_type(3), DType::kQ4_1);
  EXPECT_EQ(dtype_from_ggml_type(8), DType::kQ8_0);
  EXPECT_EQ(dtype_from_ggml_type(12), DType::kQ4_K);
  EXPECT_EQ(dtype_from_ggml_type(14), DType::kQ6_K);
  EXPECT_EQ(dtype_from_ggml_type(30), DType::kBF16);
  EXPECT_FALSE(dtype_from_ggml_type(4).has_value());   // removed Q4_2
  EXPECT_FALSE(dtype_from_ggml_type(16).has_value());  // IQ2_XXS
  EXPECT_FALSE(dtype_from_ggml_type(1000).has_value());
  EXPECT_EQ(ggml_type_from_dtype(DType::kQ5_K), 13u);
  EXPECT_FALSE(ggml_type_from_dtype(DType::kF8E4M3).has_value());
}

}  // namespace
}  // namespace lancet
