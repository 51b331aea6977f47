// AVX-512 VNNI (256-bit, AVX512VL) dot products of Q8_0/Q4_0/Q4_1 weight rows with int8
// activation blocks: one vpdpbusd per 32 elements (u8 weights x s8 activations), the
// per-block scales applied in float.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include "backend/cpu/quant_dot.h"
#include "quant/gguf_blocks.h"

namespace lancet::cpu {

namespace {

inline float h2f(uint16_t h) { return _cvtsh_ss(h); }

inline float hsum256(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// 16 bytes of nibbles -> 32 u8: low nibbles (elements 0..15) then high nibbles (16..31).
inline __m256i unpack_nibbles(const uint8_t* qs) {
  const __m128i raw = _mm_loadu_si128(reinterpret_cast<const __m128i*>(qs));
  const __m256i both = _mm256_set_m128i(_mm_srli_epi16(raw, 4), raw);
  return _mm256_and_si256(both, _mm256_set1_epi8(0x0f));
}

template <DType kT>
void rows_dot(const WeightMatrix& w, const ActQ8Block* x, int64_t j0, int64_t j1, float* y) {
  const int64_t nb = w.cols / 32;
  const __m256i zero = _mm256_setzero_si256();
  for (int64_t j = j0; j < j1; ++j) {
    const uint8_t* row = static_cast<const uint8_t*>(w.data) + j * w.row_bytes;
    __m256 acc = _mm256_setzero_ps();
    float extra = 0.f;  // per-block offset terms (mins, zero points)
    for (int64_t b = 0; b < nb; ++b) {
      const __m256i xq = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(x[b].q));
      float scale;
      __m256i wq;
      if constexpr (kT == DType::kQ8_0) {
        const auto* blk = reinterpret_cast<const BlockQ8_0*>(row) + b;
        // s8 weights as u8 = w + 128; subtract 128 * sum(x) below.
        wq = _mm256_xor_si256(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(blk->qs)),
                              _mm256_set1_epi8(static_cast<char>(0x80)));
        scale = h2f(blk->d) * x[b].d;
        extra -= scale * 128.f * static_cast<float>(x[b].sum);
      } else if constexpr (kT == DType::kQ4_0) {
        const auto* blk = reinterpret_cast<const BlockQ4_0*>(row) + b;
        wq = unpack_nibbles(blk->qs);
        scale = h2f(blk->d) * x[b].d;
        extra -= scale * 8.f * static_cast<float>(x[b].sum);
      } else {
        const auto* blk = reinterpret_cast<const BlockQ4_1*>(row) + b;
        wq = unpack_nibbles(blk->qs);
        scale = h2f(blk->d) * x[b].d;
        extra += h2f(blk->m) * x[b].d * static_cast<float>(x[b].sum);
      }
      const __m256i dot = _mm256_dpbusd_epi32(zero, wq, xq);
      acc = _mm256_fmadd_ps(_mm256_cvtepi32_ps(dot), _mm256_set1_ps(scale), acc);
    }
    y[j - j0] = hsum256(acc) + extra;
  }
}

}  // namespace

QuantRowsDot quant_rows_dot_vnni_impl(DType t) {
  switch (t) {
    case DType::kQ8_0: return rows_dot<DType::kQ8_0>;
    case DType::kQ4_0: return rows_dot<DType::kQ4_0>;
    case DType::kQ4_1: return rows_dot<DType::kQ4_1>;
    default: return nullptr;
  }
}

}  // namespace lancet::cpu
