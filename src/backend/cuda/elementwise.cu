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

#include "backend/cuda/fp8_pack.cuh"
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
// Each thread owns kPer columns of the row, held in registers, so the in-place residual update
// needs no barrier and out may alias x; the gain is loaded before the wait. kVec (dim % 4 == 0,
// x, residual, weight and out 16-byte aligned): the thread's columns are kPer / 4 runs of four,
// read and written as float4; otherwise columns i, i + blockDim, ... one at a time. The sums, and
// so the bits of out, depend only on (dim, kVec), never on kOut. kOut also writes the row as a
// GEMM input: kNormFp8 quantized with the shared rule of kernels.h (kFp8Max, kFp8MinScale,
// saturating conversion: the bytes launch_quantize_rows_fp8 would make of out, with the row's
// scale in qscale), kNormBf16 rounded to BF16 (what launch_f32_to_bf16 would make of out).
constexpr int kNormMaxThreads = 1024;
enum NormOut : int { kNormF32 = 0, kNormFp8 = 1, kNormBf16 = 2 };

template <int kOut, int kPer, bool kVec>
__global__ void __launch_bounds__(kNormMaxThreads)
    rms_norm_kernel(const float* x, float* residual, const float* __restrict__ weight, int64_t dim, float eps,
                    float* out, void* __restrict__ q, float* __restrict__ qscale) {
  static_assert(!kVec || kPer % 4 == 0, "vector rows take runs of four columns");
  __shared__ float red[32];
  float g[kPer], v[kPer];
  // Column of this thread's value i.
  auto col = [](int i) -> int64_t {
    return kVec ? 4 * (threadIdx.x + static_cast<int64_t>(i / 4) * blockDim.x) + i % 4
                : threadIdx.x + static_cast<int64_t>(i) * blockDim.x;
  };
  constexpr int kStep = kVec ? 4 : 1;
#pragma unroll
  for (int i = 0; i < kPer; i += kStep) {
    const int64_t c = col(i);
    if constexpr (kVec) {
      const float4 w = c < dim ? *reinterpret_cast<const float4*>(weight + c) : make_float4(0.f, 0.f, 0.f, 0.f);
      g[i] = w.x, g[i + 1] = w.y, g[i + 2] = w.z, g[i + 3] = w.w;
    } else {
      g[i] = c < dim ? weight[c] : 0.0f;
    }
  }
  pdl_wait();
  pdl_release_if_small();
  const int64_t row = blockIdx.x;
  const float* xr = x ? x + row * dim : nullptr;
  float* rr = residual ? residual + row * dim : nullptr;
  float ss = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; i += kStep) {
    const int64_t c = col(i);
#pragma unroll
    for (int j = 0; j < kStep; ++j) v[i + j] = 0.0f;
    if (c >= dim) continue;
    if constexpr (kVec) {
      float4 a = rr ? *reinterpret_cast<const float4*>(rr + c) : *reinterpret_cast<const float4*>(xr + c);
      if (rr && xr) {
        const float4 b = *reinterpret_cast<const float4*>(xr + c);
        a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
        *reinterpret_cast<float4*>(rr + c) = a;
      }
      v[i] = a.x, v[i + 1] = a.y, v[i + 2] = a.z, v[i + 3] = a.w;
    } else {
      if (rr) {
        v[i] = rr[c];
        if (xr) {
          v[i] += xr[c];
          rr[c] = v[i];
        }
      } else {
        v[i] = xr[c];
      }
    }
#pragma unroll
    for (int j = 0; j < kStep; ++j) ss += v[i + j] * v[i + j];
  }
  const float total = block_sum(ss, red);
  const float inv = rsqrtf(total / static_cast<float>(dim) + eps);
  float* o = out + row * dim;
  float amax = 0.0f;
#pragma unroll
  for (int i = 0; i < kPer; ++i) {
    v[i] = g[i] * (v[i] * inv);
    if constexpr (kOut == kNormFp8) amax = fmaxf(amax, fabsf(v[i]));
  }
#pragma unroll
  for (int i = 0; i < kPer; i += kStep) {
    const int64_t c = col(i);
    if (c >= dim) continue;
    if constexpr (kVec) {
      *reinterpret_cast<float4*>(o + c) = make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]);
      if constexpr (kOut == kNormBf16) {
        const __nv_bfloat162 lo = __floats2bfloat162_rn(v[i], v[i + 1]), hi = __floats2bfloat162_rn(v[i + 2], v[i + 3]);
        uint2 packed;
        packed.x = *reinterpret_cast<const uint32_t*>(&lo);
        packed.y = *reinterpret_cast<const uint32_t*>(&hi);
        *reinterpret_cast<uint2*>(static_cast<__nv_bfloat16*>(q) + row * dim + c) = packed;
      }
    } else {
      o[c] = v[i];
      if constexpr (kOut == kNormBf16) static_cast<__nv_bfloat16*>(q)[row * dim + c] = __float2bfloat16_rn(v[i]);
    }
  }
  if constexpr (kOut == kNormFp8) {
    __shared__ float red_max[32];
    const float sc = fmaxf(block_max(amax, red_max) / kFp8Max, kFp8MinScale);
    if (threadIdx.x == 0) qscale[row] = sc;
    const float qinv = 1.0f / sc;
    __nv_fp8_e4m3* qr = static_cast<__nv_fp8_e4m3*>(q) + row * dim;
#pragma unroll
    for (int i = 0; i < kPer; i += kStep) {
      const int64_t c = col(i);
      if (c >= dim) continue;
      if constexpr (kVec)
        *reinterpret_cast<uint32_t*>(qr + c) = fp8x4(make_float4(v[i], v[i + 1], v[i + 2], v[i + 3]), qinv);
      else
        qr[c] = __nv_fp8_e4m3(v[i] * qinv);
    }
  }
}

