// The Hopper prompt kernel's producer warpgroup: K and V tiles from the paged cache into the
// rings (BF16 by cp.async; FP8 through a staging area, widened to FP16; with an E4M3 query, K
// by cp.async as it is and V widened; with E4M3 query and P, V transposed as E4M3 bytes).
#pragma once

#include "backend/cuda/attention/prefill_sm90_layout.cuh"

namespace lancet::cuda::prefill_sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The producer warpgroup's view of the cache: lane l of warp w finds the cache row of tile row
// 32 w + l (one block-table read per row and tile); the warp then copies its 32 rows in 16-byte
// chunks, taking each row's offset from the lane that found it.
template <int D, bool F8>
struct TileCopier {
  static constexpr int kRowBytes = F8 ? D : 2 * D;
  static constexpr int kChunks = kRowBytes / 16;     // 16-byte chunks per cache row
  static constexpr int kRowsPerCopy = 32 / kChunks;  // rows one warp-wide copy covers
  const Sm90Params& p;
  const CtaWork& w;
  int n_tiles, warp, lane, c, sub;
  const int32_t* table;
  int64_t head_off, row_bytes;

  __device__ __forceinline__ TileCopier(const Sm90Params& p_, const CtaWork& w_, int n)
      : p(p_), w(w_), n_tiles(n), warp(threadIdx.x / 32), lane(threadIdx.x % 32), c(lane % kChunks),
        sub(lane / kChunks), table(p_.block_tables + static_cast<int64_t>(w_.seq) * p_.max_blocks_per_seq),
        head_off(static_cast<int64_t>(w_.kvh) * kRowBytes), row_bytes(static_cast<int64_t>(p_.num_kv_heads) * kRowBytes) {}

  // Byte offset of this lane's row of tile it in the cache, or -1 (past the key range, or a
  // bad block id: zero-filled).
  __device__ __forceinline__ int64_t row_source(int it) const {
    const int key = w.kb + (n_tiles - 1 - it) * kKeys + warp * 32 + lane;
    if (key >= w.ke) return -1;
    const int32_t blk = table[key / p.block_size];
    if (blk < 0 || blk >= p.num_blocks) {
      atomicOr(p.err, kErrBlockId);
      return -1;
    }
    return (static_cast<int64_t>(blk) * p.block_size + key % p.block_size) * row_bytes + head_off;
  }
  __device__ __forceinline__ int row_of(int i) const { return warp * 32 + i * kRowsPerCopy + sub; }
  // Copies this thread's chunks of a tile to dst: swizzled into a ring stage (128-byte column
  // blocks; BF16 rows, or E4M3 rows of an E4M3-query K tile), else (FP8 staging) rows of D bytes.
  __device__ __forceinline__ void copy_rows(uint32_t dst, const void* cache, int64_t row_src, bool swizzled) const {
    const unsigned char* bytes = static_cast<const unsigned char*>(cache);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int64_t src = __shfl_sync(0xffffffffu, row_src, i * kRowsPerCopy + sub);
      const uint32_t at = swizzled ? (c / 8) * kKeys * 128 + sm90::swizzled_offset(row_of(i), c % 8)
                                   : static_cast<uint32_t>(row_of(i) * D + c * 16);
      sm90::cp_async16(dst + at, bytes + (src >= 0 ? src + c * 16 : 0), src >= 0 ? 16 : 0);
    }
  }
};

__device__ __forceinline__ void wait_empty(const Ring& r, int it) {
  if (r.reused(it)) sm90::mbar_wait(r.empty_bar(it), r.parity(it) ^ 1);
}

