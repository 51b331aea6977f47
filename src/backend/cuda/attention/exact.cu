// Varlen paged attention (prefill chunks and decode in one launch) with online softmax over the
// paged KV cache, f32 accumulation, GQA, head_dim 64 and 128, f32, bf16 or fp8 cache.
//
// Work split: one CTA per (query token, KV head, chunk of up to G query heads of that KV head,
// context split). The G query heads share every K/V load. Each warp runs its own pipeline:
// stages of 8 keys (their K and V rows) copied into shared memory with cp.async, S stages in
// flight, so the bytes in flight do not depend on registers and the math of one stage overlaps
// the loads of the next ones. Warps take interleaved stages of the CTA's key range. Inside a
// stage, each 8-lane group takes two keys; lane j of a group owns the same D/8 dims of q, K, V
// and the accumulator (16-byte pieces j, j + 8, ... of a row: conflict-free shared reads), and
// a 3-step shuffle reduction gives each score. The running max is kept in log2 units and the
// accumulator is rescaled only when the max grows.
//
// Flash decoding: with few CTAs (small decode batches) the context is cut into num_splits
// ranges; each CTA writes its unnormalized accumulator with its max and sum, and a reduction
// kernel (attention/merge.cu) rescales and combines them. The query token finds its sequence by binary search over
// query_start, so the launch needs no host copy of the step's metadata.
// This is the exact-precision path (f32 arithmetic throughout) and the decode path of f32
// caches; the fast precision mode sends prompt chunks to the tensor-core prompt kernels and the
// other rows of bf16 / fp8 caches to attention/decode.cu.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cmath>

#include "backend/cuda/attention/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/mma.cuh"

namespace lancet::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kStageKeys = 8;  // keys per pipeline stage of a warp (two per 8-lane group)
constexpr int kSmemBudget = 48 * 1024;  // static shared memory per CTA

struct AttnParams : PagedKernelParams {
  float* partial;             // [num_tokens, num_heads, grid_splits, D + 2]
  int head_chunks;            // CTAs per KV head (G query heads each)
  int num_splits, split_len;  // the plan (overridden by plan_dev when set)
  int grid_splits;            // splits in the grid: the partial buffer's stride
  const int32_t* plan_dev;    // [2] {num_splits, split_len} read at run time, or null
  float scale_log2;  // softmax scale times the K cache scale times log2(e)
  float v_scale;     // the V cache scale (1 unless fp8)
};

// N contiguous values -> f32 registers (N % 4 == 0 for f32, N % 8 == 0 for bf16 and fp8).
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

// Shapes of one instantiation: a lane's D / 8 dims are NP pieces of P values; pieces are
// 16 bytes (8 for fp8 at head_dim 64).
template <int D, int G, typename KV>
struct DecodeShape {
  static constexpr int kE = D / 8;  // dims per lane
  static constexpr int kP = kE < 16 / static_cast<int>(sizeof(KV)) ? kE : 16 / static_cast<int>(sizeof(KV));
  static constexpr int kNP = kE / kP;
  static constexpr int kRowBytes = D * static_cast<int>(sizeof(KV));
  static constexpr int kStageBytes = kStageKeys * 2 * kRowBytes;  // K rows, then V rows
  static constexpr int kStagesFit = kSmemBudget / (kWarps * kStageBytes);
  static constexpr int kStages = kStagesFit < 4 ? kStagesFit : 4;
  static constexpr int kChunksPerRow = kRowBytes / 16;
  static constexpr int kCopies = kStageKeys * kChunksPerRow / 32;  // 16-byte copies per lane per K (and V)
  static constexpr int kMergeBytes = kWarps * G * (D + 2) * 4;
  static constexpr int kSmemBytes =
      kWarps * kStages * kStageBytes > kMergeBytes ? kWarps * kStages * kStageBytes : kMergeBytes;
  static_assert(kStages >= 1, "a stage must fit the shared-memory budget");
  static_assert(kStageKeys * kChunksPerRow % 32 == 0, "a stage's rows must divide among the lanes");
  static_assert(kE % kP == 0 && kP % 4 == 0, "pieces must tile a lane's dims");
  // Dim of a lane's e-th value: piece j + 8 (e / P), offset e % P.
  __device__ __forceinline__ static int dim(int j, int e) { return (j + 8 * (e / kP)) * kP + e % kP; }
};

