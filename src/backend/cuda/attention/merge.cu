// The split-KV merge every attention kernel's partial results go through: per (token, head),
// the splits' unnormalized outputs rescaled by their maxima (log2 units) and summed, divided by
// the rescaled sums.
#include <cmath>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace lancet::cuda {
namespace {

constexpr int kMaxMergeSplits = 256;
constexpr int kPrefetch = 64;  // splits whose outputs each thread loads up front

// One block of D threads per (token, head): combines the splits' partial results. Thread s
// reads split s's maximum and sum (and those of s + D, ... when a grid holds more splits than
// D), and thread d dim d of the first kPrefetch splits' outputs, in the same round trip as the
// plan: a merge after a short decode step waits on the global memory's latency, not its
// bandwidth.
template <int D>
__global__ void __launch_bounds__(D) attention_reduce_kernel(const float* __restrict__ partial, int stride,
                                                             const int32_t* __restrict__ device_plan,
                                                             float* __restrict__ out) {
  __shared__ float s_w[kMaxMergeSplits];  // split s's weight exp2(m_s - max) (0 for an empty split)
  __shared__ float s_red[2 * (D / 32)];
  pdl_wait();
  pdl_release_if_small();
  const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
  const int64_t oh = blockIdx.x;
  const float* part = partial + oh * stride * (D + 2);
  float m0 = -INFINITY, l0 = 0.0f;
  if (tid < stride) {
    m0 = part[tid * (D + 2) + D];
    l0 = part[tid * (D + 2) + D + 1];
  }
  float v[kPrefetch];
#pragma unroll
  for (int sp = 0; sp < kPrefetch; ++sp) v[sp] = sp < stride ? part[sp * (D + 2) + tid] : 0.0f;
  const int num_splits = device_plan ? device_plan[0] : stride;
  // One split: the attention kernel wrote the output; more than the grid holds: it reported them.
  if (num_splits <= 1 || num_splits > stride) return;
  float mx = -INFINITY;
  for (int sp = tid; sp < num_splits; sp += D) mx = fmaxf(mx, sp == tid ? m0 : part[sp * (D + 2) + D]);
#pragma unroll
  for (int off = 16; off > 0; off /= 2) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, off));
  if (lane == 0) s_red[warp] = mx;
  __syncthreads();
  mx = s_red[0];
#pragma unroll
  for (int w = 1; w < D / 32; ++w) mx = fmaxf(mx, s_red[w]);
  float sum = 0.0f;
  for (int sp = tid; sp < num_splits; sp += D) {
    const float ms = sp == tid ? m0 : part[sp * (D + 2) + D];
    const float ls = sp == tid ? l0 : part[sp * (D + 2) + D + 1];
    const float c = ms == -INFINITY ? 0.0f : exp2f(ms - mx);  // maxima are in log2 units
    s_w[sp] = c;
    sum += ls * c;
  }
#pragma unroll
  for (int off = 16; off > 0; off /= 2) sum += __shfl_xor_sync(0xffffffffu, sum, off);
  if (lane == 0) s_red[D / 32 + warp] = sum;
  __syncthreads();
  sum = 0.0f;
#pragma unroll
  for (int w = 0; w < D / 32; ++w) sum += s_red[D / 32 + w];
  float a = 0.0f;
#pragma unroll
  for (int sp = 0; sp < kPrefetch; ++sp)
    if (sp < num_splits) a += v[sp] * s_w[sp];
  for (int sp = kPrefetch; sp < num_splits; ++sp) a += part[sp * (D + 2) + tid] * s_w[sp];
  out[oh * D + tid] = sum > 0.0f ? a / sum : 0.0f;
}

}  // namespace

cudaError_t launch_attention_merge(const float* partial, int64_t rows, int grid_splits, const int32_t* device_plan,
                                    int64_t head_dim, float* out, cudaStream_t s) {
  if (rows <= 0) return cudaSuccess;
  if (rows > 0x7fffffffLL || grid_splits < 1 || grid_splits > kMaxMergeSplits) return cudaErrorInvalidValue;
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
