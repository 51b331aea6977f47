// The sampler's counter-based uniform, shared by the CPU sampler (runner/sampler.cc) and the
// CUDA sampling kernel (backend/cuda/sampling.cu) so that both draw with bit-identical numbers:
// the draw for output position `counter` of a request with `seed` is a pure function of the
// two (splitmix64-style mixing, no state), so a seeded request gives the same token whichever
// path samples it and whatever batch it is in.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LANCET_HOST_DEVICE __host__ __device__
#else
#define LANCET_HOST_DEVICE
#endif

namespace lancet {

LANCET_HOST_DEVICE inline uint64_t counter_mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Uniform in [0, 1) with 53 random bits (exactly representable as a double).
LANCET_HOST_DEVICE inline double counter_uniform_value(uint64_t seed, uint64_t counter) {
  const uint64_t r = counter_mix64(counter_mix64(seed + 0x9e3779b97f4a7c15ull) ^ (counter * 0xd1b54a32d192ed03ull));
  return static_cast<double>(r >> 11) * (1.0 / 9007199254740992.0);
}

}  // namespace lancet
