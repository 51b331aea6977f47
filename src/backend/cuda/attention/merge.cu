// The split-KV merge every attention kernel's partial results go through: per (token, head),
// the splits' unnormalized outputs rescaled by their maxima (log2 units) and summed, divided by
// the rescaled sums.
#include <cmath>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace lancet::cuda {
namespace {

// One block of D threads per (token, head): combines the splits' partial results.
template <int D>
__global__ void __launch_bounds__(D) attention_reduce_kernel(const float* __restrict__ partial, int stride,
                                                             const int32_t* __restrict__ device_plan,
                                                             float* __restrict__ out) {
  pdl_wait();
  const int num_splits = device_plan ? device_plan[0] : stride;
  if (num_splits <= 1) return;  // one split: the attention kernel wrote the output
  const int64_t oh = blockIdx.x;
  const float* part = partial + oh * stride * (D + 2);
  float mx = -INFINITY;
  for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, part[s * (D + 2) + D]);
  float sum = 0.0f, a = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float ms = part[s * (D + 2) + D];
    if (ms == -INFINITY) continue;
    const float c = exp2f(ms - mx);  // maxima are in log2 units
    sum += part[s * (D + 2) + D + 1] * c;
    a += part[s * (D + 2) + threadIdx.x] * c;
  }
  out[oh * D + threadIdx.x] = sum > 0.0f ? a / sum : 0.0f;
}

}  // namespace

cudaError_t launch_attention_merge(const float* partial, int64_t rows, int grid_splits, const int32_t* device_plan,
                                    int64_t head_dim, float* out, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (rows > 0x7fffffffLL || grid_splits < 1) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(rows);
  if (head_dim == 64)
    return launch_pdl(attention_reduce_kernel<64>, dim3(grid), dim3(64), 0, s, partial, grid_splits, device_plan,
                      out);
  if (head_dim == 128)
    return launch_pdl(attention_reduce_kernel<128>, dim3(grid), dim3(128), 0, s, partial, grid_splits, device_plan,
                      out);
  return cudaErrorInvalidValue;
}

}  // namespace lancet::cuda
