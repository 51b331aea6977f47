// dtype table and reference scalar conversions (vectorized versions live in the backends).
#include "core/dtype.h"

#include <cmath>
#include <limits>

namespace lancet {
namespace {

constexpr DTypeInfo kInfos[] = {
    {"f32", 1, 4, true, false},    {"f16", 1, 2, true, false},    {"bf16", 1, 2, true, false},
    {"f8_e4m3", 1, 1, true, false}, {"f8_e5m2", 1, 1, true, false}, {"f64", 1, 8, true, false},
    {"i8", 1, 1, false, false},    {"u8", 1, 1, false, false},    {"i16", 1, 2, false, false},
    {"i32", 1, 4, false, false},   {"i64", 1, 8, false, false},   {"bool", 1, 1, false, false},
    {"q4_0", 32, 18, false, true}, {"q4_1", 32, 20, false, true}, {"q5_0", 32, 22, false, true},
    {"q5_1", 32, 24, false, true}, {"q8_0", 32, 34, false, true}, {"q2_k", 256, 84, false, true},
    {"q3_k", 256, 110, false, true}, {"q4_k", 256, 144, false, true},
    {"q5_k", 256, 176, false, true}, {"q6_k", 256, 210, false, true},
};
static_assert(sizeof(kInfos) / sizeof(kInfos[0]) == static_cast<int>(DType::kQ6_K) + 1);

// Generic encoder for a small binary float format with `ebits` exponent and `mbits` mantissa
// bits. Exact: every step below is a power-of-two scaling or an RNE rounding of a value that
// fits in a float's mantissa.
uint32_t encode_small_float(float f, int ebits, int mbits, uint32_t max_finite_code,
                            uint32_t overflow_code, uint32_t nan_code) {
  const uint32_t sign = (f32_to_bits(f) >> 31) << (ebits + mbits);
  if (std::isnan(f)) return sign | nan_code;
  const int bias = (1 << (ebits - 1)) - 1;
  const float a = std::fabs(f);
  // Largest finite magnitude of the format.
  const int max_exp = static_cast<int>(max_finite_code >> mbits) - bias;
  const float max_val = std::ldexp(1.0f + static_cast<float>(max_finite_code & ((1u << mbits) - 1)) /
                                              static_cast<float>(1u << mbits),
                                   max_exp);
  if (std::isinf(a)) return sign | overflow_code;
  uint32_t code;
  if (a < std::ldexp(1.0f, 1 - bias)) {
    // Subnormal range: multiples of 2^(1-bias-mbits).
    const float q = std::nearbyint(std::ldexp(a, bias - 1 + mbits));
    code = static_cast<uint32_t>(q);
  } else {
    int e;
    std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1)
    int exponent = e - 1;
    float q = std::nearbyint((std::ldexp(a, -exponent) - 1.0f) * static_cast<float>(1u << mbits));
    if (q >= static_cast<float>(1u << mbits)) {
      q = 0;
      exponent++;
    }
    const int biased = exponent + bias;
    if (biased >= (1 << ebits)) return sign | overflow_code;
    code = (static_cast<uint32_t>(biased) << mbits) | static_cast<uint32_t>(q);
  }
  if (code > max_finite_code) {
    (void)max_val;
    return sign | overflow_code;
  }
  return sign | code;
}

float decode_small_float(uint32_t v, int ebits, int mbits) {
  const int bias = (1 << (ebits - 1)) - 1;
  const uint32_t sign = (v >> (ebits + mbits)) & 1u;
  const uint32_t e = (v >> mbits) & ((1u << ebits) - 1);
  const uint32_t m = v & ((1u << mbits) - 1);
  float r = (e == 0) ? std::ldexp(static_cast<float>(m), 1 - bias - mbits)
                     : std::ldexp(1.0f + static_cast<float>(m) / static_cast<float>(1u << mbits),
                                  static_cast<int>(e) - bias);
  return sign ? -r : r;
}

}  // namespace

const DTypeInfo& dtype_info(DType t) { return kInfos[static_cast<int>(t)]; }

std::optional<DType> dtype_from_name(std::string_view name) {
  for (int i = 0; i <= static_cast<int>(DType::kQ6_K); ++i) {
    if (name == kInfos[i].name) return static_cast<DType>(i);
  }
  return std::nullopt;
}

