// AVX2 kernels of quant_gemm.h (CPUs without AVX-512 VNNI): each packed 16-row group is done
// as two halves of 8 rows (one ymm of u32 lanes). Products go through maddubs (u8 x s8 ->
// s16 pairs) and madd with ones (-> s32). Q4 nibbles (<= 15) cannot saturate the s16 pairs;
// Q8_0 uses |w| and sign(x, w) so each pair stays within 2 * 128 * 127.
#include <immintrin.h>

#include <algorithm>
#include <cmath>

#include "backend/cpu/quant_gemm.h"

namespace lancet::cpu {

namespace {

constexpr int kMaxTokens = 4;

inline float f16_round(float v) { return _cvtsh_ss(_cvtss_sh(v, _MM_FROUND_TO_NEAREST_INT)); }

void quantize_rows_avx2(const float* x, int64_t k, int64_t i0, int64_t i1, QuantActsBuffer& buf) {
  const int64_t nb = k / 32;
  const __m256 sign = _mm256_set1_ps(-0.0f);
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + i * k + b * 32;
      __m256 vv[4];
      __m256 a = _mm256_setzero_ps();
      for (int j = 0; j < 4; ++j) {
        vv[j] = _mm256_loadu_ps(v + 8 * j);
        a = _mm256_max_ps(a, _mm256_andnot_ps(sign, vv[j]));
      }
      __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(a), _mm256_extractf128_ps(a, 1));
      m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
      m4 = _mm_max_ss(m4, _mm_movehdup_ps(m4));
      const float amax = _mm_cvtss_f32(m4);
      const float d = amax / 127.f;
      const float id = amax != 0.f ? 127.f / amax : 0.f;
      const __m256 m = _mm256_set1_ps(id);
      int8_t* q = buf.q() + i * k + b * 32;
      __m256i s = _mm256_setzero_si256();
      for (int j = 0; j < 4; ++j) {
        const __m256i qi = _mm256_cvtps_epi32(_mm256_mul_ps(vv[j], m));  // nearest even
        s = _mm256_add_epi32(s, qi);
        alignas(32) int32_t tmp[8];
        _mm256_store_si256(reinterpret_cast<__m256i*>(tmp), qi);
        for (int u = 0; u < 8; ++u) q[8 * j + u] = static_cast<int8_t>(tmp[u]);
      }
      __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s), _mm256_extracti128_si256(s, 1));
      s4 = _mm_add_epi32(s4, _mm_unpackhi_epi64(s4, s4));
      s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 1));
      const int32_t sum = _mm_cvtsi128_si32(s4);
      buf.d()[i * nb + b] = f16_round(d);
      buf.s()[i * nb + b] = f16_round(d * static_cast<float>(sum));
      buf.sum()[i * nb + b] = sum;
    }
  }
}

inline int32_t load_i32(const int8_t* p) {
  int32_t v;
  __builtin_memcpy(&v, p, 4);
  return v;
}

// u8 (or |w|) x s8 -> s32 sums of 4, added to acc.
inline __m256i dot4(__m256i acc, __m256i wu8, __m256i xs8) {
  const __m256i p16 = _mm256_maddubs_epi16(wu8, xs8);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(p16, _mm256_set1_epi16(1)));
}