// Widens this thread's chunks of staging slot `slot` (an FP8 tile of kKeys rows of D bytes)
// to FP16 in ring stage `it` and arrives on its full barrier.
template <int D>
__device__ __forceinline__ void widen_tile(const TileCopier<D, true>& tc, const Ring& r, int it,
                                           const unsigned char* src_slot, unsigned char* dst) {
  wait_empty(r, it);
#pragma unroll
  for (int i = 0; i < TileCopier<D, true>::kChunks; ++i) {
    const uint4 raw = *reinterpret_cast<const uint4*>(src_slot + tc.row_of(i) * D + tc.c * 16);
    uint4 lo, hi;
    fp8x16_to_f16(raw, &lo, &hi);
    // FP16 values c * 16 .. c * 16 + 15 of the row: chunks 2c and 2c + 1.
    const int blk = (2 * tc.c) / 8;
    *reinterpret_cast<uint4*>(dst + blk * kKeys * 128 + sm90::swizzled_offset(tc.row_of(i), (2 * tc.c) % 8)) = lo;
    *reinterpret_cast<uint4*>(dst + blk * kKeys * 128 + sm90::swizzled_offset(tc.row_of(i), (2 * tc.c + 1) % 8)) = hi;
  }
  sm90::fence_proxy_async();
  sm90::mbar_arrive(r.full_bar(it));
}

// Producer warpgroup, BF16: the K tile then the V tile of each step (key tile n_tiles - 1 - it)
// into their rings, K one step ahead of V (the consumers multiply K a turn earlier), with
// cp.async straight into the ring; each thread's copies arrive on the stage's full barrier as
// they land.
template <int D>
__device__ __forceinline__ void produce_bf16(const Sm90Params& p, const CtaWork& w, int n_tiles, const Ring& kr,
                                             const Ring& vr) {
  const TileCopier<D, false> tc(p, w, n_tiles);
  auto copy_tile = [&](const Ring& r, int it, const void* cache, int64_t row_src) {
    wait_empty(r, it);
    tc.copy_rows(r.tile(it), cache, row_src, true);
    sm90::cp_async_arrive_noinc(r.full_bar(it));
  };
  int64_t src_cur = tc.row_source(0);
  copy_tile(kr, 0, p.k_cache, src_cur);
  for (int it = 0; it < n_tiles; ++it) {
    const int64_t src_next = it + 1 < n_tiles ? tc.row_source(it + 1) : -1;
    if (it + 1 < n_tiles) copy_tile(kr, it + 1, p.k_cache, src_next);
    copy_tile(vr, it, p.v_cache, src_cur);
    src_cur = src_next;
  }
}

// Producer warpgroup, FP8: the same order of copies, each into a staging slot (two, used in
// turn, so the next copy flies while this one is widened); then each thread widens the chunks
// it copied itself to FP16 in the ring stage and arrives.
template <int D>
__device__ __forceinline__ void produce_fp8(const Sm90Params& p, const CtaWork& w, int n_tiles, const Ring& kr,
                                            const Ring& vr, unsigned char* smem, uint32_t base, uint32_t staging) {
  using TC = TileCopier<D, true>;
  const TC tc(p, w, n_tiles);
  // Widens this thread's chunks of staging slot `slot` into ring stage `it` of V (or K).
  auto widen = [&](bool is_v, int it, int slot) {
    const Ring& r = is_v ? vr : kr;
    widen_tile<D>(tc, r, it, smem + (staging - base) + slot * kKeys * D, smem + (r.tile(it) - base));
  };
  // Copy jobs in order: K 0, then per step K it + 1 and V it; job q uses slot q % 2.
  int q = 0;
  int64_t src_cur = tc.row_source(0);
  tc.copy_rows(staging, p.k_cache, src_cur, false);
  sm90::cp_async_commit();
  bool prev_v = false;  // the job waiting to be widened: V (else K) of tile prev_tile
  int prev_tile = 0;
  auto next_job = [&](bool is_v, int it, int64_t row_src) {
    ++q;
    tc.copy_rows(staging + (q % 2) * kKeys * D, is_v ? p.v_cache : p.k_cache, row_src, false);
    sm90::cp_async_commit();
    sm90::cp_async_wait<1>();  // job q - 1 has landed
    widen(prev_v, prev_tile, (q - 1) % 2);
    prev_v = is_v;
    prev_tile = it;
  };
  for (int it = 0; it < n_tiles; ++it) {
    const int64_t src_next = it + 1 < n_tiles ? tc.row_source(it + 1) : -1;
    if (it + 1 < n_tiles) next_job(false, it + 1, src_next);
    next_job(true, it, src_cur);
    src_cur = src_next;
  }
  sm90::cp_async_wait<0>();
  widen(prev_v, prev_tile, q % 2);
}

