// Varlen paged attention (prefill chunks and decode in one launch) with online softmax over the
// paged KV cache, f32 accumulation, GQA, head_dim 64 and 128, f32 or bf16 cache.
//
// Work split: one CTA per (query token, KV head, chunk of up to G query heads of that KV head,
// context split). The G query heads share every K/V load. Inside the CTA, each warp walks keys
// 4 at a time: 8 lanes per key, each lane owning D/8 contiguous dims (16-byte loads), a
// 3-step shuffle reduction gives the score. Each 8-lane group keeps its own running max / sum /
// accumulator; groups are merged with shuffles, warps through shared memory.
//
// Flash decoding: with few CTAs (small decode batches) the context is cut into num_splits
// ranges; each CTA writes its unnormalized accumulator with its max and sum, and a reduction
// kernel rescales and combines them. The query token finds its sequence by binary search over
// query_start, so the launch needs no host copy of the step's metadata.
// This is the correct-first kernel (CUDA cores); a tensor-core prefill kernel replaces it later.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>

#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kKeysPerWarp = 4;  // 8 lanes per key
constexpr int kKeysPerIter = kWarps * kKeysPerWarp;

struct AttnParams {
  const float* q;             // [num_tokens, num_heads, D]
  float* out;                 // [num_tokens, num_heads, D]
  const int32_t* query_start; // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  const void* k_cache;        // [num_blocks, block_size, num_kv_heads, D]
  const void* v_cache;
  float* partial;             // [num_tokens, num_heads, num_splits, D + 2]
  unsigned* err;
  int64_t num_blocks;
  int num_seqs, num_heads, num_kv_heads, group, head_chunks, max_blocks_per_seq, block_size;
  int num_splits, split_len;
  float scale;    // softmax scale times the K cache scale
  float v_scale;  // the V cache scale (1 unless fp8)
};

// N contiguous values -> f32 registers (N % 4 == 0 for f32, N % 8 == 0 for bf16).
template <int N>
__device__ __forceinline__ void load_row(const float* p, float (&dst)[N]) {
#pragma unroll
  for (int i = 0; i < N / 4; ++i) {
    const float4 v = reinterpret_cast<const float4*>(p)[i];
    dst[4 * i] = v.x;
    dst[4 * i + 1] = v.y;
    dst[4 * i + 2] = v.z;
    dst[4 * i + 3] = v.w;
  }
}

__device__ __forceinline__ void unpack_bf16x2(unsigned w, float& lo, float& hi) {
  lo = __uint_as_float(w << 16);
  hi = __uint_as_float(w & 0xffff0000u);
}

template <int N>
__device__ __forceinline__ void load_row(const __nv_bfloat16* p, float (&dst)[N]) {
#pragma unroll
  for (int i = 0; i < N / 8; ++i) {
    const uint4 v = reinterpret_cast<const uint4*>(p)[i];
    unpack_bf16x2(v.x, dst[8 * i], dst[8 * i + 1]);
    unpack_bf16x2(v.y, dst[8 * i + 2], dst[8 * i + 3]);
    unpack_bf16x2(v.z, dst[8 * i + 4], dst[8 * i + 5]);
    unpack_bf16x2(v.w, dst[8 * i + 6], dst[8 * i + 7]);
  }
}

// FP8 E4M3 (the cache's scales are applied outside: K's folded into the query scale, V's at
// the output), N % 8 == 0: 8-byte loads.
template <int N>
__device__ __forceinline__ void load_row(const __nv_fp8_e4m3* p, float (&dst)[N]) {
#pragma unroll
  for (int i = 0; i < N / 8; ++i) {
    const uint2 v = reinterpret_cast<const uint2*>(p)[i];
    const unsigned u[2] = {v.x, v.y};
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[h] & 0xffff), __NV_E4M3);
      const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[h] >> 16), __NV_E4M3);
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
      const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
      dst[8 * i + 4 * h] = a.x;
      dst[8 * i + 4 * h + 1] = a.y;
      dst[8 * i + 4 * h + 2] = b.x;
      dst[8 * i + 4 * h + 3] = b.y;
    }
  }
}

