// Pieces the paged-attention kernels share: the parameters every kernel reads and the launch
// checks every launcher makes, finding the sequence and causal key range of a query row, a
// split's share of those keys, and E4M3 -> FP16 conversion of cache bytes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace lancet::cuda {

constexpr float kLog2e = 1.4426950408889634f;

// What every paged-attention kernel reads of a step and its cache (PagedAttentionArgs and
// KvCacheLayer as the device sees them); each kernel's parameters extend it with their split
// plan and scales. Filled by paged_kernel_params.
struct PagedKernelParams {
  const float* q;               // [num_tokens, num_heads, D]
  float* out;                   // [num_tokens, num_heads, D]
  const int32_t* query_start;   // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  const void* k_cache;          // [num_blocks, block_size, num_kv_heads, D]
  const void* v_cache;
  unsigned* err;
  int64_t num_blocks;
  int num_seqs, num_heads, num_kv_heads, group, max_blocks_per_seq, block_size;
};

// The shape every launcher checks: at most max_tokens query rows (what its grid and row
// indexes hold), some sequences, and query heads a whole multiple of the KV heads.
inline bool paged_shape_ok(const PagedAttentionArgs& a, const KvCacheLayer& c, int64_t max_tokens) {
  return a.num_tokens <= max_tokens && a.num_seqs > 0 && c.num_kv_heads > 0 && a.num_heads % c.num_kv_heads == 0;
}

// A plan for the kernels whose grid holds grid_splits splits (decode, exact): at least one
// split, a split length when there are several, and partial rows when the grid has several.
inline bool grid_plan_ok(const AttentionPlan& plan) {
  return plan.num_splits >= 1 && plan.grid_splits >= plan.num_splits && (plan.num_splits == 1 || plan.split_len > 0) &&
         (plan.grid_splits == 1 || plan.partial);
}

inline PagedKernelParams paged_kernel_params(const PagedAttentionArgs& a, const KvCacheLayer& c, unsigned* err) {
  PagedKernelParams p{};
  p.q = a.q;
  p.out = a.out;
  p.query_start = a.query_start;
  p.context_lens = a.context_lens;
  p.block_tables = a.block_tables;
  p.k_cache = c.k;
  p.v_cache = c.v;
  p.err = err;
  p.num_blocks = c.num_blocks;
  p.num_seqs = static_cast<int>(a.num_seqs);
  p.num_heads = static_cast<int>(a.num_heads);
  p.num_kv_heads = static_cast<int>(c.num_kv_heads);
  p.group = static_cast<int>(a.num_heads / c.num_kv_heads);
  p.max_blocks_per_seq = static_cast<int>(a.max_blocks_per_seq);
  p.block_size = static_cast<int>(c.block_size);
  return p;
}

// Query row t of a varlen batch: its sequence (the last s with query_start[s] <= t), that
// sequence's first query row, and the keys the row sees (0 .. its position; 0 keys, with
// kErrSeqShape raised by thread 0, when query_start / context_lens / the block table bound
// disagree).
struct QueryRow {
  int seq;
  int n_keys;
};

__device__ __forceinline__ QueryRow find_query_row(int t, const int32_t* query_start /*[num_seqs + 1]*/,
                                                   const int32_t* context_lens /*[num_seqs]*/, int num_seqs,
                                                   int max_blocks_per_seq, int block_size, unsigned* err) {
  int lo = 0, hi = num_seqs;
  while (hi - lo > 1) {
    const int mid = (lo + hi) / 2;
    if (query_start[mid] <= t) lo = mid; else hi = mid;
  }
  const int qs = query_start[lo], qe = query_start[lo + 1];
  const int ctx = context_lens[lo];
  const bool ok = t >= qs && t < qe && ctx >= qe - qs &&
                  static_cast<int64_t>(ctx) <= static_cast<int64_t>(max_blocks_per_seq) * block_size;
  if (!ok && threadIdx.x == 0) atomicOr(err, kErrSeqShape);
  return {lo, ok ? ctx - (qe - qs) + (t - qs) + 1 : 0};
}

