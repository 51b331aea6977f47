// A thin float-vector abstraction so one kernel source (kernels_impl.inc) compiles for each
// instruction set: the file including it is built with -mavx512* / -mavx2 or neither, and this
// header picks the matching vector type. Never include it from code built without knowing its
// ISA flags: every definition lives in the ISA namespace of the including file.
#pragma once

#include <immintrin.h>

#include <cmath>
#include <cstdint>

#if defined(__AVX512F__)
#define LANCET_SIMD_WIDTH 16
struct VecF {
  __m512 v;
};
static inline VecF vzero() { return {_mm512_setzero_ps()}; }
static inline VecF vset1(float a) { return {_mm512_set1_ps(a)}; }
static inline VecF vload(const float* p) { return {_mm512_loadu_ps(p)}; }
static inline void vstore(float* p, VecF a) { _mm512_storeu_ps(p, a.v); }
static inline VecF vfma(VecF a, VecF b, VecF c) { return {_mm512_fmadd_ps(a.v, b.v, c.v)}; }
static inline VecF vmul(VecF a, VecF b) { return {_mm512_mul_ps(a.v, b.v)}; }
static inline VecF vadd(VecF a, VecF b) { return {_mm512_add_ps(a.v, b.v)}; }
static inline float vhsum(VecF a) { return _mm512_reduce_add_ps(a.v); }
// 16 bf16 -> 16 f32
static inline VecF vload_bf16(const uint16_t* p) {
  __m256i h = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
  return {_mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16))};
}
static inline VecF vload_f16(const uint16_t* p) {
  return {_mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p)))};
}
#define LANCET_SIMD_HAS_F16 1
#elif defined(__AVX2__) && defined(__FMA__)
#define LANCET_SIMD_WIDTH 8
struct VecF {
  __m256 v;
};
static inline VecF vzero() { return {_mm256_setzero_ps()}; }
static inline VecF vset1(float a) { return {_mm256_set1_ps(a)}; }
static inline VecF vload(const float* p) { return {_mm256_loadu_ps(p)}; }
static inline void vstore(float* p, VecF a) { _mm256_storeu_ps(p, a.v); }
static inline VecF vfma(VecF a, VecF b, VecF c) { return {_mm256_fmadd_ps(a.v, b.v, c.v)}; }
static inline VecF vmul(VecF a, VecF b) { return {_mm256_mul_ps(a.v, b.v)}; }
static inline VecF vadd(VecF a, VecF b) { return {_mm256_add_ps(a.v, b.v)}; }
static inline float vhsum(VecF a) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(a.v), _mm256_extractf128_ps(a.v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}
static inline VecF vload_bf16(const uint16_t* p) {
  __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
  return {_mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16))};
}
static inline VecF vload_f16(const uint16_t* p) {
  return {_mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)))};
}
#define LANCET_SIMD_HAS_F16 1
#else
// Portable fallback: four lanes in plain C++ (the compiler may still use SSE2).
#define LANCET_SIMD_WIDTH 4
struct VecF {
  float v[4];
};
static inline VecF vzero() { return {{0.f, 0.f, 0.f, 0.f}}; }
static inline VecF vset1(float a) { return {{a, a, a, a}}; }
static inline VecF vload(const float* p) { return {{p[0], p[1], p[2], p[3]}}; }
static inline void vstore(float* p, VecF a) {
  for (int i = 0; i < 4; ++i) p[i] = a.v[i];
}
static inline VecF vfma(VecF a, VecF b, VecF c) {
  VecF r;
  for (int i = 0; i < 4; ++i) r.v[i] = a.v[i] * b.v[i] + c.v[i];
  return r;
}
static inline VecF vmul(VecF a, VecF b) {
  VecF r;
  for (int i = 0; i < 4; ++i) r.v[i] = a.v[i] * b.v[i];
  return r;
}
static inline VecF vadd(VecF a, VecF b) {
  VecF r;
  for (int i = 0; i < 4; ++i) r.v[i] = a.v[i] + b.v[i];
  return r;
}
static inline float vhsum(VecF a) { return (a.v[0] + a.v[1]) + (a.v[2] + a.v[3]); }
static inline VecF vload_bf16(const uint16_t* p) {
  VecF r;
  for (int i = 0; i < 4; ++i) r.v[i] = lancet::bf16_to_f32(p[i]);
  return r;
}
#define LANCET_SIMD_HAS_F16 0
#endif
