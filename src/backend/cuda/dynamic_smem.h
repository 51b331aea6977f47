// Dynamic shared memory past 48 KB needs an opt-in per kernel and device (cudaFuncSetAttribute):
// allow_dynamic_smem does it once for each.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <cstdint>

namespace lancet::cuda {

template <auto Kernel>
cudaError_t allow_dynamic_smem(int bytes) {
  static std::atomic<uint64_t> done{0};
  int dev = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e != cudaSuccess) return e;
  const uint64_t bit = uint64_t{1} << (dev & 63);
  if (done.load(std::memory_order_acquire) & bit) return cudaSuccess;
  e = cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  if (e == cudaSuccess) done.fetch_or(bit, std::memory_order_acq_rel);
  return e;
}

}  // namespace lancet::cuda
