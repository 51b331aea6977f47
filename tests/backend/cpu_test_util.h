// Shared helpers of the CPU backend tests: random data, the available ISAs, naive references.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"

namespace lancet::testing {

inline std::vector<float> random_floats(size_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 g(seed);
  std::uniform_real_distribution<float> d(-scale, scale);
  std::vector<float> v(n);
  for (float& x : v) x = d(g);
  return v;
}

// Every instruction set this CPU can run ("avx512", "avx2", "scalar").
inline std::vector<std::string> available_isas() {
  std::vector<std::string> out;
  for (const char* isa : {"avx512", "avx2", "scalar"}) {
    CpuBackendOptions o;
    o.isa = isa;
    o.num_threads = 2;
    if (make_cpu_backend(o).ok()) out.push_back(isa);
  }
  return out;
}

inline std::unique_ptr<Backend> cpu_backend(const std::string& isa, int threads = 2) {
  CpuBackendOptions o;
  o.isa = isa;
  o.num_threads = threads;
  auto b = make_cpu_backend(o);
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return std::move(b).value();
}

// max |a - b| / max(|b|, tiny)
inline double rel_max_err(const std::vector<float>& a, const std::vector<float>& b) {
  double e = 0, m = 1e-30;
  for (size_t i = 0; i < a.size(); ++i) {
    e = std::max(e, std::fabs(static_cast<double>(a[i]) - b[i]));
    m = std::max(m, std::fabs(static_cast<double>(b[i])));
  }
  return e / m;
}

}  // namespace lancet::testing
