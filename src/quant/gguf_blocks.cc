// Reference dequantization and quantization of GGUF block formats (see gguf_blocks.h).
// Every product and sum is evaluated in float, in the same order ggml's reference code uses,
// so results are bit-identical to ggml / gguf-py. Contraction into FMA would change the
// rounding, hence the pragmas.
#if defined(__clang__)
#pragma clang fp contract(off)
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "quant/gguf_blocks.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

namespace lancet {
namespace {

inline float h2f(uint16_t h) { return f16_to_f32(h); }

template <typename Block>
inline Block load_block(const uint8_t* p) {
  Block b;
  std::memcpy(&b, p, sizeof(Block));
  return b;
}

// ---------------------------------------------------------------- dequantization

void deq_q4_0(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ4_0>(p);
  const float d = h2f(b.d);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>((b.qs[j] & 0x0f) - 8);
    y[j + kQK / 2] = d * static_cast<float>((b.qs[j] >> 4) - 8);
  }
}

void deq_q4_1(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ4_1>(p);
  const float d = h2f(b.d), m = h2f(b.m);
  for (int j = 0; j < kQK / 2; ++j) {
    y[j] = d * static_cast<float>(b.qs[j] & 0x0f) + m;
    y[j + kQK / 2] = d * static_cast<float>(b.qs[j] >> 4) + m;
  }
}

uint32_t load_u32le(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) |
         (static_cast<uint32_t>(p[2]) << 16) | (static_cast<uint32_t>(p[3]) << 24);
}

void deq_q5_0(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ5_0>(p);
  const float d = h2f(b.d);
  const uint32_t qh = load_u32le(b.qh);
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = (b.qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
    const int hi = (b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo - 16);
    y[j + kQK / 2] = d * static_cast<float>(hi - 16);
  }
}

