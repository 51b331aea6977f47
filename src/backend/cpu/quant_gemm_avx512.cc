// AVX-512 VNNI kernels of quant_gemm.h: one vpdpbusd multiplies the 16 rows of a packed group
// (u8 weights in the lanes) by 4 broadcast activation bytes (s8). A tile of up to kMaxTokens
// tokens shares each unpacked weight chunk. Q8_0 weights become u8 by flipping the sign bit
// (w + 128); the int accumulator starts at -128 * sum(x) to cancel it (exact integers).
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>

#include "backend/cpu/quant_gemm.h"

namespace lancet::cpu {

namespace {

constexpr int kMaxTokens = 6;

inline float f16_round(float v) { return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT)); }

void quantize_rows_vnni(const float* x, int64_t k, int64_t i0, int64_t i1, QuantActsBuffer& buf) {
  const int64_t nb = k / 32;
  const __m512 sign = _mm512_set1_ps(-0.0f);
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + i * k + b * 32;
      const __m512 v0 = _mm512_loadu_ps(v), v1 = _mm512_loadu_ps(v + 16);
      const __m512 a = _mm512_max_ps(_mm512_andnot_ps(sign, v0), _mm512_andnot_ps(sign, v1));
      const float amax = _mm512_reduce_max_ps(a);
      const float d = amax / 127.f;
      const float id = amax != 0.f ? 127.f / amax : 0.f;
      const __m512 m = _mm512_set1_ps(id);
      // cvtps rounds with MXCSR (nearest even), as nearbyint in the reference.
      const __m512i q0 = _mm512_cvtps_epi32(_mm512_mul_ps(v0, m));
      const __m512i q1 = _mm512_cvtps_epi32(_mm512_mul_ps(v1, m));
      int8_t* q = buf.q() + i * k + b * 32;
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q), _mm512_cvtsepi32_epi8(q0));
      _mm_storeu_si128(reinterpret_cast<__m128i*>(q + 16), _mm512_cvtsepi32_epi8(q1));
      const int32_t sum = _mm512_reduce_add_epi32(_mm512_add_epi32(q0, q1));
      buf.d()[i * nb + b] = f16_round(d);
      buf.s()[i * nb + b] = f16_round(d * static_cast<float>(sum));
      buf.sum()[i * nb + b] = sum;
    }
  }
}

inline __m512 load_f16x16(const uint8_t* p) {
  return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)));
}

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

