// Prefill (and chunked-prefill) paged attention on tensor cores, flash-attention style: a CTA
// of 8 warps takes 128 query rows of one sequence and one head, walks the sequence's keys in
// tiles of 64 (K and V gathered from the paged cache into registers one tile ahead, then into
// shared memory as BF16, whatever the cache dtype), computes S = Q K^T and O += P V with mma.sync m16n8k16 (BF16 inputs, FP32
// accumulation; sm_80 and later), and keeps the softmax online in registers, so the cost is
// the tensor-core math plus one read of K/V per query tile instead of one per query token.
// Q and P are rounded to BF16 (the usual flash-attention precision). Prompt chunks of bf16 and
// fp8 caches take attention/prefill_sm80.cu (query heads of a KV head share the K/V tiles, split-KV);
// this kernel serves f32 caches. The CUDA-core kernel in attention/exact.cu stays the exact path
// (ActivationPrecision::kExact).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/attention/common.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma.cuh"

namespace lancet::cuda {
namespace {

constexpr int kTileQ = 128;  // query rows per CTA (16 per warp)
constexpr int kTileK = 64;   // keys per shared-memory tile
constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;

struct FlashParams : PagedKernelParams {
  float scale_log2;  // softmax scale * K cache scale * log2(e)
  float v_scale;
};

// 8 consecutive cache values as loaded (converted to bf16 only when stored to shared memory,
// so the loads of the next tile stay in flight while the current one is computed).
template <typename KV>
struct Raw8;
template <>
struct Raw8<__nv_bfloat16> {
  uint4 v;
  __device__ __forceinline__ void load(const __nv_bfloat16* p) { v = *reinterpret_cast<const uint4*>(p); }
  __device__ __forceinline__ void zero() { v = make_uint4(0, 0, 0, 0); }
  __device__ __forceinline__ uint4 bf16() const { return v; }
};
template <>
struct Raw8<__nv_fp8_e4m3> {
  uint2 v;
  __device__ __forceinline__ void load(const __nv_fp8_e4m3* p) { v = *reinterpret_cast<const uint2*>(p); }
  __device__ __forceinline__ void zero() { v = make_uint2(0, 0); }
  __device__ __forceinline__ uint4 bf16() const;
};
template <>
struct Raw8<float> {
  float4 a, b;
  __device__ __forceinline__ void load(const float* p) {
    a = reinterpret_cast<const float4*>(p)[0];
    b = reinterpret_cast<const float4*>(p)[1];
  }
  __device__ __forceinline__ void zero() { a = b = make_float4(0.f, 0.f, 0.f, 0.f); }
  __device__ __forceinline__ uint4 bf16() const {
    return make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
  }
};

// E4M3 values are exact in BF16 (the cache scales are applied outside).
__device__ __forceinline__ uint4 Raw8<__nv_fp8_e4m3>::bf16() const {
  const unsigned u[2] = {v.x, v.y};
  unsigned o[4];
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[h] & 0xffff), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[h] >> 16), __NV_E4M3);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
    o[2 * h] = pack_bf16(a.x, a.y);
    o[2 * h + 1] = pack_bf16(b.x, b.y);
  }
  return make_uint4(o[0], o[1], o[2], o[3]);
}