void deq_q5_1(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ5_1>(p);
  const float d = h2f(b.d), m = h2f(b.m);
  const uint32_t qh = load_u32le(b.qh);
  for (int j = 0; j < kQK / 2; ++j) {
    const int lo = (b.qs[j] & 0x0f) | (((qh >> j) & 1) << 4);
    const int hi = (b.qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
    y[j] = d * static_cast<float>(lo) + m;
    y[j + kQK / 2] = d * static_cast<float>(hi) + m;
  }
}

void deq_q8_0(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ8_0>(p);
  const float d = h2f(b.d);
  for (int j = 0; j < kQK; ++j) y[j] = static_cast<float>(b.qs[j]) * d;
}

// Q2_K / Q3_K / Q6_K share this order: each half of 128 elements is four runs of 32 that
// take successive 2-bit fields of the same 32 bytes.
void deq_q2_k(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ2_K>(p);
  const float d = h2f(b.d), dmin = h2f(b.dmin);
  for (int i = 0; i < kQK_K; ++i) {
    const int half = i / 128, shift = (i % 128) / 32, l = i % 32;
    const int q = (b.qs[half * 32 + l] >> (2 * shift)) & 3;
    const uint8_t s = b.scales[i / 16];
    const float dl = d * static_cast<float>(s & 0x0f);
    const float ml = dmin * static_cast<float>(s >> 4);
    y[i] = dl * static_cast<float>(q) - ml;
  }
}

void deq_q3_k(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ3_K>(p);
  const float d = h2f(b.d);
  int scales[16];
  for (int i = 0; i < 16; ++i) {
    const int lo = i < 8 ? (b.scales[i] & 0x0f) : (b.scales[i - 8] >> 4);
    const int hi = (b.scales[8 + i % 4] >> (2 * (i / 4))) & 3;
    scales[i] = (lo | (hi << 4)) - 32;
  }
  for (int i = 0; i < kQK_K; ++i) {
    const int half = i / 128, shift = (i % 128) / 32, l = i % 32;
    const int ql = (b.qs[half * 32 + l] >> (2 * shift)) & 3;
    const int hbit = (b.hmask[l] >> (i / 32)) & 1;
    const int q = ql - (hbit ? 0 : 4);
    const float dl = d * static_cast<float>(scales[i / 16]);
    y[i] = dl * static_cast<float>(q);
  }
}

void deq_q4_k(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ4_K>(p);
  const float d = h2f(b.d), dmin = h2f(b.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k_scale_min(j, b.scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    const int chunk = j / 2, shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int q = (b.qs[chunk * 32 + l] >> shift) & 0x0f;
      y[j * 32 + l] = d1 * static_cast<float>(q) - m1;
    }
  }
}

void deq_q5_k(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ5_K>(p);
  const float d = h2f(b.d), dmin = h2f(b.dmin);
  for (int j = 0; j < 8; ++j) {
    uint8_t sc, m;
    k_scale_min(j, b.scales, &sc, &m);
    const float d1 = d * static_cast<float>(sc), m1 = dmin * static_cast<float>(m);
    const int chunk = j / 2, shift = 4 * (j % 2);
    for (int l = 0; l < 32; ++l) {
      const int q = ((b.qs[chunk * 32 + l] >> shift) & 0x0f) | (((b.qh[l] >> j) & 1) << 4);
      y[j * 32 + l] = d1 * static_cast<float>(q) - m1;
    }
  }
}

void deq_q6_k(const uint8_t* p, float* y) {
  const auto b = load_block<BlockQ6_K>(p);
  const float d = h2f(b.d);
  for (int i = 0; i < kQK_K; ++i) {
    const int half = i / 128, r = i % 128;
    // Low 4 bits: runs of 64 take the low then the high nibble of 64 bytes.
    const int ql = (b.ql[half * 64 + r % 64] >> (4 * (r / 64))) & 0x0f;
    // High 2 bits: runs of 32 take successive 2-bit fields of 32 bytes.
    const int qh = (b.qh[half * 32 + r % 32] >> (2 * (r / 32))) & 3;
    const int q = (ql | (qh << 4)) - 32;
    const float dl = d * static_cast<float>(b.scales[i / 16]);
    y[i] = dl * static_cast<float>(q);
  }
}

using DeqFn = void (*)(const uint8_t*, float*);

DeqFn deq_fn(DType t) {
  switch (t) {
    case DType::kQ4_0: return deq_q4_0;
    case DType::kQ4_1: return deq_q4_1;
    case DType::kQ5_0: return deq_q5_0;
    case DType::kQ5_1: return deq_q5_1;
    case DType::kQ8_0: return deq_q8_0;
    case DType::kQ2_K: return deq_q2_k;
    case DType::kQ3_K: return deq_q3_k;
    case DType::kQ4_K: return deq_q4_k;
    case DType::kQ5_K: return deq_q5_k;
    case DType::kQ6_K: return deq_q6_k;
    default: return nullptr;
  }
}

// ---------------------------------------------------------------- quantization

// Smallest f16 >= v (v >= 0, finite and representable range checked by the caller).
uint16_t f16_round_up(float v) {
  uint16_t h = f32_to_f16(v);
  if (f16_to_f32(h) < v) ++h;  // positive f16 patterns are ordered like their values
  return h;
}

// ggml's reference quantizers for the 32-element formats (same float operations, in the
// same order, so the bytes match ggml and gguf-py).
void q_q4_0(const float* x, uint8_t* p) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) { amax = std::fabs(x[j]); max = x[j]; }
  }
  const float d = max / -8.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_0 b;
  b.d = f32_to_f16(d);
  for (int j = 0; j < kQK / 2; ++j) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j] * id + 8.5f)));
    const int q1 = std::min(15, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 8.5f)));
    b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
  std::memcpy(p, &b, sizeof b);
}

void q_q4_1(const float* x, uint8_t* p) {
  float mn = x[0], mx = x[0];
  for (int j = 1; j < kQK; ++j) { mn = std::min(mn, x[j]); mx = std::max(mx, x[j]); }
  const float d = (mx - mn) / 15.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ4_1 b;
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(mn);
  for (int j = 0; j < kQK / 2; ++j) {
    const int q0 = std::min(15, static_cast<int>(static_cast<int8_t>((x[j] - mn) * id + 0.5f)));
    const int q1 =
        std::min(15, static_cast<int>(static_cast<int8_t>((x[j + 16] - mn) * id + 0.5f)));
    b.qs[j] = static_cast<uint8_t>(q0 | (q1 << 4));
  }
  std::memcpy(p, &b, sizeof b);
}

