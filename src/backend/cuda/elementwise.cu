// Token-parallel kernels of the CUDA backend: f32 -> bf16 conversion (GEMM inputs), embedding
// gather, fused residual add + RMSNorm (optionally also quantizing its output rows to FP8 for
// the FP8 GEMMs that read it), rotary embedding, SiLU * up and row gathers. All math is f32;
// these ops are memory bound, so each is one pass over its data. In decode they are short
// kernels between weight streams, so the ones on that path (embedding, norm, rope) launch with
// programmatic dependent launch (pdl.cuh), load what is constant (the norm's gain) before
// waiting on the previous kernel, and keep their dependent round trips to global memory few:
// the norm holds its row in registers, rope gives each rotated pair its own thread.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace lancet::cuda {
namespace {

constexpr int kThreads = 256;

inline unsigned grid_for(int64_t n, int per_block) {
  int64_t g = (n + per_block - 1) / per_block;
  if (g > 65535LL * 32) g = 65535LL * 32;  // grid-stride loops cover the rest
  return static_cast<unsigned>(g < 1 ? 1 : g);
}

__device__ __forceinline__ float bf16_bits_to_f32(unsigned short h) {
  return __uint_as_float(static_cast<unsigned>(h) << 16);
}

// ---- f32 -> bf16 ----
__global__ void f32_to_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ y, int64_t n) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride)
    y[i] = __float2bfloat16_rn(x[i]);
}

// Four at a time when both pointers allow 16 / 8-byte accesses and n % 4 == 0.
__global__ void f32_to_bf16_vec4_kernel(const float4* __restrict__ x, __nv_bfloat162* __restrict__ y,
                                        int64_t n4) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n4; i += stride) {
    const float4 v = x[i];
    y[2 * i] = __floats2bfloat162_rn(v.x, v.y);
    y[2 * i + 1] = __floats2bfloat162_rn(v.z, v.w);
  }
}

// ---- embedding: one block per token ----
__global__ void embedding_kernel(const unsigned short* __restrict__ table, int64_t rows, int64_t cols,
                                 const int32_t* __restrict__ ids, float* __restrict__ out, unsigned* err) {
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int32_t id = ids[t];
  float* o = out + t * cols;
  if (id < 0 || id >= rows) {
    if (threadIdx.x == 0) atomicOr(err, kErrEmbeddingId);
    for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = 0.0f;
    return;
  }
  const unsigned short* r = table + static_cast<int64_t>(id) * cols;
  for (int64_t c = threadIdx.x; c < cols; c += blockDim.x) o[c] = bf16_bits_to_f32(r[c]);
}

// ---- block-wide sum ----
__device__ float block_sum(float v, float* shared /*[32]*/) {
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xffffffffu, v, off);
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) / 32;
  float total = 0.0f;
  if (threadIdx.x < 32) {
    total = threadIdx.x < nwarps ? shared[threadIdx.x] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) total += __shfl_xor_sync(0xffffffffu, total, off);
    if (threadIdx.x == 0) shared[0] = total;
  }
  __syncthreads();
  total = shared[0];
  return total;
}

// ---- block-wide max, as block_sum (its own shared array: block_sum's readers of shared[0]
// may still be reading when the first warp writes here) ----
__device__ float block_max(float v, float* shared /*[32]*/) {
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, off));
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  const int nwarps = (blockDim.x + 31) / 32;
  float m = 0.0f;
  if (threadIdx.x < 32) {
    m = threadIdx.x < nwarps ? shared[threadIdx.x] : 0.0f;
    for (int off = 16; off > 0; off >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, off));
    if (threadIdx.x == 0) shared[0] = m;
  }
  __syncthreads();
  return shared[0];
}

// ---- fused residual add + RMSNorm: one block per row ----
// Thread i owns columns i, i + blockDim, ... (at most kPer of them, held in registers), so the
// in-place residual update needs no barrier and out may alias x; the gain is loaded before the
// wait. kFp8: the row as written is also quantized with the shared rule of kernels.h (kFp8Max,
// kFp8MinScale, saturating conversion), the bytes launch_quantize_rows_fp8 would make of out.
constexpr int kNormMaxThreads = 1024;

