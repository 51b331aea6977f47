// FP8 activations for the FP8 GEMM path: per-token (per-row) dynamic quantization of the GEMM
// input, the epilogue that applies the activation and weight scales to the f32 result (the
// fallback for cuBLASLt libraries without outer-vector scaling), and
// the gate/up epilogue that also does SiLU * up and quantizes the result for the down
// projection (one pass over the two GEMM outputs instead of three plus a quantization pass).
#include <cuda_fp8.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/fp8_pack.cuh"
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

__device__ __forceinline__ float abs_max4(float m, float4 v) {
  return fmaxf(fmaxf(m, fmaxf(fabsf(v.x), fabsf(v.y))), fmaxf(fabsf(v.z), fabsf(v.w)));
}

// One block per row: the row's absmax, then the row again (from L2) quantized. kVec: k % 4 == 0
// and x 16-byte aligned, so rows are read as float4 and written 4 codes at a time.
template <bool kVec>
__global__ void __launch_bounds__(kThreads) quantize_rows_kernel(const float* __restrict__ x, int64_t k,
                                                                 __nv_fp8_e4m3* __restrict__ q,
                                                                 float* __restrict__ scale) {
  const int64_t row = blockIdx.x;
  const float* xr = x + row * k;
  __nv_fp8_e4m3* qr = q + row * k;
  __shared__ float red[kThreads / 32];
  float m = 0.0f;
  if constexpr (kVec) {
    const float4* x4 = reinterpret_cast<const float4*>(xr);
    const int64_t k4 = k / 4;
    for (int64_t i = threadIdx.x; i < k4; i += kThreads) m = abs_max4(m, x4[i]);
    const float sc = block_row_scale(m, red);
    if (threadIdx.x == 0) scale[row] = sc;
    const float inv = 1.0f / sc;
    uint32_t* q4 = reinterpret_cast<uint32_t*>(qr);
    for (int64_t i = threadIdx.x; i < k4; i += kThreads) q4[i] = fp8x4(x4[i], inv);
  } else {
    for (int64_t i = threadIdx.x; i < k; i += kThreads) m = fmaxf(m, fabsf(xr[i]));
    const float sc = block_row_scale(m, red);
    if (threadIdx.x == 0) scale[row] = sc;
    const float inv = 1.0f / sc;
    // The conversion saturates (__NV_SATFINITE), so rounding past 448 stays finite.
    for (int64_t i = threadIdx.x; i < k; i += kThreads) qr[i] = __nv_fp8_e4m3(xr[i] * inv);
  }
}

// y[r, c] *= rs[r] * cs[c or 0]: a 2-D grid (x over columns, y over rows), no per-element
// division.
__global__ void rescale_kernel(float* __restrict__ y, int64_t n, int64_t m, const float* __restrict__ rs,
                               const float* __restrict__ cs, bool per_col) {
  for (int64_t r = blockIdx.y; r < n; r += gridDim.y) {
    const float s = rs[r];
    float* yr = y + r * m;
    for (int64_t c = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; c < m;
         c += static_cast<int64_t>(gridDim.x) * blockDim.x)
      yr[c] *= s * cs[per_col ? c : 0];
  }
}

// act = silu(g) * u for one element as silu_mul_kernel forms it; with kScaled, g and u first
// rescaled as rescale_kernel rescales them (__fmul_rn: rounded as the stored rescaled outputs
// are, no contraction into expf).
template <bool kScaled>
__device__ __forceinline__ float silu_mul_scaled(float g, float u, float xs, float gs, float us) {
  if constexpr (kScaled) {
    g = __fmul_rn(g, xs * gs);
    u = __fmul_rn(u, xs * us);
  }
  return g / (1.0f + expf(-g)) * u;
}