template <int D, typename KV>
__global__ void __launch_bounds__(kThreads) flash_prefill_kernel(FlashParams p) {
  constexpr int kStride = D + 8;  // bf16 per shared row: rows 16 bytes apart in bank terms
  __shared__ __align__(16) __nv_bfloat16 s_k[kTileK * kStride];
  __shared__ __align__(16) __nv_bfloat16 s_v[kTileK * kStride];

  const int head = blockIdx.y;
  const int kvh = head / p.group;
  // Find this CTA's (sequence, query tile): tiles never straddle sequences.
  int tile = blockIdx.x, s = 0, qs = 0, qlen = 0;
  for (; s < p.num_seqs; ++s) {
    qs = p.query_start[s];
    qlen = p.query_start[s + 1] - qs;
    const int tiles = (qlen + kTileQ - 1) / kTileQ;
    if (tile < tiles) break;
    tile -= tiles;
  }
  if (s >= p.num_seqs) return;
  const int ctx = p.context_lens[s];
  if (qlen <= 0 || ctx < qlen || static_cast<int64_t>(ctx) > static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size) {
    if (threadIdx.x == 0) atomicOr(p.err, kErrSeqShape);
    return;
  }
  const int q0 = tile * kTileQ;              // first query row of the tile (within the sequence)
  const int q_rows = min(kTileQ, qlen - q0);
  const int pos0 = ctx - qlen;               // position of query row 0
  const int kv_end = pos0 + q0 + q_rows;     // keys the tile's last row sees
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;
  const int r_lo = q0 + warp * 16 + g, r_hi = r_lo + 8;  // this thread's two query rows

  // Q fragments (A operand, row-major 16 x D per warp), straight from global f32.
  unsigned qa[D / 16][4];
  {
    auto qrow = [&](int r) -> const float* {
      const int rr = min(r, qlen - 1);  // rows past the sequence compute garbage, never stored
      return p.q + (static_cast<int64_t>(qs + rr) * p.num_heads + head) * D;
    };
    const float* lo = qrow(r_lo);
    const float* hi = qrow(r_hi);
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const int c = kk * 16 + tig * 2;
      const float2 a0 = *reinterpret_cast<const float2*>(lo + c), a1 = *reinterpret_cast<const float2*>(hi + c);
      const float2 a2 = *reinterpret_cast<const float2*>(lo + c + 8), a3 = *reinterpret_cast<const float2*>(hi + c + 8);
      qa[kk][0] = pack_bf16(a0.x, a0.y);
      qa[kk][1] = pack_bf16(a1.x, a1.y);
      qa[kk][2] = pack_bf16(a2.x, a2.y);
      qa[kk][3] = pack_bf16(a3.x, a3.y);
    }
  }
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;
  const int qpos_lo = pos0 + r_lo, qpos_hi = pos0 + r_hi;
  const int warp_first_pos = pos0 + q0 + warp * 16, warp_last_pos = warp_first_pos + 15;

  const KV* kc = static_cast<const KV*>(p.k_cache);
  const KV* vc = static_cast<const KV*>(p.v_cache);
  const int32_t* table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  constexpr int kChunks = D / 8;  // 8-value chunks per key row
  constexpr int kLoads = kTileK * kChunks / kThreads;  // chunks of K (and of V) per thread
  static_assert(kTileK * kChunks % kThreads == 0, "tile chunks must divide among the threads");
  Raw8<KV> rk[kLoads], rv[kLoads];
  // Issues the loads of the tile at k0 into registers (zeros past the keys this CTA sees).
  auto fetch = [&](int k0) {
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int r = idx / kChunks, c = (idx % kChunks) * 8;
      const int key = k0 + r;
      rk[i].zero();
      rv[i].zero();
      if (key < kv_end) {
        const int32_t blk = table[key / p.block_size];
        if (blk < 0 || blk >= p.num_blocks) {
          if (c == 0) atomicOr(p.err, kErrBlockId);
        } else {
          const int64_t row =
              ((static_cast<int64_t>(blk) * p.block_size + key % p.block_size) * p.num_kv_heads + kvh) * D + c;
          rk[i].load(kc + row);
          rv[i].load(vc + row);
        }
      }
    }
  };
  fetch(0);
  for (int k0 = 0; k0 < kv_end; k0 += kTileK) {
    __syncthreads();  // the previous tile's readers are done
#pragma unroll
    for (int i = 0; i < kLoads; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int r = idx / kChunks, c = (idx % kChunks) * 8;
      *reinterpret_cast<uint4*>(&s_k[r * kStride + c]) = rk[i].bf16();
      *reinterpret_cast<uint4*>(&s_v[r * kStride + c]) = rv[i].bf16();
    }
    __syncthreads();
    if (k0 + kTileK < kv_end) fetch(k0 + kTileK);  // in flight during this tile's math

    // Keys past every row of this warp: nothing to add (the warp still joins the barriers).
    if (k0 > warp_last_pos) continue;
    // S = Q K^T for this warp's 16 rows x 64 keys. One ldmatrix.x4 fetches the B fragments of
    // two key tiles for one 16-dim step: lane l addresses row (l % 8) of matrix l / 8, which
    // covers keys n0 + (l / 16) * 8 and dims kk + ((l / 8) % 2) * 8.
    float sc[kTileK / 8][4];
#pragma unroll
    for (int n = 0; n < kTileK / 8; ++n) sc[n][0] = sc[n][1] = sc[n][2] = sc[n][3] = 0.0f;
#pragma unroll
    for (int n = 0; n < kTileK / 8; n += 2) {
      const __nv_bfloat16* kb = s_k + (n * 8 + (lane / 16) * 8 + lane % 8) * kStride + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        unsigned b[4];
        ldmatrix_x4(b, kb + kk * 16);
        mma_bf16(sc[n], qa[kk], b[0], b[1]);
        mma_bf16(sc[n + 1], qa[kk], b[2], b[3]);
      }
    }
    // Causal mask only on tiles reaching past the warp's first row (rows r_lo: sc[.][0..1],
    // r_hi: sc[.][2..3]); the maxima are taken on the raw scores (the scale is positive).
    if (k0 + kTileK - 1 > warp_first_pos) {
#pragma unroll
      for (int n = 0; n < kTileK / 8; ++n) {
#pragma unroll
        for (int j = 0; j < 2; ++j) {
          const int kpos = k0 + n * 8 + tig * 2 + j;
          if (kpos > qpos_lo) sc[n][j] = -INFINITY;
          if (kpos > qpos_hi) sc[n][2 + j] = -INFINITY;
        }
      }
    }
    float rmx_lo = -INFINITY, rmx_hi = -INFINITY;
