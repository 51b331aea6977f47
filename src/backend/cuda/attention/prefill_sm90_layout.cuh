// The Hopper prompt kernel's (prefill_sm90.cu) shapes: its parameters, the shared-memory
// layout, the K and V rings with their mbarriers, and which (sequence, token tile, KV head,
// key range) a work item is.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include <cstdint>

#include "backend/cuda/attention/common.cuh"
#include "backend/cuda/attention/sm90_ptx.cuh"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma.cuh"

namespace lancet::cuda::prefill_sm90 {

constexpr int kRows = 128;        // (token, head) rows per CTA
constexpr int kKeys = 128;        // keys per tile
constexpr int kThreads = 384;     // producer warpgroup + two consumer warpgroups

struct Sm90Params : PagedKernelParams {  // a bf16 or e4m3 cache
  float* partial;               // [num_tokens, num_heads, num_splits, D + 2] when num_splits > 1,
                                // rows from first_row
  int64_t first_row;            // query_start[0]: the launch's first query row
  int tokens_per_cta;  // kRows / group
  int tiles;           // bound on the (sequence, token tile) pairs of the batch
  int num_splits, split_len;
  int64_t items;       // work items: tiles * num_kv_heads * num_splits (work_order.h)
  float score_scale;   // softmax scale * log2(e) (* K scale for fp8): raw scores -> log2 units
  float v_scale;       // V scale (fp8) or 1
};

// The cache and the math of a launch: a BF16 cache; an FP8 cache widened to FP16 (Q and P
// FP16); an FP8 cache with every query row rounded to E4M3 under its own scale, so Q K^T runs
// on E4M3 wgmma straight from the cache's bytes (P V stays FP16 on the widened V); and that
// with P rounded to E4M3 too (scaled by 256), P V on E4M3 wgmma over V transposed in shared
// memory (kFp8QueryP, Fp8AttentionMath::kE4m3QueryAndP). kFp8Query2 (Fp8AttentionMath::
// kE4m3x2Query) holds each query row as two E4M3 terms under the row's scale, q ~ hi + lo with
// lo the E4M3 rounding of q - hi (about the precision of a 16-bit query), and runs Q K^T as two
// E4M3 wgmma chains into one accumulator; the rest as kFp8Query. kFp8Query2P (Fp8AttentionMath::
// kE4m3x2QueryAndP): the two-term query with kFp8QueryP's P V.
enum class Sm90Kv { kBf16, kFp8, kFp8Query, kFp8QueryP, kFp8Query2, kFp8Query2P };
__host__ __device__ constexpr bool kv_fp8(Sm90Kv kv) { return kv != Sm90Kv::kBf16; }
__host__ __device__ constexpr bool query_fp8(Sm90Kv kv) { return kv != Sm90Kv::kBf16 && kv != Sm90Kv::kFp8; }
__host__ __device__ constexpr bool query_two_terms(Sm90Kv kv) {
  return kv == Sm90Kv::kFp8Query2 || kv == Sm90Kv::kFp8Query2P;
}
__host__ __device__ constexpr bool p_fp8(Sm90Kv kv) { return kv == Sm90Kv::kFp8QueryP || kv == Sm90Kv::kFp8Query2P; }
// P is rounded to E4M3 as p * 2^kPShift (p <= 1), keeping probabilities down to 2^-17 normal;
// the row sums carry the same factor, so the output needs no correction.
constexpr float kPShift = 8.0f;

// MMA operand type of the 16-bit products: BF16 for bf16 caches, FP16 for fp8 caches (E4M3
// widens to FP16 exactly).
template <Sm90Kv KV>
constexpr MmaType kMmaType = kv_fp8(KV) ? MmaType::kF16 : MmaType::kBF16;

// Shared memory: Q, then a ring of K tiles and a ring of V tiles (K is needed a turn before V,
// so its ring is deeper), then (FP8) the staging slots and (E4M3 query) the query rows' scales,
// then the rings' mbarriers: per stage a "full" barrier (the producer's 128 threads arrive as
// their copies land) and an "empty" one (the 8 consumer warps arrive when their products have
// read the stage). With an E4M3 query, Q and K are E4M3 rows in one 128-byte column block
// (rows of D bytes; the upper half unused at head_dim 64); a two-term query's low terms follow
// in a second block.

template <int D, Sm90Kv KV>
struct Sm90Layout {
  static constexpr bool kF8 = kv_fp8(KV), kQuery8 = query_fp8(KV), kP8 = p_fp8(KV);
  static constexpr int kBlocks = D / 64;          // 128-byte column blocks per 16-bit row
  static constexpr int kKStages = kQuery8 || D == 64 ? 4 : 3;
  static constexpr int kVStages = D == 128 && !kP8 ? 2 : 4;
  static constexpr int kQBlock = kRows * 128;     // bytes of one Q column block
  static constexpr int kKvBlock = kKeys * 128;    // bytes of one K or V column block
  static constexpr int kQBytes = (kQuery8 ? (query_two_terms(KV) ? 2 : 1) : kBlocks) * kQBlock;
  static constexpr int kKTileBytes = (kQuery8 ? 1 : kBlocks) * kKvBlock;  // one K tile
  // One V tile: 16-bit rows in column blocks, or (kP8) V transposed: D rows of the tile's 128
  // keys as E4M3 bytes (a K-major B operand, keys permuted as the P fragments hold them).
  static constexpr int kVTileBytes = kP8 ? D * 128 : kBlocks * kKvBlock;
  static constexpr int kKOffset = kQBytes;
  static constexpr int kVOffset = kKOffset + kKStages * kKTileBytes;
  // FP8: two staging slots of raw E4M3 tiles (kKeys rows of D bytes).
  static constexpr int kRawTileBytes = kKeys * D;
  static constexpr int kStagingOffset = kVOffset + kVStages * kVTileBytes;
  static constexpr int kQScaleOffset = kStagingOffset + (kF8 ? 2 * kRawTileBytes : 0);  // [kRows] floats
  static constexpr int kBarOffset = kQScaleOffset + (kQuery8 ? kRows * 4 : 0);
  static constexpr int kSmem = kBarOffset + 2 * (kKStages + kVStages) * 8 + 1024;  // + alignment slack
  // Registers per thread after setmaxnreg (128 x producer + 256 x consumer <= 64K): the V
  // transpose of kP8 needs more in the producer than the copies and widening of the others.
  static constexpr int kProducerRegs = kP8 ? 104 : 80;
  static constexpr int kConsumerRegs = kP8 ? 192 : 208;
  static_assert(kSmem <= 227 * 1024, "one CTA per multiprocessor");
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One ring of tiles in shared memory. The CTA's tiles are counted across its work items:
// `offset` tiles went through the ring before the current item, whose tile i is the ring's
// tile n = offset + i; it sits in stage n % stages and its barriers' phase parity there is
// (n / stages) & 1.
struct Ring {
  uint32_t tiles, full, empty;  // shared addresses: first tile, first full / empty barrier
  int stages, tile_bytes;
  int offset;
  __device__ __forceinline__ int stage(int i) const { return (offset + i) % stages; }
  __device__ __forceinline__ uint32_t tile(int i) const { return tiles + stage(i) * tile_bytes; }
  __device__ __forceinline__ uint32_t full_bar(int i) const { return full + 8 * stage(i); }
  __device__ __forceinline__ uint32_t empty_bar(int i) const { return empty + 8 * stage(i); }
  __device__ __forceinline__ unsigned parity(int i) const { return ((offset + i) / stages) & 1; }
  // Tile i reuses a stage an earlier tile filled (so waits for it to be emptied).
  __device__ __forceinline__ bool reused(int i) const { return offset + i >= stages; }
};

template <int D, Sm90Kv KV>
__device__ __forceinline__ Ring k_ring(uint32_t base) {
  using Ly = Sm90Layout<D, KV>;
  return {base + Ly::kKOffset, base + Ly::kBarOffset, base + Ly::kBarOffset + 8 * Ly::kKStages, Ly::kKStages,
          Ly::kKTileBytes, 0};
}
template <int D, Sm90Kv KV>
__device__ __forceinline__ Ring v_ring(uint32_t base) {
  using Ly = Sm90Layout<D, KV>;
  const uint32_t bars = base + Ly::kBarOffset + 16 * Ly::kKStages;
  return {base + Ly::kVOffset, bars, bars + 8 * Ly::kVStages, Ly::kVStages, Ly::kVTileBytes, 0};
}

// A work item's (sequence, token tile), KV head, split and key range; ok = false when it has
// no rows.
struct CtaWork {
  bool ok;
  int seq, qs, q0, ntok, rows, pos0, kb, ke, kvh, split;
};

// The row of the [tokens, num_heads] query and output arrays that CTA row r stands for: its
// token (r / group into the tile) and its query head (the KV head's group, r % group).
__device__ __forceinline__ int64_t head_row(const Sm90Params& p, const CtaWork& w, int r) {
  return static_cast<int64_t>(w.qs + w.q0 + r / p.group) * p.num_heads + w.kvh * p.group + r % p.group;
}

// Work item `item`: (token tile, KV head) pair item / num_splits and split item % num_splits.
// Pairs count from the batch's last token tile backward (the most keys first; KV heads
// fastest), so items are numbered longest first (work_order.h) and the pairs past the batch's
// real tiles (p.tiles is a bound) come after every real item: a persistent CTA meets them only
// once the real work is handed out.
__device__ __forceinline__ CtaWork locate_work(const Sm90Params& p, int64_t item) {
  CtaWork w{};
  w.split = static_cast<int>(item % p.num_splits);
  const int64_t pair = item / p.num_splits;
  w.kvh = static_cast<int>(pair % p.num_kv_heads);
  int tile = static_cast<int>(pair / p.num_kv_heads);  // counted from the batch's end
  const int tpc = p.tokens_per_cta;
  int s = p.num_seqs - 1, qlen = 0;
  for (; s >= 0; --s) {
    w.qs = p.query_start[s];
    qlen = p.query_start[s + 1] - w.qs;
    const int tiles = (qlen + tpc - 1) / tpc;
    if (tile < tiles) {
      tile = tiles - 1 - tile;
      break;
    }
    tile -= tiles;
  }
  if (s < 0) return w;
  const int ctx = p.context_lens[s];
  if (qlen <= 0 || ctx < qlen || static_cast<int64_t>(ctx) > static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size) {
    if (threadIdx.x == 0 && w.split == 0) atomicOr(p.err, kErrSeqShape);
    return w;
  }
  w.seq = s;
  w.q0 = tile * tpc;
  w.ntok = min(tpc, qlen - w.q0);
  w.rows = w.ntok * p.group;
  w.pos0 = ctx - qlen + w.q0;
  w.kb = 0;
  w.ke = w.pos0 + w.ntok;
  if (p.num_splits > 1) {
    w.kb = min(w.split * p.split_len, w.ke);
    w.ke = min(w.kb + p.split_len, w.ke);
  }
  w.ok = true;
  return w;
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace lancet::cuda::prefill_sm90
