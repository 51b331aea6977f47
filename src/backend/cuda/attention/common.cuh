// Pieces the paged-attention kernels share: finding the sequence and causal key range of a query
// row, a split's share of those keys, and E4M3 -> FP16 conversion of cache bytes.
#pragma once

#include <cuda_fp16.h>
#include <cuda_fp8.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/kernels.h"

namespace lancet::cuda {

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