template <int D, int G, typename KV>
__global__ void __launch_bounds__(kThreads, 2) paged_attention_kernel(AttnParams p) {
  using Sh = DecodeShape<D, G, KV>;
  constexpr int E = Sh::kE, P = Sh::kP, NP = Sh::kNP, S = Sh::kStages;
  __shared__ __align__(16) unsigned char smem[Sh::kSmemBytes];

  const int t = blockIdx.x;
  const int kvh = blockIdx.y / p.head_chunks;
  const int g0 = (blockIdx.y % p.head_chunks) * G;
  const int nh = min(G, p.group - g0);
  const int h0 = kvh * p.group + g0;  // first query head of this CTA
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int sub = lane / 8, j = lane % 8;

  const QueryRow qrow =
      find_query_row(t, p.query_start, p.context_lens, p.num_seqs, p.max_blocks_per_seq, p.block_size, p.err);
  const int s = qrow.seq, n_keys = qrow.n_keys;
  const SplitRange range = split_range(p.plan_dev, p.num_splits, p.split_len, split, n_keys, p.err);
  if (!range.run) return;
  const int num_splits = range.num_splits, kb = range.kb, ke = range.ke;

  float q[G][E];
#pragma unroll
  for (int g = 0; g < G; ++g) {
    if (g < nh) {
      const float* qsrc = p.q + (static_cast<int64_t>(t) * p.num_heads + h0 + g) * D;
#pragma unroll
      for (int i = 0; i < NP; ++i) {
        float part[P];
        load_row<P>(qsrc + Sh::dim(j, i * P), part);
#pragma unroll
        for (int e = 0; e < P; ++e) q[g][i * P + e] = part[e] * p.scale_log2;
      }
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
  unsigned char* wsmem = smem + warp * S * Sh::kStageBytes;
  // The warp's stages: keys kb + (i * kWarps + warp) * 8 ... + 8, for i < n_stages.
  const int first = kb + warp * kStageKeys;
  const int n_stages = ke > first ? (ke - first + kWarps * kStageKeys - 1) / (kWarps * kStageKeys) : 0;
  auto stage_key = [&](int i) { return first + i * kWarps * kStageKeys; };
  // Row of key `key` in the cache (element offset), or -1 past the range or for a bad block id.
  auto locate = [&](int key, bool report) -> int64_t {
    if (key >= ke) return -1;
    const int32_t blk = table[key / p.block_size];
    if (blk < 0 || blk >= p.num_blocks) {
      if (report) atomicOr(p.err, kErrBlockId);
      return -1;
    }
    return ((static_cast<int64_t>(blk) * p.block_size + key % p.block_size) * p.num_kv_heads + kvh) * D;
  };
  // Copies stage i's K and V rows into buffer i % S (zeros for keys out of range).
  auto issue = [&](int i) {
    if (i < n_stages) {
      unsigned char* buf = wsmem + (i % S) * Sh::kStageBytes;
      const int key0 = stage_key(i);
#pragma unroll
      for (int c = 0; c < Sh::kCopies; ++c) {
        const int idx = lane + 32 * c;
        const int r = idx / Sh::kChunksPerRow, off = (idx % Sh::kChunksPerRow) * 16;
        const int64_t row = locate(key0 + r, off == 0);
        const int bytes = row >= 0 ? 16 : 0;  // zero-fill keys past the range (and bad blocks)
        const int64_t src = row >= 0 ? row : 0;
        cp_async16_zfill(buf + r * Sh::kRowBytes + off, reinterpret_cast<const unsigned char*>(kc + src) + off, bytes);
        cp_async16_zfill(buf + (kStageKeys + r) * Sh::kRowBytes + off,
                         reinterpret_cast<const unsigned char*>(vc + src) + off, bytes);
      }
    }
    cp_async_commit();  // one group per stage index, empty or not, keeps the wait count exact
  };

#pragma unroll
  for (int i = 0; i < S - 1; ++i) issue(i);
  // The loop bound depends only on the warp, so every lane reaches the shuffles.
  for (int i = 0; i < n_stages; ++i) {
    issue(i + S - 1);
    cp_async_wait<S - 1>();
    __syncwarp();
    const unsigned char* buf = wsmem + (i % S) * Sh::kStageBytes;
    const int key_a = stage_key(i) + sub, key_b = key_a + 4;
    const bool va = key_a < ke, vb = key_b < ke;  // rows past the range are zeros
    float ka[E], kb2[E];
    const KV* rka = reinterpret_cast<const KV*>(buf + sub * Sh::kRowBytes);
    const KV* rkb = reinterpret_cast<const KV*>(buf + (sub + 4) * Sh::kRowBytes);
#pragma unroll
    for (int pc = 0; pc < NP; ++pc) {
      float ta[P], tb[P];
      load_row<P>(rka + Sh::dim(j, pc * P), ta);
      load_row<P>(rkb + Sh::dim(j, pc * P), tb);
#pragma unroll
      for (int e = 0; e < P; ++e) {
        ka[pc * P + e] = ta[e];
        kb2[pc * P + e] = tb[e];
      }
    }
    float sa[G], sb[G];
#pragma unroll
    for (int g = 0; g < G; ++g) {
      float da = 0.0f, db = 0.0f;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        da = fmaf(q[g][e], ka[e], da);
        db = fmaf(q[g][e], kb2[e], db);
      }
#pragma unroll
      for (int o = 1; o <= 4; o *= 2) {
        da += __shfl_xor_sync(0xffffffffu, da, o);
        db += __shfl_xor_sync(0xffffffffu, db, o);
      }
      sa[g] = va ? da : -INFINITY;
      sb[g] = vb ? db : -INFINITY;
    }
    if (va) {
      float vva[E], vvb[E];
      const KV* rva = reinterpret_cast<const KV*>(buf + (kStageKeys + sub) * Sh::kRowBytes);
      const KV* rvb = reinterpret_cast<const KV*>(buf + (kStageKeys + sub + 4) * Sh::kRowBytes);
#pragma unroll
      for (int pc = 0; pc < NP; ++pc) {
        float ta[P], tb[P];
        load_row<P>(rva + Sh::dim(j, pc * P), ta);
        load_row<P>(rvb + Sh::dim(j, pc * P), tb);  // zeros when b is past the range: pb * 0
#pragma unroll
        for (int e = 0; e < P; ++e) {
          vva[pc * P + e] = ta[e];
          vvb[pc * P + e] = tb[e];
        }
      }
#pragma unroll
      for (int g = 0; g < G; ++g) {
        const float mx = fmaxf(sa[g], sb[g]);  // finite: key a is valid
        if (mx > m[g]) {
          const float corr = exp2f(m[g] - mx);  // 0 while m is still -inf
          l[g] *= corr;
#pragma unroll
          for (int e = 0; e < E; ++e) acc[g][e] *= corr;
          m[g] = mx;
        }
        const float pa = exp2f(sa[g] - m[g]), pb = exp2f(sb[g] - m[g]);  // pb = 0 for an invalid b
        l[g] += pa + pb;
#pragma unroll
        for (int e = 0; e < E; ++e) acc[g][e] = fmaf(pa, vva[e], fmaf(pb, vvb[e], acc[g][e]));
      }
    }
    __syncwarp();  // this buffer is refilled S - 1 iterations from now
  }
  cp_async_wait<0>();

  // Merge the four 8-lane groups of the warp (lanes with the same j hold the same dims).
#pragma unroll
  for (int off = 8; off <= 16; off *= 2) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
      const float mo = __shfl_xor_sync(0xffffffffu, m[g], off);
      const float lo2 = __shfl_xor_sync(0xffffffffu, l[g], off);
      const float mn = fmaxf(m[g], mo);
      const float c1 = m[g] == -INFINITY ? 0.0f : exp2f(m[g] - mn);
      const float c2 = mo == -INFINITY ? 0.0f : exp2f(mo - mn);
      l[g] = l[g] * c1 + lo2 * c2;
#pragma unroll
      for (int e = 0; e < E; ++e) {
        const float ao = __shfl_xor_sync(0xffffffffu, acc[g][e], off);
        acc[g][e] = acc[g][e] * c1 + ao * c2;
      }
      m[g] = mn;
    }
  }
  __syncthreads();  // every warp is done with its stages: the merge reuses the shared memory
  float* s_acc = reinterpret_cast<float*>(smem);                     // [kWarps][G][D]
  float* s_m = s_acc + kWarps * G * D;                                // [kWarps][G]
  float* s_l = s_m + kWarps * G;                                      // [kWarps][G]
  if (sub == 0) {
#pragma unroll
    for (int g = 0; g < G; ++g) {
#pragma unroll
      for (int e = 0; e < E; ++e) s_acc[(warp * G + g) * D + Sh::dim(j, e)] = acc[g][e];
      if (j == 0) {
        s_m[warp * G + g] = m[g];
        s_l[warp * G + g] = l[g];
      }
    }
  }
  __syncthreads();

  // Merge the warps; write the normalized output or this split's partial result.
  merge_warps_and_store<D, kWarps, kThreads, G>(
      p, t, h0, nh, split, num_splits, s_m, s_l, [](int d) { return d; },
      [&](int w, int g, int d) { return s_acc[(w * G + g) * D + d]; }, [](float x) { return exp2f(x); });
}