void store_u32le(uint32_t v, uint8_t* p) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}

void q_q5_0(const float* x, uint8_t* p) {
  float amax = 0.0f, max = 0.0f;
  for (int j = 0; j < kQK; ++j) {
    if (amax < std::fabs(x[j])) { amax = std::fabs(x[j]); max = x[j]; }
  }
  const float d = max / -16.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ5_0 b;
  b.d = f32_to_f16(d);
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j] * id + 16.5f)));
    const int q1 = std::min(31, static_cast<int>(static_cast<int8_t>(x[j + 16] * id + 16.5f)));
    b.qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
    qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  store_u32le(qh, b.qh);
  std::memcpy(p, &b, sizeof b);
}

void q_q5_1(const float* x, uint8_t* p) {
  float mn = x[0], mx = x[0];
  for (int j = 1; j < kQK; ++j) { mn = std::min(mn, x[j]); mx = std::max(mx, x[j]); }
  const float d = (mx - mn) / 31.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ5_1 b;
  b.d = f32_to_f16(d);
  b.m = f32_to_f16(mn);
  uint32_t qh = 0;
  for (int j = 0; j < kQK / 2; ++j) {
    const int q0 = std::min(31, static_cast<int>(static_cast<int8_t>((x[j] - mn) * id + 0.5f)));
    const int q1 =
        std::min(31, static_cast<int>(static_cast<int8_t>((x[j + 16] - mn) * id + 0.5f)));
    b.qs[j] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
    qh |= static_cast<uint32_t>((q0 >> 4) & 1) << j;
    qh |= static_cast<uint32_t>((q1 >> 4) & 1) << (j + 16);
  }
  store_u32le(qh, b.qh);
  std::memcpy(p, &b, sizeof b);
}

void q_q8_0(const float* x, uint8_t* p) {
  float amax = 0.0f;
  for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(x[j]));
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  BlockQ8_0 b;
  b.d = f32_to_f16(d);
  for (int j = 0; j < kQK; ++j) b.qs[j] = static_cast<int8_t>(std::round(x[j] * id));
  std::memcpy(p, &b, sizeof b);
}

// Asymmetric K formats (Q4_K: 15 levels, Q5_K: 31). For each sub-block of 32 the scale and
// min are rounded UP to the 6-bit grid, so min + 15 * scale still covers the sub-block's max
// and no element clips; the error is then at most half a (slightly enlarged) step.
void q_k_asym(const float* x, int levels, uint8_t* scales /*[12]*/, uint16_t* d_out,
              uint16_t* dmin_out, uint8_t* q /*[256]*/) {
  float neg_min[8], mx[8];
  float max_neg_min = 0.0f;
  for (int j = 0; j < 8; ++j) {
    float mn = 0.0f, hi = 0.0f;  // min clamped to <= 0 so the stored min is non-negative
    for (int l = 0; l < 32; ++l) { mn = std::min(mn, x[j * 32 + l]); hi = std::max(hi, x[j * 32 + l]); }
    neg_min[j] = -mn;
    mx[j] = hi;
    max_neg_min = std::max(max_neg_min, neg_min[j]);
  }
  const uint16_t dmin_h = f16_round_up(max_neg_min / 63.0f);
  const float dmin = f16_to_f32(dmin_h);
  uint8_t m[8], sc[8];
  float m_eff[8], need[8], max_need = 0.0f;
  for (int j = 0; j < 8; ++j) {
    m[j] = dmin > 0 ? static_cast<uint8_t>(std::min(63.0f, std::ceil(neg_min[j] / dmin))) : 0;
    m_eff[j] = dmin * static_cast<float>(m[j]);
    need[j] = (mx[j] + m_eff[j]) / static_cast<float>(levels);
    max_need = std::max(max_need, need[j]);
  }
  const uint16_t d_h = f16_round_up(max_need / 63.0f);
  const float d = f16_to_f32(d_h);
  for (int j = 0; j < 8; ++j) {
    sc[j] = d > 0 ? static_cast<uint8_t>(std::min(63.0f, std::ceil(need[j] / d))) : 0;
    const float d1 = d * static_cast<float>(sc[j]);
    const float id = d1 > 0 ? 1.0f / d1 : 0.0f;
    for (int l = 0; l < 32; ++l) {
      const float v = std::nearbyint((x[j * 32 + l] + m_eff[j]) * id);
      q[j * 32 + l] = static_cast<uint8_t>(std::clamp(v, 0.0f, static_cast<float>(levels)));
    }
  }
  // Pack (inverse of k_scale_min).
  for (int j = 0; j < 4; ++j) {
    scales[j] = static_cast<uint8_t>((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
    scales[j + 4] = static_cast<uint8_t>((m[j] & 63) | ((m[j + 4] >> 4) << 6));
    scales[j + 8] = static_cast<uint8_t>((sc[j + 4] & 0x0f) | ((m[j + 4] & 0x0f) << 4));
  }
  *d_out = d_h;
  *dmin_out = dmin_h;
}

void q_q4_k(const float* x, uint8_t* p) {
  BlockQ4_K b;
  uint8_t q[kQK_K];
  q_k_asym(x, 15, b.scales, &b.d, &b.dmin, q);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      b.qs[c * 32 + l] = static_cast<uint8_t>(q[(2 * c) * 32 + l] | (q[(2 * c + 1) * 32 + l] << 4));
    }
  }
  std::memcpy(p, &b, sizeof b);
}