#pragma unroll
    for (int n = 0; n < kTileK / 8; ++n) {
      rmx_lo = fmaxf(rmx_lo, fmaxf(sc[n][0], sc[n][1]));
      rmx_hi = fmaxf(rmx_hi, fmaxf(sc[n][2], sc[n][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off *= 2) {
      rmx_lo = fmaxf(rmx_lo, __shfl_xor_sync(0xffffffffu, rmx_lo, off));
      rmx_hi = fmaxf(rmx_hi, __shfl_xor_sync(0xffffffffu, rmx_hi, off));
    }
    // Running maxima in scaled log2 units; p = 2^(s * scale - m) is one FFMA and one EX2.
    const float mx_lo = fmaxf(m_lo, rmx_lo * p.scale_log2), mx_hi = fmaxf(m_hi, rmx_hi * p.scale_log2);
    // A row with every key masked so far keeps m = -inf; use 0 as its base (all p are 0).
    const float base_lo = mx_lo == -INFINITY ? 0.0f : mx_lo, base_hi = mx_hi == -INFINITY ? 0.0f : mx_hi;
    const float corr_lo = exp2f(m_lo - base_lo), corr_hi = exp2f(m_hi - base_hi);
    m_lo = mx_lo;
    m_hi = mx_hi;
    float sum_lo = 0.0f, sum_hi = 0.0f;
    unsigned pa[kTileK / 16][4];
#pragma unroll
    for (int n = 0; n < kTileK / 8; ++n) {
      const float p0 = exp2f(fmaf(sc[n][0], p.scale_log2, -base_lo));
      const float p1 = exp2f(fmaf(sc[n][1], p.scale_log2, -base_lo));
      const float p2 = exp2f(fmaf(sc[n][2], p.scale_log2, -base_hi));
      const float p3 = exp2f(fmaf(sc[n][3], p.scale_log2, -base_hi));
      sum_lo += p0 + p1;
      sum_hi += p2 + p3;
      // C fragments of key tiles 2t and 2t+1 are the A fragment of the k-step t.
      pa[n / 2][(n % 2) * 2] = pack_bf16(p0, p1);
      pa[n / 2][(n % 2) * 2 + 1] = pack_bf16(p2, p3);
    }
    l_lo = l_lo * corr_lo + sum_lo;
    l_hi = l_hi * corr_hi + sum_hi;
    if (__any_sync(0xffffffffu, corr_lo != 1.0f || corr_hi != 1.0f)) {  // skipped once the maxima settle
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= corr_lo;
        o[n][1] *= corr_lo;
        o[n][2] *= corr_hi;
        o[n][3] *= corr_hi;
      }
    }
    // O += P V: the B operand (keys x dims) from the row-major V tile through ldmatrix.trans;
    // lane l addresses key 16 t + ((l / 8) % 2) * 8 + l % 8, dims n0 + (l / 16) * 8.
#pragma unroll
    for (int t = 0; t < kTileK / 16; ++t) {
      const __nv_bfloat16* vb = s_v + (t * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kStride + (lane / 16) * 8;
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, vb + n * 8);
        mma_bf16(o[n], pa[t], b[0], b[1]);
        mma_bf16(o[n + 1], pa[t], b[2], b[3]);
      }
    }
  }
  // Row sums over the quad, normalize, store.