template <bool kFp8, int kNormPer>
__global__ void __launch_bounds__(kNormMaxThreads)
    rms_norm_kernel(const float* x, float* residual, const float* __restrict__ weight, int64_t dim, float eps,
                    float* out, __nv_fp8_e4m3* __restrict__ q, float* __restrict__ qscale) {
  __shared__ float red[32];
  float g[kNormPer], v[kNormPer];
#pragma unroll
  for (int i = 0; i < kNormPer; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    g[i] = c < dim ? weight[c] : 0.0f;
  }
  pdl_wait();
  const int64_t row = blockIdx.x;
  const float* xr = x ? x + row * dim : nullptr;
  float* rr = residual ? residual + row * dim : nullptr;
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormPer; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    v[i] = 0.0f;
    if (c >= dim) continue;
    if (rr) {
      v[i] = rr[c];
      if (xr) {
        v[i] += xr[c];
        rr[c] = v[i];
      }
    } else {
      v[i] = xr[c];
    }
    ss += v[i] * v[i];
  }
  const float total = block_sum(ss, red);
  const float inv = rsqrtf(total / static_cast<float>(dim) + eps);
  float* o = out + row * dim;
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kNormPer; ++i) {
    const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
    v[i] = g[i] * (v[i] * inv);
    if (c < dim) o[c] = v[i];
    if constexpr (kFp8) amax = fmaxf(amax, fabsf(v[i]));
  }
  if constexpr (kFp8) {
    __shared__ float red_max[32];
    const float sc = fmaxf(block_max(amax, red_max) / kFp8Max, kFp8MinScale);
    if (threadIdx.x == 0) qscale[row] = sc;
    const float qinv = 1.0f / sc;
    __nv_fp8_e4m3* qr = q + row * dim;
#pragma unroll
    for (int i = 0; i < kNormPer; ++i) {
      const int64_t c = threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
      if (c < dim) qr[c] = __nv_fp8_e4m3(v[i] * qinv);
    }
  }
}

int rms_norm_threads(int64_t dim) { return dim >= 4096 ? kNormMaxThreads : (dim >= 1024 ? 512 : 256); }

// Columns per thread as an instantiated kNormPer (4, 8 or 16): rows of up to 16K columns.
template <bool kFp8>
cudaError_t launch_norm(const RmsNormArgs& a, void* q, float* scale, cudaStream_t s) {
  const int threads = rms_norm_threads(a.dim);
  const int64_t per = (a.dim + threads - 1) / threads;
  const dim3 grid(static_cast<unsigned>(a.rows));
  auto* qq = static_cast<__nv_fp8_e4m3*>(q);
  if (per <= 4)
    return launch_pdl(rms_norm_kernel<kFp8, 4>, grid, dim3(threads), 0, s, a.x, a.residual, a.weight, a.dim, a.eps,
                      a.out, qq, scale);
  if (per <= 8)
    return launch_pdl(rms_norm_kernel<kFp8, 8>, grid, dim3(threads), 0, s, a.x, a.residual, a.weight, a.dim, a.eps,
                      a.out, qq, scale);
  if (per <= 16)
    return launch_pdl(rms_norm_kernel<kFp8, 16>, grid, dim3(threads), 0, s, a.x, a.residual, a.weight, a.dim, a.eps,
                      a.out, qq, scale);
  return cudaErrorInvalidValue;
}

// ---- rope: one thread per rotated pair; grid (token, pair chunk) ----
__global__ void rope_kernel(RopeArgs a, unsigned* err) {
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int64_t half = a.rotary_dim / 2;
  const int64_t p = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  if (p >= (a.num_heads + a.num_kv_heads) * half) return;
  const int32_t pos = a.positions[t];
  if (pos < 0 || pos >= a.max_positions) {
    if (p == 0) atomicOr(err, kErrRopePosition);
    return;
  }
  const int64_t head = p / half, i = p % half;
  float* v = head < a.num_heads ? a.q + (t * a.num_heads + head) * a.head_dim
                                : a.k + (t * a.num_kv_heads + (head - a.num_heads)) * a.head_dim;
  const int64_t i0 = a.interleaved ? 2 * i : i;
  const int64_t i1 = a.interleaved ? 2 * i + 1 : i + half;
  const float c = a.cos[static_cast<int64_t>(pos) * half + i], sn = a.sin[static_cast<int64_t>(pos) * half + i];
  const float x0 = v[i0], x1 = v[i1];
  v[i0] = x0 * c - x1 * sn;
  v[i1] = x1 * c + x0 * sn;
}

// ---- silu(gate) * up ----
__global__ void silu_mul_kernel(const float* __restrict__ g, const float* __restrict__ u, int64_t n,
                                float* __restrict__ out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += stride) {
    const float x = g[i];
    out[i] = x / (1.0f + expf(-x)) * u[i];
  }
}