// One block per row. The products are formed as rescale_kernel (kScaled: the GEMMs left their
// outputs unscaled) and silu_mul_kernel form them, so act is bit for bit the unfused result
// (two matmuls, then silu_mul). x_scale may be q_scale (the GEMMs already read
// x's quantization, and this row's x_scale is read before the barrier in block_row_scale,
// its q_scale written after); act may alias gate or up (each thread reads its elements before
// writing them and later re-reads only elements it wrote), hence no __restrict__ on those.
// kVec: m % 4 == 0 and gate, up, act 16-byte aligned (float4 accesses, 4 codes per store).
template <bool kVec, bool kScaled>
__global__ void __launch_bounds__(kThreads) silu_mul_quantize_kernel(Fp8SiluEpilogue e) {
  const int64_t row = blockIdx.x;
  const int64_t m = e.m;
  const float* gr = e.gate + row * m;
  const float* ur = e.up + row * m;
  float* ar = e.act + row * m;
  const float xs = kScaled ? e.x_scale[row] : 1.0f;
  auto gscale = [&](int64_t j) { return kScaled ? e.gate_scale[e.gate_per_col ? j : 0] : 1.0f; };
  auto uscale = [&](int64_t j) { return kScaled ? e.up_scale[e.up_per_col ? j : 0] : 1.0f; };
  float amax = 0.0f;
  __shared__ float red[kThreads / 32];
  __nv_fp8_e4m3* qr = static_cast<__nv_fp8_e4m3*>(e.q) + row * m;
  if constexpr (kVec) {
    const int64_t m4 = m / 4;
    for (int64_t i = threadIdx.x; i < m4; i += kThreads) {
      const float4 g = reinterpret_cast<const float4*>(gr)[i], u = reinterpret_cast<const float4*>(ur)[i];
      const int64_t j = 4 * i;
      float4 a;
      a.x = silu_mul_scaled<kScaled>(g.x, u.x, xs, gscale(j), uscale(j));
      a.y = silu_mul_scaled<kScaled>(g.y, u.y, xs, gscale(j + 1), uscale(j + 1));
      a.z = silu_mul_scaled<kScaled>(g.z, u.z, xs, gscale(j + 2), uscale(j + 2));
      a.w = silu_mul_scaled<kScaled>(g.w, u.w, xs, gscale(j + 3), uscale(j + 3));
      reinterpret_cast<float4*>(ar)[i] = a;
      amax = abs_max4(amax, a);
    }
    const float sc = block_row_scale(amax, red);
    if (threadIdx.x == 0) e.q_scale[row] = sc;
    const float inv = 1.0f / sc;
    for (int64_t i = threadIdx.x; i < m4; i += kThreads)
      reinterpret_cast<uint32_t*>(qr)[i] = fp8x4(reinterpret_cast<const float4*>(ar)[i], inv);
  } else {
    for (int64_t j = threadIdx.x; j < m; j += kThreads) {
      const float a = silu_mul_scaled<kScaled>(gr[j], ur[j], xs, gscale(j), uscale(j));
      ar[j] = a;
      amax = fmaxf(amax, fabsf(a));
    }
    const float sc = block_row_scale(amax, red);
    if (threadIdx.x == 0) e.q_scale[row] = sc;
    const float inv = 1.0f / sc;
    for (int64_t j = threadIdx.x; j < m; j += kThreads) qr[j] = __nv_fp8_e4m3(ar[j] * inv);
  }
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

cudaError_t launch_quantize_rows_fp8(const float* x, int64_t n, int64_t k, void* q, float* scale, cudaStream_t s) {
  if (n <= 0 || k <= 0) return cudaSuccess;
  auto* q8 = static_cast<__nv_fp8_e4m3*>(q);
  if (k % 4 == 0 && aligned16(x) && reinterpret_cast<uintptr_t>(q) % 4 == 0)
    quantize_rows_kernel<true><<<static_cast<unsigned>(n), kThreads, 0, s>>>(x, k, q8, scale);
  else
    quantize_rows_kernel<false><<<static_cast<unsigned>(n), kThreads, 0, s>>>(x, k, q8, scale);
  return cudaGetLastError();
}

cudaError_t launch_rescale_fp8_output(float* y, int64_t n, int64_t m, const float* row_scale, const float* col_scale,
                                      bool per_col, cudaStream_t s) {
  if (n <= 0 || m <= 0) return cudaSuccess;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>((m + 255) / 256, 64)),
                  static_cast<unsigned>(std::min<int64_t>(n, 65535)));
  rescale_kernel<<<grid, 256, 0, s>>>(y, n, m, row_scale, col_scale, per_col);
  return cudaGetLastError();
}

cudaError_t launch_fp8_silu_mul_quantize(const Fp8SiluEpilogue& e, cudaStream_t s) {
  if (e.n <= 0 || e.m <= 0) return cudaSuccess;
  if (e.n > 0x7fffffffLL) return cudaErrorInvalidValue;
  const bool vec = e.m % 4 == 0 && aligned16(e.gate) && aligned16(e.up) && aligned16(e.act) &&
                   reinterpret_cast<uintptr_t>(e.q) % 4 == 0;
  const unsigned blocks = static_cast<unsigned>(e.n);
  if (e.x_scale) {
    if (vec) silu_mul_quantize_kernel<true, true><<<blocks, kThreads, 0, s>>>(e);
    else silu_mul_quantize_kernel<false, true><<<blocks, kThreads, 0, s>>>(e);
  } else {
    if (vec) silu_mul_quantize_kernel<true, false><<<blocks, kThreads, 0, s>>>(e);
    else silu_mul_quantize_kernel<false, false><<<blocks, kThreads, 0, s>>>(e);
  }
  return cudaGetLastError();
}

}  // namespace lancet::cuda