template <int D, int G, typename KV>
__global__ void __launch_bounds__(kThreads) paged_attention_kernel(AttnParams p) {
  constexpr int E = D / 8;  // dims per lane
  __shared__ float s_acc[kWarps][G][D];
  __shared__ float s_m[kWarps][G];
  __shared__ float s_l[kWarps][G];

  const int t = blockIdx.x;
  const int kvh = blockIdx.y / p.head_chunks;
  const int g0 = (blockIdx.y % p.head_chunks) * G;
  const int nh = min(G, p.group - g0);
  const int h0 = kvh * p.group + g0;  // first query head of this CTA
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / 8, j = lane % 8;

  // The sequence owning query row t: the last s with query_start[s] <= t.
  int lo = 0, hi = p.num_seqs;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (p.query_start[mid] <= t) lo = mid; else hi = mid;
  }
  const int s = lo;
  const int qs = p.query_start[s], qe = p.query_start[s + 1];
  const int ctx = p.context_lens[s];
  const bool shape_ok = t >= qs && t < qe && ctx >= qe - qs &&
                        static_cast<int64_t>(ctx) <= static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size;
  if (!shape_ok && threadIdx.x == 0) atomicOr(p.err, kErrSeqShape);
  const int n_keys = shape_ok ? ctx - (qe - qs) + (t - qs) + 1 : 0;  // causal: keys 0..position
  int kb = 0, ke = n_keys;
  if (p.num_splits > 1) {
    kb = min(split * p.split_len, n_keys);
    ke = min(kb + p.split_len, n_keys);
  }

  float q[G][E];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < nh) {
      load_row<E>(p.q + (static_cast<int64_t>(t) * p.num_heads + h0 + g) * D + j * E, q[g]);
#pragma unroll
      for (int e = 0; e < E; ++e) q[g][e] *= p.scale;
    } else {
#pragma unroll
      for (int e = 0; e < E; ++e) q[g][e] = 0.0f;
    }
  }
  float m[G], l[G], acc[G][E];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    m[g] = -INFINITY;
    l[g] = 0.0f;
#pragma unroll
    for (int e = 0; e < E; ++e) acc[g][e] = 0.0f;
  }

  const KV* kc = static_cast<const KV*>(p.k_cache);
  const KV* vc = static_cast<const KV*>(p.v_cache);
  const int32_t* table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  // Two keys per 8-lane group per iteration, with both keys' K and V loads issued before any
  // math, so four row loads per lane are in flight instead of one dependent pair.
  auto locate = [&](int key, int64_t* row) -> bool {
    if (key >= ke) return false;
    const int32_t blk = table[key / p.block_size];
    if (blk < 0 || blk >= p.num_blocks) {
      if (j == 0) atomicOr(p.err, kErrBlockId);
      return false;
    }
    *row = ((static_cast<int64_t>(blk) * p.block_size + key % p.block_size) * p.num_kv_heads + kvh) * D + j * E;
    return true;
  };
  auto process = [&](const float (&kf)[E], const float (&vf)[E], bool valid) {
    float sc[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float d = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) d = fmaf(q[g][e], kf[e], d);
      d += __shfl_xor_sync(0xffffffffu, d, 1);
      d += __shfl_xor_sync(0xffffffffu, d, 2);
      d += __shfl_xor_sync(0xffffffffu, d, 4);
      sc[g] = d;
    }
    if (!valid) return;
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float mn = fmaxf(m[g], sc[g]);
      const float corr = expf(m[g] - mn);  // 0 while m is still -inf
      const float pe = expf(sc[g] - mn);
      l[g] = l[g] * corr + pe;
#pragma unroll
      for (int e = 0; e < E; ++e) acc[g][e] = fmaf(pe, vf[e], acc[g][e] * corr);
      m[g] = mn;
    }
  };
  // The loop bound depends only on the warp, so every lane reaches the shuffles.
  for (int base = kb + warp * kKeysPerWarp; base < ke; base += 2 * kKeysPerIter) {
    int64_t row0 = 0, row1 = 0;
    const bool valid0 = locate(base + sub, &row0);
    const bool valid1 = locate(base + kKeysPerIter + sub, &row1);
    float k0[E], v0[E], k1[E], v1[E];
#pragma unroll
    for (int e = 0; e < E; ++e) k0[e] = v0[e] = k1[e] = v1[e] = 0.0f;
    if (valid0) {
      load_row<E>(kc + row0, k0);
      load_row<E>(vc + row0, v0);
    }
    if (valid1) {
      load_row<E>(kc + row1, k1);
      load_row<E>(vc + row1, v1);
    }
    process(k0, v0, valid0);
    process(k1, v1, valid1);
  }

  // Merge the four 8-lane groups of the warp (lanes with the same j hold the same dims).
#pragma unroll
  for (int off = 8; off <= 16; off *= 2) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo2 = __shfl_xor_sync(0xffffffffu, l[g], off);
      const float mn = fmaxf(m[g], mo);
      const float c1 = m[g] == -INFINITY ? 0.0f : expf(m[g] - mn);
      const float c2 = mo == -INFINITY ? 0.0f : expf(mo - mn);
      l[g] = l[g] * c1 + lo2 * c2;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[g][e], off);
        acc[g][e] = acc[g][e] * c1 + ao * c2;
      }
      m[g] = mn;
    }
  }
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < E; ++e) s_acc[warp][g][j * E + e] = acc[g][e];
      if (j == 0) {
        s_m[warp][g] = m[g];
        s_l[warp][g] = l[g];
      }
    }
  }
  __syncthreads();

  // Merge the warps; write the normalized output or this split's partial result.
  for (int idx = threadIdx.x; idx < nh * D; idx += kThreads) {
    const int g = idx / D, d = idx % D;
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w][g]);
    float sum = 0.0f, a = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = s_m[w][g];
      if (mw == -INFINITY) continue;
      const float c = expf(mw - mx);
      sum += s_l[w][g] * c;
      a += s_acc[w][g][d] * c;
    }
    const int64_t oh = static_cast<int64_t>(t) * p.num_heads + h0 + g;
    if (p.num_splits == 1) {
      p.out[oh * D + d] = sum > 0.0f ? a * p.v_scale / sum : 0.0f;
    } else {
      float* part = p.partial + (oh * p.num_splits + split) * (D + 2);
      part[d] = a * p.v_scale;
      if (d == 0) {
        part[D] = mx;
        part[D + 1] = sum;
      }
    }
  }
}