template <int D>
constexpr int heads_per_cta() { return D == 64 ? 8 : 4; }  // q + acc: 128 registers

template <int D>
cudaError_t launch_dim(const AttnParams& p0, DType kv_dtype, int64_t num_tokens, cudaStream_t s) {
  constexpr int G = heads_per_cta<D>();
  AttnParams p = p0;
  p.head_chunks = (p.group + G - 1) / G;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(p.num_kv_heads * p.head_chunks),
                  static_cast<unsigned>(p.grid_splits));
  if (kv_dtype == DType::kBF16) {
    paged_attention_kernel<D, G, __nv_bfloat16><<<grid, kThreads, 0, s>>>(p);
  } else if (kv_dtype == DType::kF8E4M3) {
    paged_attention_kernel<D, G, __nv_fp8_e4m3><<<grid, kThreads, 0, s>>>(p);
  } else {
    paged_attention_kernel<D, G, float><<<grid, kThreads, 0, s>>>(p);
  }
  cudaError_t e = cudaGetLastError();
  if (e != cudaSuccess || p.grid_splits == 1) return e;
  return launch_attention_merge(p.partial, num_tokens * p.num_heads, p.grid_splits, p.plan_dev, D, p.out, s);
}

}  // namespace

int64_t attention_workspace_floats(int64_t num_tokens, int64_t num_heads, int64_t head_dim, int num_splits) {
  return num_splits > 1 ? num_tokens * num_heads * num_splits * (head_dim + 2) : 0;
}

int attention_exact_heads_per_cta(int64_t head_dim) {
  return head_dim == 64 ? heads_per_cta<64>() : heads_per_cta<128>();
}

cudaError_t launch_attention_exact(const PagedAttentionArgs& a, const KvCacheLayer& c, const AttentionPlan& plan,
                                   unsigned* err, cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (!paged_shape_ok(a, c, 0x7fffffffLL) || !grid_plan_ok(plan)) return cudaErrorInvalidValue;
  AttnParams p{};
  static_cast<PagedKernelParams&>(p) = paged_kernel_params(a, c, err);
  p.partial = plan.partial;
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  p.grid_splits = plan.grid_splits;
  p.plan_dev = plan.device;
  const bool fp8 = c.dtype == DType::kF8E4M3;
  p.scale_log2 = a.scale * (fp8 ? c.k_scale : 1.0f) * kLog2e;
  p.v_scale = fp8 ? c.v_scale : 1.0f;
  if (c.head_dim == 64) return launch_dim<64>(p, c.dtype, a.num_tokens, s);
  if (c.head_dim == 128) return launch_dim<128>(p, c.dtype, a.num_tokens, s);
  return cudaErrorInvalidValue;
}

}  // namespace lancet::cuda