// 16 rows x NT tokens of one group.
template <DType kT, int NT>
inline void tile(const PackedWeight& w, int64_t g, const QuantActs& x, int64_t i0, float* y, int64_t ldy) {
  constexpr bool kQ8 = kT == DType::kQ8_0, kQ41 = kT == DType::kQ4_1;
  constexpr size_t kGbb = kQ8 ? 32 + 512 : (kQ41 ? 64 + 256 : 32 + 256);
  const __m512i low = _mm512_set1_epi8(0x0f);
  const __m512i flip = _mm512_set1_epi8(static_cast<char>(0x80));
  __m512 acc[NT], macc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = macc[t] = _mm512_setzero_ps();
  const uint8_t* rec = w.bytes.data() + g * w.nb * kGbb;
  for (int64_t b = 0; b < w.nb; ++b, rec += kGbb) {
    const uint8_t* qw = rec + (kQ41 ? 64 : 32);
    __m512i iacc[NT];
    for (int t = 0; t < NT; ++t) {
      const int32_t sx = x.sum[(i0 + t) * x.nb + b];
      iacc[t] = kQ8 ? _mm512_set1_epi32(-128 * sx) : (kQ41 ? _mm512_setzero_si512() : _mm512_set1_epi32(-8 * sx));
    }
    if constexpr (kQ8) {
      for (int c = 0; c < 8; ++c) {
        const __m512i wv = _mm512_xor_si512(_mm512_loadu_si512(qw + c * 64), flip);
        for (int t = 0; t < NT; ++t) {
          const int8_t* xq = x.q + (i0 + t) * x.k + b * 32;
          iacc[t] = _mm512_dpbusd_epi32(iacc[t], wv, _mm512_set1_epi32(load_i32(xq + 4 * c)));
        }
      }
    } else {
      for (int c = 0; c < 4; ++c) {
        const __m512i raw = _mm512_loadu_si512(qw + c * 64);
        const __m512i lo = _mm512_and_si512(raw, low);
        const __m512i hi = _mm512_and_si512(_mm512_srli_epi16(raw, 4), low);
        for (int t = 0; t < NT; ++t) {
          const int8_t* xq = x.q + (i0 + t) * x.k + b * 32;
          iacc[t] = _mm512_dpbusd_epi32(iacc[t], lo, _mm512_set1_epi32(load_i32(xq + 4 * c)));
          iacc[t] = _mm512_dpbusd_epi32(iacc[t], hi, _mm512_set1_epi32(load_i32(xq + 16 + 4 * c)));
        }
      }
    }
    const __m512 dw = load_f16x16(rec);
    for (int t = 0; t < NT; ++t) {
      const __m512 scale = _mm512_mul_ps(dw, _mm512_set1_ps(x.d[(i0 + t) * x.nb + b]));
      acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(iacc[t]), scale, acc[t]);
    }
    if constexpr (kQ41) {
      const __m512 mw = load_f16x16(rec + 32);
      for (int t = 0; t < NT; ++t) macc[t] = _mm512_fmadd_ps(mw, _mm512_set1_ps(x.s[(i0 + t) * x.nb + b]), macc[t]);
    }
  }
  const int64_t r0 = g * kPackRows;
  const int64_t nr = std::min<int64_t>(kPackRows, w.rows - r0);
  const __mmask16 mask = nr >= 16 ? __mmask16(0xffff) : __mmask16((1u << nr) - 1);
  for (int t = 0; t < NT; ++t) {
    const __m512 out = kQ41 ? _mm512_add_ps(acc[t], macc[t]) : acc[t];
    _mm512_mask_storeu_ps(y + (i0 + t) * ldy + r0, mask, out);
  }
}

template <DType kT>
void gemm_fmt(const PackedWeight& w, int64_t g0, int64_t g1, const QuantActs& x, int64_t i0, int64_t i1,
              float* y, int64_t ldy) {
  for (int64_t g = g0; g < g1; ++g) {
    int64_t i = i0;
    for (; i + kMaxTokens <= i1; i += kMaxTokens) tile<kT, kMaxTokens>(w, g, x, i, y, ldy);
    switch (i1 - i) {
      case 5: tile<kT, 5>(w, g, x, i, y, ldy); break;
      case 4: tile<kT, 4>(w, g, x, i, y, ldy); break;
      case 3: tile<kT, 3>(w, g, x, i, y, ldy); break;
      case 2: tile<kT, 2>(w, g, x, i, y, ldy); break;
      case 1: tile<kT, 1>(w, g, x, i, y, ldy); break;
      default: break;
    }
  }
}

void gemm_vnni(const PackedWeight& w, int64_t g0, int64_t g1, const QuantActs& x, int64_t i0, int64_t i1,
               float* y, int64_t ldy) {
  switch (w.dtype) {
    case DType::kQ8_0: gemm_fmt<DType::kQ8_0>(w, g0, g1, x, i0, i1, y, ldy); break;
    case DType::kQ4_0: gemm_fmt<DType::kQ4_0>(w, g0, g1, x, i0, i1, y, ldy); break;
    case DType::kQ4_1: gemm_fmt<DType::kQ4_1>(w, g0, g1, x, i0, i1, y, ldy); break;
    default: break;
  }
}

const QuantGemmKernels kVnni = {"avx512vnni", quantize_rows_vnni, gemm_vnni};

}  // namespace

const QuantGemmKernels* quant_gemm_vnni() {
  static const bool has = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512f") &&
                          __builtin_cpu_supports("f16c");
  return has ? &kVnni : nullptr;
}

}  // namespace lancet::cpu