// ---- row gather: one block per output row ----
__global__ void gather_rows_kernel(const float* __restrict__ x, int64_t n, int64_t d,
                                   const int32_t* __restrict__ rows, float* __restrict__ out, unsigned* err) {
  const int64_t r = blockIdx.x;
  const int32_t src = rows[r];
  float* o = out + r * d;
  if (src < 0 || src >= n) {
    if (threadIdx.x == 0) atomicOr(err, kErrGatherRow);
    for (int64_t c = threadIdx.x; c < d; c += blockDim.x) o[c] = 0.0f;
    return;
  }
  const float* xr = x + static_cast<int64_t>(src) * d;
  for (int64_t c = threadIdx.x; c < d; c += blockDim.x) o[c] = xr[c];
}

// x = hi + lo to about 16 mantissa bits (lo is the bf16 rounding of the remainder).
__global__ void split_bf16_kernel(const float* __restrict__ x, __nv_bfloat16* __restrict__ hi,
                                  __nv_bfloat16* __restrict__ lo, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const float v = x[i];
    const __nv_bfloat16 h = __float2bfloat16_rn(v);
    hi[i] = h;
    lo[i] = __float2bfloat16_rn(v - __bfloat162float(h));
  }
}

}  // namespace

cudaError_t launch_split_bf16(const float* x, void* hi, void* lo, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  split_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, static_cast<__nv_bfloat16*>(hi),
                                                               static_cast<__nv_bfloat16*>(lo), n);
  return cudaGetLastError();
}

cudaError_t launch_f32_to_bf16(const float* x, void* y, int64_t n, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  const bool vec = n % 4 == 0 && reinterpret_cast<uintptr_t>(x) % 16 == 0 &&
                   reinterpret_cast<uintptr_t>(y) % 8 == 0;
  if (vec) {
    f32_to_bf16_vec4_kernel<<<grid_for(n / 4, kThreads), kThreads, 0, s>>>(
        reinterpret_cast<const float4*>(x), static_cast<__nv_bfloat162*>(y), n / 4);
  } else {
    f32_to_bf16_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(x, static_cast<__nv_bfloat16*>(y), n);
  }
  return cudaGetLastError();
}

cudaError_t launch_embedding_bf16(const void* table, int64_t rows, int64_t cols, const int32_t* ids, int64_t n,
                                  float* out, unsigned* err, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (n > 0x7fffffffLL) return cudaErrorInvalidValue;
  return launch_pdl(embedding_kernel, dim3(static_cast<unsigned>(n)), dim3(kThreads), 0, s,
                    static_cast<const unsigned short*>(table), rows, cols, ids, out, err);
}

cudaError_t launch_rms_norm(const RmsNormArgs& a, cudaStream_t s) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.rows > 0x7fffffffLL) return cudaErrorInvalidValue;
  return launch_norm<false>(a, nullptr, nullptr, s);
}

cudaError_t launch_rms_norm_quantize_fp8(const RmsNormArgs& a, void* q, float* scale, cudaStream_t s) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.rows > 0x7fffffffLL) return cudaErrorInvalidValue;
  return launch_norm<true>(a, q, scale, s);
}

cudaError_t launch_rope(const RopeArgs& a, unsigned* err, cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (a.num_tokens > 0x7fffffffLL) return cudaErrorInvalidValue;
  const int64_t pairs = (a.num_heads + a.num_kv_heads) * (a.rotary_dim / 2);
  if (pairs <= 0) return cudaSuccess;
  const int threads = 128;
  const int64_t chunks = (pairs + threads - 1) / threads;
  if (chunks > 65535) return cudaErrorInvalidValue;
  return launch_pdl(rope_kernel, dim3(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(chunks)),
                    dim3(threads), 0, s, a, err);
}

cudaError_t launch_silu_mul(const float* gate, const float* up, int64_t n, float* out, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  silu_mul_kernel<<<grid_for(n, kThreads), kThreads, 0, s>>>(gate, up, n, out);
  return cudaGetLastError();
}

cudaError_t launch_gather_rows(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r, float* out,
                               unsigned* err, cudaStream_t s) {
  if (r <= 0) return cudaSuccess;
  if (r > 0x7fffffffLL) return cudaErrorInvalidValue;
  gather_rows_kernel<<<static_cast<unsigned>(r), kThreads, 0, s>>>(x, n, d, rows, out, err);
  return cudaGetLastError();
}

}  // namespace lancet::cuda