void q_q5_k(const float* x, uint8_t* p) {
  BlockQ5_K b;
  uint8_t q[kQK_K];
  q_k_asym(x, 31, b.scales, &b.d, &b.dmin, q);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int c = 0; c < 4; ++c) {
    for (int l = 0; l < 32; ++l) {
      const int q0 = q[(2 * c) * 32 + l], q1 = q[(2 * c + 1) * 32 + l];
      b.qs[c * 32 + l] = static_cast<uint8_t>((q0 & 0x0f) | ((q1 & 0x0f) << 4));
    }
  }
  for (int j = 0; j < 8; ++j) {
    for (int l = 0; l < 32; ++l) b.qh[l] |= static_cast<uint8_t>(((q[j * 32 + l] >> 4) & 1) << j);
  }
  std::memcpy(p, &b, sizeof b);
}

// Symmetric Q6_K: per sub-block of 16, scale = amax / 31 rounded up to the int8 grid of d, so
// q = round(x / scale) stays within [-31, 31].
void q_q6_k(const float* x, uint8_t* p) {
  float need[16], max_need = 0.0f;
  for (int i = 0; i < 16; ++i) {
    float amax = 0.0f;
    for (int l = 0; l < 16; ++l) amax = std::max(amax, std::fabs(x[i * 16 + l]));
    need[i] = amax / 31.0f;
    max_need = std::max(max_need, need[i]);
  }
  BlockQ6_K b;
  b.d = f16_round_up(max_need / 127.0f);
  const float d = f16_to_f32(b.d);
  std::memset(b.ql, 0, sizeof b.ql);
  std::memset(b.qh, 0, sizeof b.qh);
  for (int i = 0; i < 16; ++i) {
    const int s = d > 0 ? static_cast<int>(std::min(127.0f, std::ceil(need[i] / d))) : 0;
    b.scales[i] = static_cast<int8_t>(s);
    const float dl = d * static_cast<float>(s);
    const float id = dl > 0 ? 1.0f / dl : 0.0f;
    for (int l = 0; l < 16; ++l) {
      const int e = i * 16 + l;
      const int q = static_cast<int>(std::clamp(std::nearbyint(x[e] * id), -32.0f, 31.0f)) + 32;
      const int half = e / 128, r = e % 128;
      b.ql[half * 64 + r % 64] |= static_cast<uint8_t>((q & 0x0f) << (4 * (r / 64)));
      b.qh[half * 32 + r % 32] |= static_cast<uint8_t>((q >> 4) << (2 * (r / 32)));
    }
  }
  std::memcpy(p, &b, sizeof b);
}

using QFn = void (*)(const float*, uint8_t*);

QFn q_fn(DType t) {
  switch (t) {
    case DType::kQ4_0: return q_q4_0;
    case DType::kQ4_1: return q_q4_1;
    case DType::kQ5_0: return q_q5_0;
    case DType::kQ5_1: return q_q5_1;
    case DType::kQ8_0: return q_q8_0;
    case DType::kQ4_K: return q_q4_k;
    case DType::kQ5_K: return q_q5_k;
    case DType::kQ6_K: return q_q6_k;
    default: return nullptr;
  }
}