#pragma unroll
  for (int off = 1; off <= 2; off *= 2) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  const float inv_lo = l_lo > 0.0f ? p.v_scale / l_lo : 0.0f, inv_hi = l_hi > 0.0f ? p.v_scale / l_hi : 0.0f;
  float* out_lo = r_lo < qlen ? p.out + (static_cast<int64_t>(qs + r_lo) * p.num_heads + head) * D : nullptr;
  float* out_hi = r_hi < qlen ? p.out + (static_cast<int64_t>(qs + r_hi) * p.num_heads + head) * D : nullptr;
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int c = n * 8 + tig * 2;
    if (out_lo) *reinterpret_cast<float2*>(out_lo + c) = make_float2(o[n][0] * inv_lo, o[n][1] * inv_lo);
    if (out_hi) *reinterpret_cast<float2*>(out_hi + c) = make_float2(o[n][2] * inv_hi, o[n][3] * inv_hi);
  }
}

template <int D>
cudaError_t launch_d(const FlashParams& p, DType kv, int64_t num_tokens, cudaStream_t s) {
  // Tiles: at most one partial tile per sequence beyond num_tokens / kTileQ.
  const dim3 grid(static_cast<unsigned>((num_tokens + kTileQ - 1) / kTileQ + p.num_seqs),
                  static_cast<unsigned>(p.num_heads));
  if (kv == DType::kBF16)
    flash_prefill_kernel<D, __nv_bfloat16><<<grid, kThreads, 0, s>>>(p);
  else if (kv == DType::kF8E4M3)
    flash_prefill_kernel<D, __nv_fp8_e4m3><<<grid, kThreads, 0, s>>>(p);
  else
    flash_prefill_kernel<D, float><<<grid, kThreads, 0, s>>>(p);
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention_prefill_f32_cache(const PagedAttentionArgs& a, const KvCacheLayer& c, unsigned* err,
                                               cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (!paged_shape_ok(a, c, 0x3fffffffLL)) return cudaErrorInvalidValue;
  const bool fp8 = c.dtype == DType::kF8E4M3;
  FlashParams p{};
  static_cast<PagedKernelParams&>(p) = paged_kernel_params(a, c, err);
  p.scale_log2 = a.scale * (fp8 ? c.k_scale : 1.0f) * kLog2e;
  p.v_scale = fp8 ? c.v_scale : 1.0f;
  if (c.head_dim == 64) return launch_d<64>(p, c.dtype, a.num_tokens, s);
  if (c.head_dim == 128) return launch_d<128>(p, c.dtype, a.num_tokens, s);
  return cudaErrorInvalidValue;
}

}  // namespace lancet::cuda