// One block of D threads per (token, head): combines the splits' partial results.
template <int D>
__global__ void __launch_bounds__(D) attention_reduce_kernel(const float* __restrict__ partial, int num_splits,
                                                             float* __restrict__ out) {
  const int64_t oh = blockIdx.x;
  const float* part = partial + oh * num_splits * (D + 2);
  float mx = -INFINITY;
  for (int s = 0; s < num_splits; ++s) mx = fmaxf(mx, part[s * (D + 2) + D]);
  float sum = 0.0f, a = 0.0f;
  for (int s = 0; s < num_splits; ++s) {
    const float ms = part[s * (D + 2) + D];
    if (ms == -INFINITY) continue;
    const float c = expf(ms - mx);
    sum += part[s * (D + 2) + D + 1] * c;
    a += part[s * (D + 2) + threadIdx.x] * c;
  }
  out[oh * D + threadIdx.x] = sum > 0.0f ? a / sum : 0.0f;
}

template <int D>
constexpr int heads_per_cta() { return D == 64 ? 8 : 4; }  // keeps q + acc within ~130 registers

template <int D>
cudaError_t launch_dim(const AttnParams& p0, DType kv_dtype, int64_t num_tokens, cudaStream_t s) {
  constexpr int G = heads_per_cta<D>();
  AttnParams p = p0;
  p.head_chunks = (p.group + G - 1) / G;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(p.num_kv_heads * p.head_chunks),
                  static_cast<unsigned>(p.num_splits));
  if (kv_dtype == DType::kBF16) {
    paged_attention_kernel<D, G, __nv_bfloat16><<<grid, kThreads, 0, s>>>(p);
  } else if (kv_dtype == DType::kF8E4M3) {
    paged_attention_kernel<D, G, __nv_fp8_e4m3><<<grid, kThreads, 0, s>>>(p);
  } else {
    paged_attention_kernel<D, G, float><<<grid, kThreads, 0, s>>>(p);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || p.num_splits == 1) return e;
  attention_reduce_kernel<D><<<static_cast<unsigned>(num_tokens * p.num_heads), D, 0, s>>>(p.partial, p.num_splits,
                                                                                           p.out);
  return cudaGetLastError();
}

}  // namespace

int64_t attention_workspace_floats(int64_t num_tokens, int64_t num_heads, int64_t head_dim, int num_splits) {
  return num_splits > 1 ? num_tokens * num_heads * num_splits * (head_dim + 2) : 0;
}

int attention_heads_per_cta(int64_t head_dim) { return head_dim == 64 ? heads_per_cta<64>() : heads_per_cta<128>(); }

cudaError_t launch_paged_attention(const PagedAttentionArgs& a, const KvCacheLayer& c, const AttentionPlan& plan,
                                   unsigned* err, cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (a.num_tokens > 0x7fffffffLL || a.num_seqs <= 0 || c.num_kv_heads <= 0 || a.num_heads % c.num_kv_heads != 0)
    return cudaErrorInvalidValue;
  if (plan.num_splits < 1 || (plan.num_splits > 1 && (!plan.partial || plan.split_len <= 0)))
    return cudaErrorInvalidValue;
  AttnParams p{};
  p.q = a.q;
  p.out = a.out;
  p.query_start = a.query_start;
  p.context_lens = a.context_lens;
  p.block_tables = a.block_tables;
  p.k_cache = c.k;
  p.v_cache = c.v;
  p.partial = plan.partial;
  p.err = err;
  p.num_blocks = c.num_blocks;
  p.num_seqs = static_cast<int>(a.num_seqs);
  p.num_heads = static_cast<int>(a.num_heads);
  p.num_kv_heads = static_cast<int>(c.num_kv_heads);
  p.group = static_cast<int>(a.num_heads / c.num_kv_heads);
  p.max_blocks_per_seq = static_cast<int>(a.max_blocks_per_seq);
  p.block_size = static_cast<int>(c.block_size);
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  const bool fp8 = c.dtype == DType::kF8E4M3;
  p.scale = a.scale * (fp8 ? c.k_scale : 1.0f);
  p.v_scale = fp8 ? c.v_scale : 1.0f;
  if (c.head_dim == 64) return launch_dim<64>(p, c.dtype, a.num_tokens, s);
  if (c.head_dim == 128) return launch_dim<128>(p, c.dtype, a.num_tokens, s);
  return cudaErrorInvalidValue;
}

}  // namespace lancet::cuda