Status check_count(DType t, int64_t n, const char* what) {
  const DTypeInfo& info = dtype_info(t);
  if (n < 0 || n % info.block_elems != 0) {
    return InvalidArgument(std::string(what) + ": " + std::to_string(n) + " elements is not a " +
                           "multiple of the " + info.name + " block size " +
                           std::to_string(info.block_elems));
  }
  return OkStatus();
}

}  // namespace

std::optional<DType> dtype_from_ggml_type(uint32_t ggml_type) {
  switch (ggml_type) {
    case 0: return DType::kF32;
    case 1: return DType::kF16;
    case 2: return DType::kQ4_0;
    case 3: return DType::kQ4_1;
    case 6: return DType::kQ5_0;
    case 7: return DType::kQ5_1;
    case 8: return DType::kQ8_0;
    case 10: return DType::kQ2_K;
    case 11: return DType::kQ3_K;
    case 12: return DType::kQ4_K;
    case 13: return DType::kQ5_K;
    case 14: return DType::kQ6_K;
    case 24: return DType::kI8;
    case 25: return DType::kI16;
    case 26: return DType::kI32;
    case 27: return DType::kI64;
    case 28: return DType::kF64;
    case 30: return DType::kBF16;
    default: return std::nullopt;
  }
}

std::optional<uint32_t> ggml_type_from_dtype(DType t) {
  for (uint32_t id = 0; id <= 30; ++id) {
    auto d = dtype_from_ggml_type(id);
    if (d && *d == t) return id;
  }
  return std::nullopt;
}

Status dequantize_row(DType t, const void* src, float* dst, int64_t n) {
  RETURN_IF_ERROR(check_count(t, n, "dequantize_row"));
  if (convert_to_f32(t, src, dst, static_cast<uint64_t>(n))) return OkStatus();
  DeqFn fn = deq_fn(t);
  if (!fn) return Unimplemented(std::string("dequantize_row: no dequantization for ") + dtype_name(t));
  const DTypeInfo& info = dtype_info(t);
  const uint8_t* p = static_cast<const uint8_t*>(src);
  for (int64_t b = 0; b < n / info.block_elems; ++b) {
    fn(p + b * info.block_bytes, dst + b * info.block_elems);
  }
  return OkStatus();
}

Status quantize_row(DType t, const float* src, void* dst, int64_t n) {
  RETURN_IF_ERROR(check_count(t, n, "quantize_row"));
  for (int64_t i = 0; i < n; ++i) {
    if (!std::isfinite(src[i])) {
      return InvalidArgument("quantize_row: non-finite value at element " + std::to_string(i));
    }
  }
  switch (t) {
    case DType::kF32:
      std::memcpy(dst, src, static_cast<size_t>(n) * 4);
      return OkStatus();
    case DType::kF16:
    case DType::kBF16: {
      uint16_t* o = static_cast<uint16_t*>(dst);
      for (int64_t i = 0; i < n; ++i) o[i] = t == DType::kF16 ? f32_to_f16(src[i]) : f32_to_bf16(src[i]);
      return OkStatus();
    }
    default:
      break;
  }
  QFn fn = q_fn(t);
  if (!fn) return Unimplemented(std::string("quantize_row: no quantizer for ") + dtype_name(t));
  const DTypeInfo& info = dtype_info(t);
  uint8_t* p = static_cast<uint8_t*>(dst);
  for (int64_t b = 0; b < n / info.block_elems; ++b) {
    const float* x = src + b * info.block_elems;
    // Scales and mins are stored as f16: blocks beyond the f16 range cannot be encoded.
    float amax = 0.0f;
    for (uint32_t j = 0; j < info.block_elems; ++j) amax = std::max(amax, std::fabs(x[j]));
    if (amax > 65504.0f) {
      return OutOfRange("quantize_row: " + std::string(info.name) + " block " + std::to_string(b) +
                        " has magnitude " + std::to_string(amax) + ", beyond the f16 scale range");
    }
    fn(x, p + b * info.block_bytes);
  }
  return OkStatus();
}

}  // namespace lancet
