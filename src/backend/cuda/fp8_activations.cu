// FP8 activations for the FP8 GEMM path: per-token (per-row) dynamic quantization of the GEMM
// input, the epilogue that applies the activation and weight scales to the f32 result
// (cuBLASLt on sm_90 takes only per-tensor scales, so per-row/per-column ones come here), and
// the gate/up epilogue that also does SiLU * up and quantizes the result for the down
// projection (one pass over the two GEMM outputs instead of three plus a quantization pass).
#include <cuda_fp8.h>

#include <algorithm>

#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

constexpr int kThreads = 256;

// Block-wide max of m (>= 0) turned into the row's scale (kernels.h: kFp8Max, kFp8MinScale);
// red is the block's shared [kThreads / 32] scratch. Every thread gets the scale.
__device__ __forceinline__ float block_row_scale(float m, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
  __syncthreads();
  if (threadIdx.x < 32) {
    m = threadIdx.x < kThreads / 32 ? red[threadIdx.x] : 0.0f;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
    if (threadIdx.x == 0) red[0] = fmaxf(m / kFp8Max, kFp8MinScale);
  }
  __syncthreads();
  return red[0];
}

__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const float* __restrict__ x, int64_t k,
                                                                 __nv_fp8_e4m3* __restrict__ q,
                                                                 float* __restrict__ scale) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * k;
  float m = 0.0f;
  for (int64_t i = threadIdx.x; i < k; i += kThreads) m = fmaxf(m, fabsf(xr[i]));
  __shared__ float red[kThreads / 32];
  const float sc = block_row_scale(m, red);
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

// One block per row. The products are formed as rescale_kernel and silu_mul_kernel form them,
// so act is bit for bit the unfused result. x_scale may be q_scale (the GEMMs already read
// x's quantization, and this row's x_scale is read before the barrier in block_row_scale,
// its q_scale written after); act may alias gate or up (each thread reads an element before
// writing it and later re-reads only elements it wrote), hence no __restrict__ on those.
__global__ void __launch_bounds__(kThreads) silu_mul_quantize_kernel(Fp8SiluEpilogue e) {
  const int64_t row = blockIdx.x;
  const int64_t m = e.m;
  const float* gr = e.gate + row * m;
  const float* ur = e.up + row * m;
  float* ar = e.act + row * m;
  const float xs = e.x_scale[row];
  float amax = 0.0f;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) {
    // __fmul_rn: g and u rounded as the stored rescaled outputs are (no contraction into expf).
    const float g = __fmul_rn(gr[j], xs * e.gate_scale[e.gate_per_col ? j : 0]);
    const float u = __fmul_rn(ur[j], xs * e.up_scale[e.up_per_col ? j : 0]);
    const float a = g / (1.0f + expf(-g)) * u;
    ar[j] = a;
    amax = fmaxf(amax, fabsf(a));
  }
  __shared__ float red[kThreads / 32];
  const float sc = block_row_scale(amax, red);
  if (threadIdx.x == 0) e.q_scale[row] = sc;
  const float inv = 1.0f / sc;
  __nv_fp8_e4m3* qr = static_cast<__nv_fp8_e4m3*>(e.q) + row * m;
  for (int64_t j = threadIdx.x; j < m; j += kThreads) qr[j] = __nv_fp8_e4m3(ar[j] * inv);
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

cudaError_t launch_fp8_silu_mul_quantize(const Fp8SiluEpilogue& e, cudaStream_t s) {
  if (e.n <= 0 || e.m <= 0) return cudaSuccess;
  if (e.n > 0x7fffffffLL) return cudaErrorInvalidValue;
  silu_mul_quantize_kernel<<<static_cast<unsigned>(e.n), kThreads, 0, s>>>(e);
  return cudaGetLastError();
}

}  // namespace lancet::cuda