int rms_norm_threads(int64_t dim) { return dim >= 4096 ? kNormMaxThreads : (dim >= 1024 ? 512 : 256); }

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

template <int kOut, bool kVec>
cudaError_t launch_norm_per(const RmsNormArgs& a, int64_t per, int threads, void* q, float* scale, cudaStream_t s) {
  const dim3 grid(static_cast<unsigned>(a.rows));
  if (per <= 4)
    return launch_pdl(rms_norm_kernel<kOut, 4, kVec>, grid, dim3(threads), 0, s, a.x, a.residual, a.weight, a.dim,
                      a.eps, a.out, q, scale);
  if (per <= 8)
    return launch_pdl(rms_norm_kernel<kOut, 8, kVec>, grid, dim3(threads), 0, s, a.x, a.residual, a.weight, a.dim,
                      a.eps, a.out, q, scale);
  if (per <= 16)
    return launch_pdl(rms_norm_kernel<kOut, 16, kVec>, grid, dim3(threads), 0, s, a.x, a.residual, a.weight, a.dim,
                      a.eps, a.out, q, scale);
  return cudaErrorInvalidValue;
}

// Columns per thread as an instantiated kPer (4, 8 or 16): rows of up to 16K columns.
template <int kOut>
cudaError_t launch_norm(const RmsNormArgs& a, void* q, float* scale, cudaStream_t s) {
  if (a.rows <= 0) return cudaSuccess;
  if (a.rows > 0x7fffffffLL) return cudaErrorInvalidValue;
  const int threads = rms_norm_threads(a.dim);
  const bool vec = a.dim % 4 == 0 && (!a.x || aligned16(a.x)) && (!a.residual || aligned16(a.residual)) &&
                   aligned16(a.weight) && aligned16(a.out);
  if (vec) return launch_norm_per<kOut, true>(a, 4 * ((a.dim / 4 + threads - 1) / threads), threads, q, scale, s);
  return launch_norm_per<kOut, false>(a, (a.dim + threads - 1) / threads, threads, q, scale, s);
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

// ---- silu(gate) * up from BF16 GEMM outputs, act also written as the next GEMM's BF16 input ----
// kVec: n % 8 == 0 and every pointer 16-byte aligned (eight values per load). Each value is
// what silu_mul_kernel computes from the same (bf16-valued) inputs.
template <bool kVec>
__global__ void silu_mul_bf16_kernel(const __nv_bfloat16* __restrict__ g, const __nv_bfloat16* __restrict__ u,
                                     int64_t n, float* __restrict__ out, __nv_bfloat16* __restrict__ out_bf16) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVec) {
    for (int64_t i = first; i < n / 8; i += stride) {
      const uint4 gv = reinterpret_cast<const uint4*>(g)[i], uv = reinterpret_cast<const uint4*>(u)[i];
      const auto* g2 = reinterpret_cast<const __nv_bfloat162*>(&gv);
      const auto* u2 = reinterpret_cast<const __nv_bfloat162*>(&uv);
      float a[8];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float2 gf = __bfloat1622float2(g2[j]), uf = __bfloat1622float2(u2[j]);
        a[2 * j] = gf.x / (1.0f + expf(-gf.x)) * uf.x;
        a[2 * j + 1] = gf.y / (1.0f + expf(-gf.y)) * uf.y;
      }
      float4* o4 = reinterpret_cast<float4*>(out) + 2 * i;
      o4[0] = make_float4(a[0], a[1], a[2], a[3]);
      o4[1] = make_float4(a[4], a[5], a[6], a[7]);
      uint4 packed;
      uint32_t* pw = reinterpret_cast<uint32_t*>(&packed);
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const __nv_bfloat162 b = __floats2bfloat162_rn(a[2 * j], a[2 * j + 1]);
        pw[j] = *reinterpret_cast<const uint32_t*>(&b);
      }
      reinterpret_cast<uint4*>(out_bf16)[i] = packed;
    }
  } else {
    for (int64_t i = first; i < n; i += stride) {
      const float x = __bfloat162float(g[i]);
      const float a = x / (1.0f + expf(-x)) * __bfloat162float(u[i]);
      out[i] = a;
      out_bf16[i] = __float2bfloat16_rn(a);
    }
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
  return launch_norm<kNormF32>(a, nullptr, nullptr, s);
}

cudaError_t launch_rms_norm_quantize_fp8(const RmsNormArgs& a, void* q, float* scale, cudaStream_t s) {
  return launch_norm<kNormFp8>(a, q, scale, s);
}

cudaError_t launch_rms_norm_bf16(const RmsNormArgs& a, void* y, cudaStream_t s) {
  return launch_norm<kNormBf16>(a, y, nullptr, s);
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

cudaError_t launch_silu_mul_bf16(const void* gate, const void* up, int64_t n, float* out, void* out_bf16,
                                 cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  const auto* g = static_cast<const __nv_bfloat16*>(gate);
  const auto* u = static_cast<const __nv_bfloat16*>(up);
  auto* ob = static_cast<__nv_bfloat16*>(out_bf16);
  if (n % 8 == 0 && aligned16(gate) && aligned16(up) && aligned16(out) && aligned16(out_bf16))
    silu_mul_bf16_kernel<true><<<grid_for(n / 8, kThreads), kThreads, 0, s>>>(g, u, n, out, ob);
  else
    silu_mul_bf16_kernel<false><<<grid_for(n, kThreads), kThreads, 0, s>>>(g, u, n, out, ob);
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