std::optional<uint64_t> dtype_row_bytes(DType t, uint64_t n) {
  const DTypeInfo& info = dtype_info(t);
  if (n % info.block_elems != 0) return std::nullopt;
  uint64_t out;
  if (__builtin_mul_overflow(n / info.block_elems, static_cast<uint64_t>(info.block_bytes), &out))
    return std::nullopt;
  return out;
}

float f16_to_f32(uint16_t h) {
  const uint32_t e = (h >> 10) & 0x1f;
  if (e == 0x1f) {
    const uint32_t sign = static_cast<uint32_t>(h >> 15) << 31;
    return bits_to_f32(sign | 0x7f800000u | (static_cast<uint32_t>(h & 0x3ff) << 13));
  }
  return decode_small_float(h, 5, 10);
}

uint16_t f32_to_f16(float f) {
  // max finite 0x7bff (65504); overflow -> inf 0x7c00; NaN -> 0x7e00.
  return static_cast<uint16_t>(encode_small_float(f, 5, 10, 0x7bff, 0x7c00, 0x7e00));
}

float fp8e4m3_to_f32(uint8_t v) {
  if ((v & 0x7f) == 0x7f) return std::numeric_limits<float>::quiet_NaN();
  return decode_small_float(v, 4, 3);
}

float fp8e5m2_to_f32(uint8_t v) {
  const uint32_t e = (v >> 2) & 0x1f;
  if (e == 0x1f) {
    if (v & 3) return std::numeric_limits<float>::quiet_NaN();
    return (v & 0x80) ? -std::numeric_limits<float>::infinity()
                      : std::numeric_limits<float>::infinity();
  }
  return decode_small_float(v, 5, 2);
}

uint8_t f32_to_fp8e4m3(float f, bool saturate) {
  // E4M3FN: max finite 0x7e (448), NaN 0x7f, no infinity. The same codes as
  // encode_small_float(f, 4, 3, 0x7e, saturate ? 0x7e : 0x7f, 0x7f) in a few integer operations
  // (weights are quantized by the billion): normal results re-bias the f32 exponent (127 -> 7)
  // and round its mantissa to 3 bits, to nearest even, with one add on the low 20 bits, whose
  // carry moves a rounded-up mantissa into the next binade as it should.
  const uint32_t b = f32_to_bits(f);
  const uint32_t sign = (b >> 24) & 0x80u;
  const uint32_t a = b & 0x7fffffffu;
  if (a > 0x7f800000u) return static_cast<uint8_t>(sign | 0x7fu);  // NaN
  const uint32_t overflow = saturate ? 0x7eu : 0x7fu;
  if (a >= 0x7f800000u) return static_cast<uint8_t>(sign | overflow);  // infinity
  if (a < 0x3c800000u) {  // below 2^-6: subnormal codes, multiples of 2^-9 (8 is 2^-6 itself)
    const float q = std::nearbyint(bits_to_f32(a) * 512.0f);
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(q));
  }
  const uint32_t v = a - (120u << 23);
  const uint32_t code = (v + 0x7ffffu + ((v >> 20) & 1u)) >> 20;
  return static_cast<uint8_t>(sign | (code > 0x7eu ? overflow : code));
}

uint8_t f32_to_fp8e5m2(float f, bool saturate) {
  // E5M2: max finite 0x7b (57344), inf 0x7c, NaN 0x7e.
  return static_cast<uint8_t>(encode_small_float(f, 5, 2, 0x7b, saturate ? 0x7b : 0x7c, 0x7e));
}

bool convert_to_f32(DType t, const void* src, float* dst, uint64_t n) {
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, n * 4);
      return true;
    case DType::kF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (uint64_t i = 0; i < n; ++i) dst[i] = f16_to_f32(s[i]);
      return true;
    }
    case DType::kBF16: {
      const uint16_t* s = static_cast<const uint16_t*>(src);
      for (uint64_t i = 0; i < n; ++i) dst[i] = bf16_to_f32(s[i]);
      return true;
    }
    case DType::kF8E4M3: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (uint64_t i = 0; i < n; ++i) dst[i] = fp8e4m3_to_f32(s[i]);
      return true;
    }
    case DType::kF8E5M2: {
      const uint8_t* s = static_cast<const uint8_t*>(src);
      for (uint64_t i = 0; i < n; ++i) dst[i] = fp8e5m2_to_f32(s[i]);
      return true;
    }
    default:
      return false;
  }
}

}  // namespace lancet
