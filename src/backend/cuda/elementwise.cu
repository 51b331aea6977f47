// Token-parallel kernels of the CUDA backend: f32 -> bf16 conversion (GEMM inputs), embedding
// gather, fused residual add + RMSNorm (optionally also quantizing its output rows to FP8 for
// the FP8 GEMMs that read it), rotary embedding, SiLU * up and row gathers. All math is f32;
// these ops are memory bound, so each is one pass (two for the norm, whose second pass
// re-reads the row from L1/L2; three with FP8) with one block per row where rows are the
// natural unit.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/kernels.h"

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
// Each thread touches the same columns in every pass, so the in-place residual update needs
// no barrier between them (and out may even alias x). kFp8: a third pass quantizes the row as
// written (re-read, so the bytes are those launch_quantize_rows_fp8 would make of out) with
// the shared rule of kernels.h (kFp8Max, kFp8MinScale, saturating conversion).
template <bool kFp8>
__global__ void rms_norm_kernel(const float* x, float* residual, const float* __restrict__ weight,
                                int64_t dim, float eps, float* out, __nv_fp8_e4m3* __restrict__ q,
                                float* __restrict__ qscale) {
  __shared__ float red[32];
  const int64_t row = blockIdx.x;
  const float* xr = x ? x + row * dim : nullptr;
  float* rr = residual ? residual + row * dim : nullptr;
  float ss = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    float v;
    if (rr) {
      v = rr[c];
      if (xr) {
        v += xr[c];
        rr[c] = v;
      }
    } else {
      v = xr[c];
    }
    ss += v * v;
  }
  const float total = block_sum(ss, red);
  const float inv = rsqrtf(total / static_cast<float>(dim) + eps);
  const float* src = rr ? rr : xr;
  float* o = out + row * dim;
  float amax = 0.0f;
  for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) {
    const float v = weight[c] * (src[c] * inv);
    o[c] = v;
    if constexpr (kFp8) amax = fmaxf(amax, fabsf(v));
  }
  if constexpr (kFp8) {
    __shared__ float red_max[32];
    const float sc = fmaxf(block_max(amax, red_max) / kFp8Max, kFp8MinScale);
    if (threadIdx.x == 0) qscale[row] = sc;
    const float qinv = 1.0f / sc;
    __nv_fp8_e4m3* qr = q + row * dim;
    for (int64_t c = threadIdx.x; c < dim; c += blockDim.x) qr[c] = __nv_fp8_e4m3(o[c] * qinv);
  }
}

int rms_norm_threads(int64_t dim) { return dim >= 4096 ? 1024 : (dim >= 1024 ? 512 : 256); }

// ---- rope: one block per token, one thread per rotated pair ----
__global__ void rope_kernel(RopeArgs a, unsigned* err) {
  const int64_t t = blockIdx.x;
  const int32_t pos = a.positions[t];
  if (pos < 0 || pos >= a.max_positions) {
    if (threadIdx.x == 0) atomicOr(err, kErrRopePosition);
    return;
  }
  const int64_t half = a.rotary_dim / 2;
  const float* cs = a.cos + static_cast<int64_t>(pos) * half;
  const float* sn = a.sin + static_cast<int64_t>(pos) * half;
  const int64_t pairs = (a.num_heads + a.num_kv_heads) * half;
  for (int64_t p = threadIdx.x; p < pairs; p += blockDim.x) {
    const int64_t head = p / half, i = p % half;
    float* v = head < a.num_heads ? a.q + (t * a.num_heads + head) * a.head_dim
                                  : a.k + (t * a.num_kv_heads + (head - a.num_heads)) * a.head_dim;
    const int64_t i0 = a.interleaved ? 2 * i : i;
    const int64_t i1 = a.interleaved ? 2 * i + 1 : i + half;
    const float x0 = v[i0], x1 = v[i1], c = cs[i], s = sn[i];
    v[i0] = x0 * c - x1 * s;
    v[i1] = x1 * c + x0 * s;
  }
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
  embedding_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(static_cast<const unsigned short*>(table), rows,
                                                                  cols, ids, out, err);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm(const RmsNormArgs& a, cudaStream_t s) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.rows > 0x7fffffffLL) return cudaErrorInvalidValue;
  rms_norm_kernel<false><<<static_cast<unsigned>(a.rows), rms_norm_threads(a.dim), 0, s>>>(
      a.x, a.residual, a.weight, a.dim, a.eps, a.out, nullptr, nullptr);
  return cudaGetLastError();
}

cudaError_t launch_rms_norm_quantize_fp8(const RmsNormArgs& a, void* q, float* scale, cudaStream_t s) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.rows > 0x7fffffffLL) return cudaErrorInvalidValue;
  rms_norm_kernel<true><<<static_cast<unsigned>(a.rows), rms_norm_threads(a.dim), 0, s>>>(
      a.x, a.residual, a.weight, a.dim, a.eps, a.out, static_cast<__nv_fp8_e4m3*>(q), scale);
  return cudaGetLastError();
}

cudaError_t launch_rope(const RopeArgs& a, unsigned* err, cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (a.num_tokens > 0x7fffffffLL) return cudaErrorInvalidValue;
  rope_kernel<<<static_cast<unsigned>(a.num_tokens), kThreads, 0, s>>>(a, err);
  return cudaGetLastError();
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
