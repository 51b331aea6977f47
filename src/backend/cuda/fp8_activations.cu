// FP8 activations for the FP8 GEMM path: per-token (per-row) dynamic quantization of the GEMM
// input, and the epilogue that applies the activation and weight scales to the f32 result
// (cuBLASLt on sm_90 takes only per-tensor scales, so per-row/per-column ones come here).
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

constexpr int kThreads = 256;
// The smallest scale: an all-zero row quantizes to zeros instead of dividing by zero.
constexpr float kMinScale = 1e-12f;

__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const float* __restrict__ x, int64_t k,
                                                                 __nv_fp8_e4m3* __restrict__ q,
                                                                 float* __restrict__ scale) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * k;
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) m = fmaxf(m, fabsf(xr[i]));
  __shared__ float red[kThreads / 32];
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < kThreads / 32 ? red[threadIdx.x] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) red[0] = fmaxf(m / 448.0f, kMinScale);
  }
  __syncthreads();
  const float sc = red[0];
  if (threadIdx.x == 0) scale[row] = sc;
  const float inv = 1.0f / sc;
  __nv_fp8_e4m3* qr = q + row * k;
  // The conversion saturates (__NV_SATFINITE), so rounding past 448 stays finite.
  for (int64_t i = threadIdx.x; i < k; i += kThreads) qr[i] = __nv_fp8_e4m3(xr[i] * inv);
}

__global__ void rescale_kernel(float* __restrict__ y, int64_t n, int64_t m, const float* __restrict__ rs,
                               const float* __restrict__ cs, bool per_col) {
  const int64_t total = n * m;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < total;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t r = i / m, c = i % m;
    y[i] *= rs[r] * cs[per_col ? c : 0];
  }
}

}  // namespace

cudaError_t launch_quantize_rows_fp8(const float* x, int64_t n, int64_t k, void* q, float* scale, cudaStream_t s) {
  if (n <= 0 || k <= 0) return cudaSuccess;
  quantize_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(x, k, static_cast<__nv_fp8_e4m3*>(q), scale);
  return cudaGetLastError();
}

cudaError_t launch_rescale_fp8_output(float* y, int64_t n, int64_t m, const float* row_scale, const float* col_scale,
                                      bool per_col, cudaStream_t s) {
  if (n <= 0 || m <= 0) return cudaSuccess;
  const int64_t total = n * m;
  const unsigned blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 65536));
  rescale_kernel<<<blocks, 256, 0, s>>>(y, n, m, row_scale, col_scale, per_col);
  return cudaGetLastError();
}

}  // namespace lancet::cuda