// The keys [kb, ke) of split `split` of a row's n_keys under the plan {num_splits, split_len}
// (read from plan_dev when set: a captured graph's step plan, kernels.h AttentionPlan). run is
// false for a CTA with nothing to do: a split past the plan (the graph's launch holds the
// bucket's bound), or a plan the launch cannot hold (reported as kErrSeqShape).
struct SplitRange {
  int kb, ke, num_splits;
  bool run;
};

__device__ __forceinline__ SplitRange split_range(const int32_t* plan_dev /*[2] or null*/, int num_splits,
                                                  int split_len, int split, int n_keys, unsigned* err) {
  if (plan_dev) {
    num_splits = plan_dev[0];
    split_len = plan_dev[1];
  }
  if (num_splits < 1 || num_splits > static_cast<int>(gridDim.z)) {
    if (split == 0 && threadIdx.x == 0) atomicOr(err, kErrSeqShape);
    return {0, 0, num_splits, false};
  }
  if (split >= num_splits) return {0, 0, num_splits, false};
  if (num_splits == 1) return {0, n_keys, 1, true};
  const int kb = min(split * split_len, n_keys);
  return {kb, min(kb + split_len, n_keys), num_splits, true};
}

// The end of a kernel whose kWarps warps each saw a share of the keys of nh rows (query heads
// h0 .. h0 + nh - 1 of token t): warp w's running maximum (log2 units) and sum of row r sit at
// s_m / s_l [w * kStride + r], and warp_out(w, r, col(d)) is its unnormalized output at dim d
// (col: where the warps stored dim d). The CTA's threads merge the warps (exp2 of the maxima's
// differences) and write the normalized output row (one split), or this split's partial row:
// the D values times v_scale, then the maximum and the sum. P: the kernel's parameters (out,
// partial, num_heads, grid_splits, v_scale).
template <int D, int kWarps, int kThreads, int kStride, typename P, typename Col, typename WarpOut, typename Exp2>
__device__ __forceinline__ void merge_warps_and_store(const P& p, int t, int h0, int nh, int split, int num_splits,
                                                      const float* s_m, const float* s_l, Col col, WarpOut warp_out,
                                                      Exp2 exp2) {
  for (int idx = threadIdx.x; idx < nh * D; idx += kThreads) {
    const int r = idx / D, d = idx % D;
    const int at = col(d);
    float mx = -INFINITY;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) mx = fmaxf(mx, s_m[w * kStride + r]);
    float sum = 0.0f, a = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) {
      const float mw = s_m[w * kStride + r];
      if (mw == -INFINITY) continue;
      const float c = exp2(mw - mx);
      sum += s_l[w * kStride + r] * c;
      a += warp_out(w, r, at) * c;
    }
    const int64_t oh = static_cast<int64_t>(t) * p.num_heads + h0 + r;
    if (num_splits == 1) {
      p.out[oh * D + d] = sum > 0.0f ? a * p.v_scale / sum : 0.0f;
    } else {
      float* part = p.partial + (oh * p.grid_splits + split) * (D + 2);
      part[d] = a * p.v_scale;
      if (d == 0) {
        part[D] = mx;  // log2 units
        part[D + 1] = sum;
      }
    }
  }
}

// The two E4M3 values in the low 16 bits of w -> FP16 pair (exact; the lower byte in the low half).
__device__ __forceinline__ unsigned fp8x2_to_f16x2(unsigned w) {
  const __half2_raw h = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffff), __NV_E4M3);
  return *reinterpret_cast<const unsigned*>(&h);
}

// 16 E4M3 values -> 16 FP16 values (exact), as two 16-byte halves.
__device__ __forceinline__ void fp8x16_to_f16(const uint4& v, uint4* lo, uint4* hi) {
  const unsigned u[4] = {v.x, v.y, v.z, v.w};
  unsigned o[8];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const __half2_raw a = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[i] & 0xffff), __NV_E4M3);
    const __half2_raw b = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[i] >> 16), __NV_E4M3);
    o[2 * i] = *reinterpret_cast<const unsigned*>(&a);
    o[2 * i + 1] = *reinterpret_cast<const unsigned*>(&b);
  }
  *lo = make_uint4(o[0], o[1], o[2], o[3]);
  *hi = make_uint4(o[4], o[5], o[6], o[7]);
}

}  // namespace lancet::cuda