// Transposes warp w's 32 keys of staging slot `src_slot` (E4M3 rows of D bytes; the warp
// copied them itself, so after its cp.async wait a __syncwarp makes them visible) into V^T in
// ring stage `it`: row d holds the tile's 128 keys as bytes, key-permuted the way the consumers'
// P fragments hold them. In a 16-key half of a 32-key k-step, A-fragment slot 4t + i (lane
// quad position t, byte i) is key 2t + (i & 1) + 8 (i >> 1): the four keys whose scores that
// lane's S accumulators hold for one row. Lane L handles dims 4m .. 4m + 3 (m = L mod D/4) over
// its share of the 8 slot groups; each 4 x 4 byte block (4 keys x 4 dims) takes four 4-byte
// loads, a byte transpose in eight byte permutes (pairs of keys, then pairs of pairs) and four
// 4-byte stores. The order of slot groups and of the four rows written is rotated per lane, so
// that neither the loads nor the swizzled stores collide on shared-memory banks; the rotation
// lives in the first permutes' selectors, made once per lane. Then the thread arrives on the
// stage's full barrier.
template <int D>
__device__ __forceinline__ void transpose_v_tile(const Ring& r, int it, const unsigned char* src_slot,
                                                 unsigned char* dst) {
  constexpr int kDimGroups = D / 4;             // 4-dim groups of a row
  constexpr int kSteps = 8 * kDimGroups / 32;   // 4 x 4 blocks per lane
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int m = lane % kDimGroups, lg = lane / kDimGroups;
  const int rot = (m / 2) % 4;
  // The k-th row this lane writes is dim 4m + q[k], q[k] = (k + rot) % 4: byte q[k] of each
  // key's word. sel01 pairs keys 0, 1 (and 2, 3) at bytes q[0], q[1]; sel23 at q[2], q[3].
  int q[4];
#pragma unroll
  for (int k = 0; k < 4; ++k) q[k] = (k + rot) % 4;
  auto pair_sel = [](int a, int b) {
    return static_cast<unsigned>(a) | static_cast<unsigned>(a + 4) << 4 | static_cast<unsigned>(b) << 8 |
           static_cast<unsigned>(b + 4) << 12;
  };
  const unsigned sel01 = pair_sel(q[0], q[1]), sel23 = pair_sel(q[2], q[3]);
  wait_empty(r, it);
  __syncwarp();
#pragma unroll
  for (int st = 0; st < kSteps; ++st) {
    const int gs = (st * (32 / kDimGroups) + lg + lane / 8) % 8;  // slot group: t = gs % 4, half = gs / 4
    const int t = gs % 4, half = gs / 4;
    const int k0 = warp * 32 + half * 16 + 2 * t;  // keys k0, k0 + 1, k0 + 8, k0 + 9
    const unsigned x0 = *reinterpret_cast<const unsigned*>(src_slot + k0 * D + 4 * m);
    const unsigned x1 = *reinterpret_cast<const unsigned*>(src_slot + (k0 + 1) * D + 4 * m);
    const unsigned x2 = *reinterpret_cast<const unsigned*>(src_slot + (k0 + 8) * D + 4 * m);
    const unsigned x3 = *reinterpret_cast<const unsigned*>(src_slot + (k0 + 9) * D + 4 * m);
    const int chunk = warp * 2 + half;  // 16-byte chunk of the row: slots 16 chunk .. + 15
    // p01 = {x0, x1 at byte q[0]; x0, x1 at byte q[1]}, p23 likewise at q[2], q[3]; the same
    // of x2, x3 in r01, r23; then row k takes its two halves from one p and one r.
    const unsigned p01 = __byte_perm(x0, x1, sel01), p23 = __byte_perm(x0, x1, sel23);
    const unsigned r01 = __byte_perm(x2, x3, sel01), r23 = __byte_perm(x2, x3, sel23);
    const unsigned y[4] = {__byte_perm(p01, r01, 0x5410), __byte_perm(p01, r01, 0x7632),
                           __byte_perm(p23, r23, 0x5410), __byte_perm(p23, r23, 0x7632)};
#pragma unroll
    for (int k = 0; k < 4; ++k)
      *reinterpret_cast<unsigned*>(dst + sm90::swizzled_offset(4 * m + q[k], chunk) + 4 * t) = y[k];
  }
  sm90::fence_proxy_async();
  sm90::mbar_arrive(r.full_bar(it));
}

