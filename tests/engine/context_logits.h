// Deterministic logits for the engine tests' fake models: the logit of token v after a context
// is a hash of (context, v) in [0, 8), so every context has its own, reproducible argmax.
#pragma once

#include <cstdint>
#include <vector>

namespace lancet::testing {

inline float context_logit(const std::vector<int32_t>& ctx, int32_t v) {
  uint64_t h = 1469598103934665603ull;
  for (int32_t t : ctx) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
  h = (h ^ static_cast<uint64_t>(v + 7919)) * 1099511628211ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return static_cast<float>(h % 100000) / 100000.0f * 8.0f;
}

}  // namespace lancet::testing
