// Helpers of the CUDA op tests: the GPU backend (a missing GPU is a failure, not a skip: this
// binary only runs on the GPU machine), the CPU reference backend, device round trips, NMSE.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace lancet::testing {

inline std::unique_ptr<Backend> gpu_backend() {
  auto b = make_backend("cuda");
  if (!b.ok()) {
    ADD_FAILURE() << "no CUDA backend (this test needs a GPU): " << b.status().to_string();
    return nullptr;
  }
  return std::move(b).value();
}

// The reference: f32 tiles everywhere (the int8 activation path is left out by a forced ISA).
inline std::unique_ptr<Backend> cpu_reference() {
  for (const char* isa : {"avx2", "scalar"}) {
    CpuBackendOptions o;
    o.isa = isa;
    auto b = make_cpu_backend(o);
    if (b.ok()) return std::move(b).value();
  }
  ADD_FAILURE() << "no CPU backend";
  return nullptr;
}

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

template <typename T>
Buffer to_device(Backend& be, const std::vector<T>& v) {
  auto b = be.alloc(std::max<size_t>(1, v.size()) * sizeof(T));
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  if (!b.ok()) return Buffer();
  Status st = be.copy_to_device(b->data(), v.data(), v.size() * sizeof(T));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return *b;
}

template <typename T>
std::vector<T> to_host(Backend& be, const Buffer& b, size_t n) {
  std::vector<T> v(n);
  Status st = be.copy_to_host(v.data(), b.data(), n * sizeof(T));
  EXPECT_TRUE(st.ok()) << st.to_string();
  return v;
}

// sum((a - b)^2) / sum(b^2); every value of a must be finite.
inline void expect_nmse(const std::vector<float>& got, const std::vector<float>& ref, double bound,
                        const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  double num = 0, den = 0;
  size_t bad = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    if (!std::isfinite(got[i])) ++bad;
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  EXPECT_EQ(bad, 0u) << what << ": non-finite outputs";
  const double nmse = den > 0 ? num / den : num;
  EXPECT_LE(nmse, bound) << what << ": NMSE " << nmse;
}

// a and b equal bit for bit (NaNs included).
inline void expect_bits_equal(const std::vector<float>& a, const std::vector<float>& b, const std::string& what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  size_t diff = 0, first = 0;
  for (size_t i = 0; i < a.size(); ++i)
    if (std::memcmp(&a[i], &b[i], sizeof(float)) != 0 && diff++ == 0) first = i;
  if (diff) ADD_FAILURE() << what << ": " << diff << " of " << a.size() << " values differ, first at " << first << " ("
                          << a[first] << " vs " << b[first] << ")";
}

// x [n, k] as the FP8 GEMMs see it: each row quantized to E4M3 with the shared per-row rule
// (scale = max(absmax / 448, 1e-12), q = e4m3(x * (1 / scale)), saturating) and widened back,
// so that a weight-only reference on it computes the W8A8 product exactly.
inline std::vector<float> w8a8_input(const std::vector<float>& x, int64_t n, int64_t k) {
  std::vector<float> out(x.size());
  for (int64_t r = 0; r < n; ++r) {
    float amax = 0.0f;
    for (int64_t i = 0; i < k; ++i) amax = std::fmax(amax, std::fabs(x[r * k + i]));
    const float sc = std::fmax(amax / 448.0f, 1e-12f), inv = 1.0f / sc;
    for (int64_t i = 0; i < k; ++i) out[r * k + i] = fp8e4m3_to_f32(f32_to_fp8e4m3(x[r * k + i] * inv)) * sc;
  }
  return out;
}

inline std::vector<uint16_t> to_bf16(const std::vector<float>& v) {
  std::vector<uint16_t> o(v.size());
  for (size_t i = 0; i < v.size(); ++i) o[i] = f32_to_bf16(v[i]);
  return o;
}

}  // namespace lancet::testing