// Producer warpgroup, FP8 cache with an E4M3 query: each K tile goes by cp.async straight into
// its ring stage (E4M3, swizzled; the products read it as it is), each V tile through a staging
// slot (two, in turn), then widened to FP16 by the threads that copied it or, with an E4M3 P
// (kTransposeV), transposed by the warps that copied it; K one step ahead of V as in the other
// producers.
template <int D, bool kTransposeV>
__device__ __forceinline__ void produce_fp8_query(const Sm90Params& p, const CtaWork& w, int n_tiles, const Ring& kr,
                                                  const Ring& vr, unsigned char* smem, uint32_t base,
                                                  uint32_t staging) {
  using TC = TileCopier<D, true>;
  const TC tc(p, w, n_tiles);
  auto copy_k = [&](int it, int64_t row_src) {
    wait_empty(kr, it);
    tc.copy_rows(kr.tile(it), p.k_cache, row_src, true);
    sm90::cp_async_arrive_noinc(kr.full_bar(it));
  };
  auto stage_v = [&](int it, int64_t row_src) {
    tc.copy_rows(staging + (it % 2) * kKeys * D, p.v_cache, row_src, false);
    sm90::cp_async_commit();
  };
  // Staging slot 0 may still be read by this warp's transpose of the previous item's last tile.
  if constexpr (kTransposeV) __syncwarp();
  int64_t src_cur = tc.row_source(0);
  copy_k(0, src_cur);
  stage_v(0, src_cur);
  for (int it = 0; it < n_tiles; ++it) {
    const int64_t src_next = it + 1 < n_tiles ? tc.row_source(it + 1) : -1;
    if (it + 1 < n_tiles) {
      copy_k(it + 1, src_next);
      // The slot of tile it + 1 was last read by this warp's transpose of tile it - 1 (a widen
      // reads only the thread's own copies).
      if constexpr (kTransposeV) __syncwarp();
      stage_v(it + 1, src_next);
      sm90::cp_async_wait<1>();  // V of tile it has landed (K copies fly in the newest group)
    } else {
      sm90::cp_async_wait<0>();
    }
    unsigned char* slot = smem + (staging - base) + (it % 2) * kKeys * D;
    if constexpr (kTransposeV) transpose_v_tile<D>(vr, it, slot, smem + (vr.tile(it) - base));
    else widen_tile<D>(tc, vr, it, slot, smem + (vr.tile(it) - base));
    src_cur = src_next;
  }
}

template <int D, Sm90Kv KV>
__device__ __forceinline__ void produce(const Sm90Params& p, const CtaWork& w, int n_tiles, const Ring& kr,
                                        const Ring& vr, unsigned char* smem, uint32_t base, uint32_t staging) {
  if (n_tiles == 0) return;
  if constexpr (query_fp8(KV)) produce_fp8_query<D, p_fp8(KV)>(p, w, n_tiles, kr, vr, smem, base, staging);
  else if constexpr (KV == Sm90Kv::kFp8) produce_fp8<D>(p, w, n_tiles, kr, vr, smem, base, staging);
  else produce_bf16<D>(p, w, n_tiles, kr, vr);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

}  // namespace lancet::cuda::prefill_sm90
