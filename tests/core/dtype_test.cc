// Exhaustive checks of the scalar conversions against first-principles decoding and a
// brute-force nearest-value search (the definition of round-to-nearest-even).
#include "core/dtype.h"

#include <gtest/gtest.h>

#include <cpuid.h>
#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

namespace lancet {
namespace {

// The hardware's IEEE conversions (F16C), an independent reference for fp16.
__attribute__((target("f16c"))) float hw_f16_to_f32(uint16_t h) { return _cvtsh_ss(h); }
__attribute__((target("f16c"))) uint16_t hw_f32_to_f16(float f) {
  return static_cast<uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

bool cpu_has_f16c() {
  unsigned a, b, c, d;
  return __get_cpuid(1, &a, &b, &c, &d) && (c & (1u << 29));
}

// Brute force: the code whose value is nearest to x; ties go to the even code (mantissa LSB 0).
template <typename Decode>
uint32_t nearest_code(float x, int num_codes, Decode decode, uint32_t sign_bit) {
  double best = std::numeric_limits<double>::infinity();
  uint32_t best_code = 0;
  for (int c = 0; c < num_codes; ++c) {
    float v = decode(c);
    if (!std::isfinite(v)) continue;
    if ((c & sign_bit) != (std::signbit(x) ? sign_bit : 0)) continue;
    double d = std::fabs(static_cast<double>(v) - static_cast<double>(x));
    if (d < best || (d == best && (c & 1) == 0)) {
      best = d;
      best_code = c;
    }
  }
  return best_code;
}

TEST(Fp8E4M3, DecodesEveryCodePerSpec) {
  int nans = 0;
  for (int c = 0; c < 256; ++c) {
    float v = fp8e4m3_to_f32(static_cast<uint8_t>(c));
    if (std::isnan(v)) {
      ++nans;
      EXPECT_EQ(c & 0x7f, 0x7f);
      continue;
    }
    EXPECT_FALSE(std::isinf(v));
    int s = c >> 7, e = (c >> 3) & 15, m = c & 7;
    double expect = e == 0 ? std::ldexp(m / 8.0, -6) : std::ldexp(1.0 + m / 8.0, e - 7);
    EXPECT_EQ(v, static_cast<float>(s ? -expect : expect)) << c;
  }
  EXPECT_EQ(nans, 2);
  EXPECT_EQ(fp8e4m3_to_f32(0x7e), 448.0f);
  EXPECT_EQ(fp8e4m3_to_f32(0x01), std::ldexp(1.0f, -9));
}

TEST(Fp8E4M3, RoundTripsEveryCode) {
  for (int c = 0; c < 256; ++c) {
    float v = fp8e4m3_to_f32(static_cast<uint8_t>(c));
    uint8_t back = f32_to_fp8e4m3(v);
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(back)));
    } else if (c == 0x80) {
      EXPECT_EQ(back, 0x80);  // -0 keeps its sign
    } else {
      EXPECT_EQ(back, c);
    }
  }
}

TEST(Fp8E4M3, RoundsToNearestEvenAndSaturates) {
  std::mt19937 rng(1);
  std::vector<float> xs;
  // Every midpoint between neighbouring codes, and points just either side of it.
  for (int c = 0; c < 0x7e; ++c) {
    float a = fp8e4m3_to_f32(c), b = fp8e4m3_to_f32(c + 1);
    float mid = (a + b) / 2;
    xs.insert(xs.end(), {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1000.f), -mid});
  }
  std::uniform_real_distribution<float> u(-500.f, 500.f);
  for (int i = 0; i < 20000; ++i) xs.push_back(u(rng));
  auto dec = [](int c) { return fp8e4m3_to_f32(static_cast<uint8_t>(c)); };
  for (float x : xs) {
    if (std::fabs(x) > 448.f) {
      EXPECT_EQ(fp8e4m3_to_f32(f32_to_fp8e4m3(x)), std::copysign(448.f, x)) << x;
      // Non-saturating: values that round to 448 stay 448 (midpoint 464 ties to even code
      // 0x7e); beyond that, overflow is NaN (E4M3FN has no infinity).
      const float ns = fp8e4m3_to_f32(f32_to_fp8e4m3(x, /*saturate=*/false));
      if (std::fabs(x) <= 464.f) EXPECT_EQ(ns, std::copysign(448.f, x)) << x;
      else EXPECT_TRUE(std::isnan(ns)) << x;
      continue;
    }
    EXPECT_EQ(f32_to_fp8e4m3(x), nearest_code(x, 256, dec, 0x80)) << x;
  }
  EXPECT_EQ(f32_to_fp8e4m3(std::numeric_limits<float>::infinity()), 0x7e);
  EXPECT_EQ(f32_to_fp8e4m3(-std::numeric_limits<float>::infinity()), 0xfe);
  EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(f32_to_fp8e4m3(std::nanf("")))));
  EXPECT_EQ(f32_to_fp8e4m3(1e-30f), 0x00);
}

