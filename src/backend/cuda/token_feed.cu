// The token feed of asynchronous steps: a step's input token ids written from the previous
// step's sampled tokens, which never leave the device.
#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

__global__ void scatter_tokens_kernel(int32_t* __restrict__ token_ids, const int32_t* __restrict__ samples,
                                      const int32_t* __restrict__ pairs, int64_t n) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) token_ids[pairs[2 * i]] = samples[pairs[2 * i + 1]];
}

}  // namespace

cudaError_t launch_scatter_tokens(int32_t* token_ids, const int32_t* samples, const int32_t* pairs, int64_t n,
                                  cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  constexpr int kThreads = 256;
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  scatter_tokens_kernel<<<static_cast<unsigned>(blocks), kThreads, 0, s>>>(token_ids, samples, pairs, n);
  return cudaGetLastError();
}

}  // namespace lancet::cuda