// 8 rows (half h of the group) x NT tokens.
template <DType kT, int NT>
inline void tile(const PackedWeight& w, int64_t g, int h, const QuantActs& x, int64_t i0, float* y, int64_t ldy) {
  constexpr bool kQ8 = kT == DType::kQ8_0, kQ41 = kT == DType::kQ4_1;
  constexpr size_t kGbb = kQ8 ? 32 + 512 : (kQ41 ? 64 + 256 : 32 + 256);
  const __m256i low = _mm256_set1_epi8(0x0f);
  __m256 acc[NT], macc[NT];
  for (int t = 0; t < NT; ++t) acc[t] = macc[t] = _mm256_setzero_ps();
  const uint8_t* rec = w.bytes.data() + g * w.nb * kGbb;
  for (int64_t b = 0; b < w.nb; ++b, rec += kGbb) {
    const uint8_t* qw = rec + (kQ41 ? 64 : 32) + h * 32;
    __m256i iacc[NT];
    for (int t = 0; t < NT; ++t)
      iacc[t] = kQ41 || kQ8 ? _mm256_setzero_si256() : _mm256_set1_epi32(-8 * x.sum[(i0 + t) * x.nb + b]);
    if constexpr (kQ8) {
      for (int c = 0; c < 8; ++c) {
        const __m256i wv = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw + c * 64));
        const __m256i aw = _mm256_sign_epi8(wv, wv);
        for (int t = 0; t < NT; ++t) {
          const int8_t* xq = x.q + (i0 + t) * x.k + b * 32;
          iacc[t] = dot4(iacc[t], aw, _mm256_sign_epi8(_mm256_set1_epi32(load_i32(xq + 4 * c)), wv));
        }
      }
    } else {
      for (int c = 0; c < 4; ++c) {
        const __m256i raw = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(qw + c * 64));
        const __m256i lo = _mm256_and_si256(raw, low);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(raw, 4), low);
        for (int t = 0; t < NT; ++t) {
          const int8_t* xq = x.q + (i0 + t) * x.k + b * 32;
          iacc[t] = dot4(iacc[t], lo, _mm256_set1_epi32(load_i32(xq + 4 * c)));
          iacc[t] = dot4(iacc[t], hi, _mm256_set1_epi32(load_i32(xq + 16 + 4 * c)));
        }
      }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + h * 16)));
    for (int t = 0; t < NT; ++t) {
      const __m256 scale = _mm256_mul_ps(dw, _mm256_set1_ps(x.d[(i0 + t) * x.nb + b]));
      acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(iacc[t]), scale, acc[t]);
    }
    if constexpr (kQ41) {
      const __m256 mw = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(rec + 32 + h * 16)));
      for (int t = 0; t < NT; ++t) macc[t] = _mm256_fmadd_ps(mw, _mm256_set1_ps(x.s[(i0 + t) * x.nb + b]), macc[t]);
    }
  }
  const int64_t r0 = g * kPackRows + h * 8;
  const int64_t nr = std::min<int64_t>(8, w.rows - r0);
  for (int t = 0; t < NT; ++t) {
    const __m256 out = kQ41 ? _mm256_add_ps(acc[t], macc[t]) : acc[t];
    float* dst = y + (i0 + t) * ldy + r0;
    if (nr == 8) {
      _mm256_storeu_ps(dst, out);
    } else if (nr > 0) {
      alignas(32) float tmp[8];
      _mm256_store_ps(tmp, out);
      for (int64_t r = 0; r < nr; ++r) dst[r] = tmp[r];
    }
  }
}

template <DType kT>
void gemm_fmt(const PackedWeight& w, int64_t g0, int64_t g1, const QuantActs& x, int64_t i0, int64_t i1,
              float* y, int64_t ldy) {
  for (int64_t g = g0; g < g1; ++g) {
    for (int h = 0; h < 2; ++h) {
      if (g * kPackRows + h * 8 >= w.rows) break;
      int64_t i = i0;
      for (; i + kMaxTokens <= i1; i += kMaxTokens) tile<kT, kMaxTokens>(w, g, h, x, i, y, ldy);
      switch (i1 - i) {
        case 3: tile<kT, 3>(w, g, h, x, i, y, ldy); break;
        case 2: tile<kT, 2>(w, g, h, x, i, y, ldy); break;
        case 1: tile<kT, 1>(w, g, h, x, i, y, ldy); break;
        default: break;
      }
    }
  }
}

void gemm_avx2(const PackedWeight& w, int64_t g0, int64_t g1, const QuantActs& x, int64_t i0, int64_t i1,
               float* y, int64_t ldy) {
  switch (w.dtype) {
    case DType::kQ8_0: gemm_fmt<DType::kQ8_0>(w, g0, g1, x, i0, i1, y, ldy); break;
    case DType::kQ4_0: gemm_fmt<DType::kQ4_0>(w, g0, g1, x, i0, i1, y, ldy); break;
    case DType::kQ4_1: gemm_fmt<DType::kQ4_1>(w, g0, g1, x, i0, i1, y, ldy); break;
    default: break;
  }
}

const QuantGemmKernels kAvx2 = {"avx2", quantize_rows_avx2, gemm_avx2};

}  // namespace

const QuantGemmKernels* quant_gemm_avx2() {
  static const bool has =
      __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
  return has ? &kAvx2 : nullptr;
}

}  // namespace lancet::cpu
