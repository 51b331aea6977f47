// The weight-streaming load of the GEMV kernels: 16 bytes through the read-only path without
// allocating in L1 (each weight byte is read once per launch, so caching it would only evict x).
#pragma once

#include <cuda_runtime.h>

namespace lancet::cuda {

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

}  // namespace lancet::cuda