// A sweep of f32 bit patterns (every 4,099th, both signs, all exponents, and every pattern
// around the subnormal / normal boundary 2^-6 and the overflow boundary 464): the code is the
// nearest one, ties to even, and magnitudes past 464 saturate or overflow to NaN.
TEST(Fp8E4M3, MatchesTheNearestCodeOnASweepOfFloatBitPatterns) {
  auto dec = [](int c) { return fp8e4m3_to_f32(static_cast<uint8_t>(c)); };
  std::vector<uint32_t> patterns;
  for (uint64_t b = 0; b < (1ull << 32); b += 4099) patterns.push_back(static_cast<uint32_t>(b));
  for (float edge : {std::ldexp(1.0f, -6), 464.0f, std::ldexp(1.0f, -10)}) {
    uint32_t e;
    std::memcpy(&e, &edge, 4);
    for (uint32_t d = 0; d < 4096; ++d) patterns.insert(patterns.end(), {e - d, e + d, (e - d) | 0x80000000u});
  }
  int checked = 0;
  for (uint32_t p : patterns) {
    float x;
    std::memcpy(&x, &p, 4);
    if (std::isnan(x)) {
      EXPECT_TRUE(std::isnan(fp8e4m3_to_f32(f32_to_fp8e4m3(x)))) << p;
      continue;
    }
    const uint8_t sat = f32_to_fp8e4m3(x), raw = f32_to_fp8e4m3(x, /*saturate=*/false);
    if (std::fabs(x) > 464.0f) {
      ASSERT_EQ(fp8e4m3_to_f32(sat), std::copysign(448.0f, x)) << p;
      ASSERT_TRUE(std::isnan(fp8e4m3_to_f32(raw))) << p;
      continue;
    }
    const uint32_t want = nearest_code(x, 256, dec, 0x80);
    ASSERT_EQ(sat, want) << "bits " << p << " value " << x;
    ASSERT_EQ(raw, want) << "bits " << p << " value " << x;
    ++checked;
  }
  EXPECT_GT(checked, 500000);
}

TEST(Fp8E5M2, DecodesRoundTripsAndRounds) {
  auto dec = [](int c) { return fp8e5m2_to_f32(static_cast<uint8_t>(c)); };
  int nans = 0, infs = 0;
  for (int c = 0; c < 256; ++c) {
    float v = dec(c);
    if (std::isnan(v)) { ++nans; continue; }
    if (std::isinf(v)) { ++infs; continue; }
    if (c != 0x80) EXPECT_EQ(f32_to_fp8e5m2(v), c);
  }
  EXPECT_EQ(nans, 6);
  EXPECT_EQ(infs, 2);
  EXPECT_EQ(dec(0x7b), 57344.0f);
  for (int c = 0; c < 0x7b; ++c) {
    float mid = (dec(c) + dec(c + 1)) / 2;
    for (float x : {mid, std::nextafter(mid, 0.f), std::nextafter(mid, 1e6f), -mid})
      EXPECT_EQ(f32_to_fp8e5m2(x), nearest_code(x, 256, dec, 0x80)) << x;
  }
  EXPECT_EQ(f32_to_fp8e5m2(1e9f), 0x7b);
  EXPECT_EQ(f32_to_fp8e5m2(1e9f, false), 0x7c);
  EXPECT_EQ(f32_to_fp8e5m2(std::numeric_limits<float>::infinity()), 0x7b);
}

TEST(Fp16, EveryCodeMatchesHardwareConversionAndRoundTrips) {
  ASSERT_TRUE(cpu_has_f16c()) << "the reference needs the F16C instructions";
  for (uint32_t c = 0; c < 65536; ++c) {
    const uint16_t bits = static_cast<uint16_t>(c);
    const float ref = hw_f16_to_f32(bits);
    const float v = f16_to_f32(bits);
    if (std::isnan(ref)) {
      EXPECT_TRUE(std::isnan(v));
      continue;
    }
    ASSERT_EQ(f32_to_bits(v), f32_to_bits(ref)) << c;
    ASSERT_EQ(f32_to_f16(v), bits) << c;
    // Midpoint to the next code rounds like the hardware's IEEE conversion.
    if ((c & 0x7fff) < 0x7bff) {
      const float mid = (v + f16_to_f32(static_cast<uint16_t>(c + 1))) / 2;
      ASSERT_EQ(f32_to_f16(mid), hw_f32_to_f16(mid)) << c;
    }
  }
  EXPECT_EQ(f32_to_f16(1e6f), 0x7c00);
  EXPECT_EQ(hw_f32_to_f16(1e6f), 0x7c00);
}

TEST(Bf16, EveryCodeRoundTripsAndRoundsToNearestEven) {
  for (uint32_t c = 0; c < 65536; ++c) {
    float v = bf16_to_f32(static_cast<uint16_t>(c));
    if (std::isnan(v)) {
      EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(v))));
      continue;
    }
    ASSERT_EQ(f32_to_bf16(v), c);
    // Exactly halfway between c and c+1: ties to even.
    uint32_t half = (c << 16) | 0x8000u;
    float h = bits_to_f32(half);
    if (std::isnan(h) || std::isinf(bf16_to_f32(static_cast<uint16_t>(c + 1)))) continue;
    uint16_t expect = (c & 1) ? static_cast<uint16_t>(c + 1) : static_cast<uint16_t>(c);
    ASSERT_EQ(f32_to_bf16(h), expect) << c;
    ASSERT_EQ(f32_to_bf16(bits_to_f32(half + 1)), static_cast<uint16_t>(c + 1)) << c;
  }
}

TEST(DType, RowBytes) {
  EXPECT_EQ(dtype_row_bytes(DType::kQ4_K, 512).value(), 288u);
  EXPECT_EQ(dtype_row_bytes(DType::kQ8_0, 64).value(), 68u);
  EXPECT_FALSE(dtype_row_bytes(DType::kQ8_0, 33).has_value());
  EXPECT_EQ(dtype_row_bytes(DType::kBF16, 10).value(), 20u);
  EXPECT_EQ(dtype_from_name("q6_k"), DType::kQ6_K);
}

}  // namespace
}  // namespace lancet
