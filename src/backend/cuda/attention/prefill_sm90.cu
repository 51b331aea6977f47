// Prompt-chunk attention for Hopper (sm_90a), FlashAttention-3's structure: a CTA of three
// warpgroups takes 128 query rows, each row one (token, query head of the group) pair so one
// K/V tile serves every head of a KV head's group. Warpgroup 0 is the producer: it gathers the
// K and V tiles (128 keys) page by page from the paged cache into 128-byte-swizzled shared
// memory (cp.async, 16 bytes per copy, zero-filled past the key range) through a ring of K
// tiles and a ring of V tiles, handshaked by mbarriers. Warpgroups 1 and 2 are consumers of 64
// rows each: S = Q K^T on wgmma with both operands in shared memory, the online softmax in
// registers, and O += P V on wgmma with P straight from the score registers; the two take
// turns on the tensor cores (named barriers), so one's softmax runs while the other's products
// do. Key tiles run from the last (the causal diagonal, the only masked ones) to the first,
// and CTAs from the batch's last token tile (the most keys) to its first.
//
// BF16 caches: Q and P rounded to BF16. FP8 E4M3 caches: the producer copies the E4M3 tiles
// into a staging area and widens them to FP16 (exact) in the rings; Q and P are rounded to
// FP16, the K scale goes into the score scale and the V scale onto the output. FP32
// accumulation; scores scaled in f32. Split-KV writes the partial results that
// launch_attention_merge combines, like the other kernels.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/attention/sm90_ptx.cuh"
#include "backend/cuda/attention/common.cuh"
#include "backend/cuda/dynamic_smem.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma.cuh"

namespace lancet::cuda {
namespace {

constexpr int kRows = 128;        // (token, head) rows per CTA
constexpr int kKeys = 128;        // keys per tile
constexpr int kThreads = 384;     // producer warpgroup + two consumer warpgroups
constexpr float kLog2e = 1.4426950408889634f;

struct Sm90Params {
  const float* q;               // [num_tokens, num_heads, D]
  float* out;                   // [num_tokens, num_heads, D]
  const int32_t* query_start;   // [num_seqs + 1]
  const int32_t* context_lens;  // [num_seqs]
  const int32_t* block_tables;  // [num_seqs, max_blocks_per_seq]
  const void* k_cache;          // [num_blocks, block_size, num_kv_heads, D] (bf16 or e4m3)
  const void* v_cache;
  float* partial;               // [num_tokens, num_heads, num_splits, D + 2] when num_splits > 1
  unsigned* err;
  int64_t num_blocks;
  int num_seqs, num_heads, num_kv_heads, group, max_blocks_per_seq, block_size;
  int tokens_per_cta;  // kRows / group
  int tiles;           // bound on the (sequence, token tile) pairs of the batch
  int num_splits, split_len;
  float score_scale;   // softmax scale * log2(e) (* K scale for fp8): raw scores -> log2 units
  float v_scale;       // V scale (fp8) or 1
};

// Shared memory: Q, then a ring of K tiles and a ring of V tiles (K is needed a turn before V,
// so its ring is deeper), then the rings' mbarriers: per stage a "full" barrier (the producer's
// 128 threads arrive as their copies land) and an "empty" one (the 8 consumer warps arrive
// when their products have read the stage).
// MMA operand type: BF16 for bf16 caches, FP16 for fp8 caches (E4M3 widens to FP16 exactly).
template <bool F8>
constexpr MmaType kMmaType = F8 ? MmaType::kF16 : MmaType::kBF16;

template <int D, bool F8>
struct Sm90Layout {
  static constexpr int kBlocks = D / 64;          // 128-byte column blocks per row
  static constexpr int kKStages = D == 128 ? 3 : 4;
  static constexpr int kVStages = D == 128 ? 2 : 4;
  static constexpr int kQBlock = kRows * 128;     // bytes of one Q column block
  static constexpr int kKvBlock = kKeys * 128;    // bytes of one K or V column block
  static constexpr int kQBytes = kBlocks * kQBlock;
  static constexpr int kTileBytes = kBlocks * kKvBlock;  // one K or V tile
  static constexpr int kKOffset = kQBytes;
  static constexpr int kVOffset = kKOffset + kKStages * kTileBytes;
  // FP8: two staging slots of raw E4M3 tiles (kKeys rows of D bytes).
  static constexpr int kRawTileBytes = kKeys * D;
  static constexpr int kStagingOffset = kVOffset + kVStages * kTileBytes;
  static constexpr int kBarOffset = kStagingOffset + (F8 ? 2 * kRawTileBytes : 0);
  static constexpr int kSmem = kBarOffset + 2 * (kKStages + kVStages) * 8 + 1024;  // + alignment slack
};

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// One ring of tiles in shared memory: tile i of the sequence sits in stage i % stages; its
// barriers' phase parity there is (i / stages) & 1.
struct Ring {
  uint32_t tiles, full, empty;  // shared addresses: first tile, first full / empty barrier
  int stages, tile_bytes;
  __device__ __forceinline__ uint32_t tile(int i) const { return tiles + (i % stages) * tile_bytes; }
  __device__ __forceinline__ uint32_t full_bar(int i) const { return full + 8 * (i % stages); }
  __device__ __forceinline__ uint32_t empty_bar(int i) const { return empty + 8 * (i % stages); }
  __device__ __forceinline__ unsigned parity(int i) const { return (i / stages) & 1; }
};

template <int D, bool F8>
__device__ __forceinline__ Ring k_ring(uint32_t base) {
  using Ly = Sm90Layout<D, F8>;
  return {base + Ly::kKOffset, base + Ly::kBarOffset, base + Ly::kBarOffset + 8 * Ly::kKStages, Ly::kKStages,
          Ly::kTileBytes};
}
template <int D, bool F8>
__device__ __forceinline__ Ring v_ring(uint32_t base) {
  using Ly = Sm90Layout<D, F8>;
  const uint32_t bars = base + Ly::kBarOffset + 16 * Ly::kKStages;
  return {base + Ly::kVOffset, bars, bars + 8 * Ly::kVStages, Ly::kVStages, Ly::kTileBytes};
}

// The CTA's (sequence, token tile), KV head and key range; ok = false when it has no rows.
struct CtaWork {
  bool ok;
  int seq, qs, q0, ntok, rows, pos0, kb, ke, kvh;
};

__device__ __forceinline__ CtaWork locate_work(const Sm90Params& p) {
  CtaWork w{};
  w.kvh = static_cast<int>(blockIdx.x % p.num_kv_heads);
  // Longest tiles first: the last tile of the batch (the most keys) starts first.
  int tile = p.tiles - 1 - static_cast<int>(blockIdx.x / p.num_kv_heads);
  const int tpc = p.tokens_per_cta;
  int s = 0, qlen = 0;
  for (; s < p.num_seqs; ++s) {
    w.qs = p.query_start[s];
    qlen = p.query_start[s + 1] - w.qs;
    const int tiles = (qlen + tpc - 1) / tpc;
    if (tile < tiles) break;
    tile -= tiles;
  }
  if (s >= p.num_seqs) return w;
  const int ctx = p.context_lens[s];
  if (qlen <= 0 || ctx < qlen || static_cast<int64_t>(ctx) > static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size) {
    if (threadIdx.x == 0 && blockIdx.y == 0) atomicOr(p.err, kErrSeqShape);
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
    w.kb = min(static_cast<int>(blockIdx.y) * p.split_len, w.ke);
    w.ke = min(w.kb + p.split_len, w.ke);
  }
  w.ok = true;
  return w;
}

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
  // Copies this thread's chunks of a tile to dst, BF16: swizzled into a ring stage, FP8: rows
  // of D bytes into a staging slot.
  __device__ __forceinline__ void copy_rows(uint32_t dst, const void* cache, int64_t row_src) const {
    const unsigned char* bytes = static_cast<const unsigned char*>(cache);
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int64_t src = __shfl_sync(0xffffffffu, row_src, i * kRowsPerCopy + sub);
      const uint32_t at = F8 ? static_cast<uint32_t>(row_of(i) * D + c * 16)
                             : (c / 8) * kKeys * 128 + sm90::swizzled_offset(row_of(i), c % 8);
      sm90::cp_async16(dst + at, bytes + (src >= 0 ? src + c * 16 : 0), src >= 0 ? 16 : 0);
    }
  }
};

__device__ __forceinline__ void wait_empty(const Ring& r, int it) {
  if (it >= r.stages) sm90::mbar_wait(r.empty_bar(it), r.parity(it) ^ 1);
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
    tc.copy_rows(r.tile(it), cache, row_src);
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
    if (is_v) wait_empty(vr, it);
    else wait_empty(kr, it);
    const unsigned char* src = smem + (staging - base) + slot * kKeys * D;
    unsigned char* dst = smem + ((is_v ? vr.tile(it) : kr.tile(it)) - base);
#pragma unroll
    for (int i = 0; i < TC::kChunks; ++i) {
      const uint4 raw = *reinterpret_cast<const uint4*>(src + tc.row_of(i) * D + tc.c * 16);
      uint4 lo, hi;
      fp8x16_to_f16(raw, &lo, &hi);
      // FP16 values c * 16 .. c * 16 + 15 of the row: chunks 2c and 2c + 1.
      const int blk = (2 * tc.c) / 8;
      *reinterpret_cast<uint4*>(dst + blk * kKeys * 128 + sm90::swizzled_offset(tc.row_of(i), (2 * tc.c) % 8)) = lo;
      *reinterpret_cast<uint4*>(dst + blk * kKeys * 128 + sm90::swizzled_offset(tc.row_of(i), (2 * tc.c + 1) % 8)) = hi;
    }
    sm90::fence_proxy_async();
    sm90::mbar_arrive(is_v ? vr.full_bar(it) : kr.full_bar(it));
  };
  // Copy jobs in order: K 0, then per step K it + 1 and V it; job q uses slot q % 2.
  int q = 0;
  int64_t src_cur = tc.row_source(0);
  tc.copy_rows(staging, p.k_cache, src_cur);
  sm90::cp_async_commit();
  bool prev_v = false;  // the job waiting to be widened: V (else K) of tile prev_tile
  int prev_tile = 0;
  auto next_job = [&](bool is_v, int it, int64_t row_src) {
    ++q;
    tc.copy_rows(staging + (q % 2) * kKeys * D, is_v ? p.v_cache : p.k_cache, row_src);
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

template <int D, bool F8>
__device__ __forceinline__ void produce(const Sm90Params& p, const CtaWork& w, int n_tiles, const Ring& kr,
                                        const Ring& vr, unsigned char* smem, uint32_t base, uint32_t staging) {
  if (n_tiles == 0) return;
  if constexpr (F8) produce_fp8<D>(p, w, n_tiles, kr, vr, smem, base, staging);
  else produce_bf16<D>(p, w, n_tiles, kr, vr);
}

// Q rows of warpgroup wg (64 rows from CTA row 64 wg), rounded to the MMA type, into the
// swizzled Q blocks.
template <int D, bool F8>
__device__ __forceinline__ void load_q(const Sm90Params& p, const CtaWork& w, int wg, unsigned char* sq) {
  using Ly = Sm90Layout<D, F8>;
  constexpr MmaType T = kMmaType<F8>;
  const int tid = threadIdx.x % 128;
  for (int idx = tid; idx < 64 * (D / 8); idx += 128) {
    const int r = wg * 64 + idx / (D / 8), c = idx % (D / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < w.rows) {
      const float* src =
          p.q + (static_cast<int64_t>(w.qs + w.q0 + r / p.group) * p.num_heads + w.kvh * p.group + r % p.group) * D +
          c * 8;
      const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
      v = make_uint4(pack2<T>(a.x, a.y), pack2<T>(a.z, a.w), pack2<T>(b.x, b.y), pack2<T>(b.z, b.w));
    }
    *reinterpret_cast<uint4*>(sq + (c / 8) * Ly::kQBlock + sm90::swizzled_offset(r, c % 8)) = v;
  }
}

// S = Q K^T for the warpgroup's 64 rows and the 128 keys of a K tile (issued, not waited for).
template <int D, bool F8>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t sq, uint32_t sk, int wg) {
  using Ly = Sm90Layout<D, F8>;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t da = sm90::desc_k_major(sq + (kk / 4) * Ly::kQBlock + wg * 64 * 128 + (kk % 4) * 32);
    const uint64_t db = sm90::desc_k_major(sk + (kk / 4) * Ly::kKvBlock + (kk % 4) * 32);
    if constexpr (F8) sm90::wgmma_m64n128k16_ss_f16(s, da, db, kk > 0);
    else sm90::wgmma_m64n128k16_ss_bf16(s, da, db, kk > 0);
  }
}

// O += P V with P in registers (issued, not waited for).
template <int D, bool F8>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const unsigned (&pa)[kKeys / 16][4], uint32_t sv) {
  using Ly = Sm90Layout<D, F8>;
#pragma unroll
  for (int t = 0; t < kKeys / 16; ++t) {
    const uint64_t db = sm90::desc_mn_major(sv + t * 16 * 128, Ly::kKvBlock);
    if constexpr (D == 128 && F8) sm90::wgmma_m64n128k16_rs_f16(o, pa[t], db, 1);
    else if constexpr (D == 128) sm90::wgmma_m64n128k16_rs_bf16(o, pa[t], db, 1);
    else if constexpr (F8) sm90::wgmma_m64n64k16_rs_f16(o, pa[t], db, 1);
    else sm90::wgmma_m64n64k16_rs_bf16(o, pa[t], db, 1);
  }
}

// This thread's rows of a warpgroup: positions, and the online-softmax state.
struct RowState {
  int qpos[2];          // rows g and g + 8 of the thread's warp
  int first_pos;        // the warpgroup's first row
  float m[2], l[2];     // running maximum (raw score units) and sum
};

// Masks the scores of the tile at k0 where it reaches past a row's position (or the key range),
// turns them into P (the MMA type, the wgmma A fragment) and rescales O.
template <int D, MmaType T>
__device__ __forceinline__ void softmax_tile(float (&s)[64], unsigned (&pa)[kKeys / 16][4], float (&o)[D / 2],
                                             RowState& st, int k0, int ke, float c) {
  const int tig = threadIdx.x % 4;
  if (k0 + kKeys - 1 > st.first_pos || k0 + kKeys > ke) {
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int kpos = k0 + j * 8 + tig * 2 + (e & 1);
        if (kpos > st.qpos[e >> 1] || kpos >= ke) s[j * 4 + e] = -INFINITY;
      }
  }
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float mx = -INFINITY;
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) mx = fmaxf(mx, fmaxf(s[j * 4 + 2 * h], s[j * 4 + 2 * h + 1]));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    mx = fmaxf(st.m[h], mx);
    // Rows with every key masked so far keep m = -inf; 0 as their base makes every p 0.
    const float base_l2 = mx == -INFINITY ? 0.0f : mx * c;
    const float corr = sm90::fast_exp2(st.m[h] * c - base_l2);
    st.m[h] = mx;
    float sum = 0.0f;
#pragma unroll
    for (int j = 0; j < kKeys / 8; ++j) {
      const float p0 = sm90::fast_exp2(fmaf(s[j * 4 + 2 * h], c, -base_l2));
      const float p1 = sm90::fast_exp2(fmaf(s[j * 4 + 2 * h + 1], c, -base_l2));
      sum += p0 + p1;
      pa[j / 2][(j % 2) * 2 + h] = pack2<T>(p0, p1);
    }
    st.l[h] = st.l[h] * corr + sum;
    // Once the maxima settle, corr is exactly 1 in every lane and the rescale is skipped.
    if (__any_sync(0xffffffffu, corr != 1.0f)) {
#pragma unroll
      for (int j = 0; j < D / 8; ++j) {
        o[j * 4 + 2 * h] *= corr;
        o[j * 4 + 2 * h + 1] *= corr;
      }
    }
  }
}

// Normalizes and stores the warpgroup's rows (or writes this split's partial result).
template <int D>
__device__ __forceinline__ void store_rows(const Sm90Params& p, const CtaWork& w, int row0, const float (&o)[D / 2],
                                           const RowState& st) {
  const int tid = threadIdx.x % 128, warp = tid / 32, g = (tid % 32) / 4, tig = tid % 4;
  const int G = p.group;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float lv = st.l[h];
    lv += __shfl_xor_sync(0xffffffffu, lv, 1);
    lv += __shfl_xor_sync(0xffffffffu, lv, 2);
    const int r = row0 + warp * 16 + g + 8 * h;
    if (r >= w.rows) continue;
    const int64_t oh = static_cast<int64_t>(w.qs + w.q0 + r / G) * p.num_heads + w.kvh * G + r % G;
    if (p.num_splits == 1) {
      const float inv = lv > 0.0f ? p.v_scale / lv : 0.0f;
      float* dst = p.out + oh * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(dst + j * 8 + tig * 2) = make_float2(o[j * 4 + 2 * h] * inv, o[j * 4 + 2 * h + 1] * inv);
    } else {
      float* part = p.partial + (oh * p.num_splits + blockIdx.y) * (D + 2);
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(part + j * 8 + tig * 2) =
            make_float2(o[j * 4 + 2 * h] * p.v_scale, o[j * 4 + 2 * h + 1] * p.v_scale);
      if (tig == 0) {
        part[D] = st.m[h] * p.score_scale;  // log2 units
        part[D + 1] = lv;
      }
    }
  }
}

// Consumer warpgroup wg (0 or 1): rows 64 wg .. 64 wg + 63 of the CTA. Its tensor-core work
// comes in windows - QK of the first tile; then PV of tile i with QK of tile i + 1; then the
// last PV - and the two warpgroups take turns (named barriers 3 + wg), so one's softmax runs
// while the other's products occupy the tensor cores. Both run the same n_tiles + 1 windows and
// multiply every tile, also where all of a warpgroup's rows are masked (their P is 0), so the
// turns stay paired and the products are never on a divergent path.
template <int D, bool F8>
__device__ __forceinline__ void consume(const Sm90Params& p, const CtaWork& w, int n_tiles, int wg,
                                        unsigned char* smem, uint32_t base, const Ring& kr, const Ring& vr) {
  const int tid = threadIdx.x % 128, warp = tid / 32, g = (tid % 32) / 4;
  const int G = p.group;
  constexpr MmaType T = kMmaType<F8>;
  load_q<D, F8>(p, w, wg, smem);
  sm90::fence_proxy_async();
  sm90::named_barrier_sync(1 + wg, 128);

  const int row0 = wg * 64;
  RowState st;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    st.qpos[h] = w.pos0 + min((row0 + warp * 16 + g + 8 * h) / G, w.ntok - 1);
    st.m[h] = -INFINITY;
    st.l[h] = 0.0f;
  }
  const bool live = row0 < w.rows;
  st.first_pos = w.pos0 + min(row0 / G, w.ntok - 1);
  const float c = p.score_scale;
  auto key0 = [&](int it) { return w.kb + (n_tiles - 1 - it) * kKeys; };
  auto acquire = [&](const Ring& r, int it) {
    sm90::mbar_wait(r.full_bar(it), r.parity(it));
    sm90::fence_proxy_async();  // the copies' generic-proxy writes, before wgmma reads them
  };
  auto release = [&](const Ring& r, int it) {
    __syncwarp();
    if (threadIdx.x % 32 == 0) sm90::mbar_arrive(r.empty_bar(it));
  };
  const int me = 3 + wg, other = 3 + (wg ^ 1);

  float o[D / 2];
#pragma unroll
  for (int i = 0; i < D / 2; ++i) o[i] = 0.0f;
  float s[64];
  unsigned pa[kKeys / 16][4];
  if (n_tiles > 0) {
    if (wg == 1) sm90::named_barrier_arrive(3, 256);  // warpgroup 0 takes the first turn
    acquire(kr, 0);
    sm90::named_barrier_sync(me, 256);
    sm90::wgmma_fence();
    issue_qk<D, F8>(s, base, kr.tile(0), wg);
    sm90::wgmma_commit();
    sm90::named_barrier_arrive(other, 256);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(s);
    release(kr, 0);
    if (live) softmax_tile<D, T>(s, pa, o, st, key0(0), w.ke, c);
    for (int it = 0; it + 1 < n_tiles; ++it) {
      acquire(vr, it);
      acquire(kr, it + 1);
      sm90::named_barrier_sync(me, 256);
      sm90::wgmma_fence();
      issue_pv<D, F8>(o, pa, vr.tile(it));
      issue_qk<D, F8>(s, base, kr.tile(it + 1), wg);
      sm90::wgmma_commit();
      sm90::named_barrier_arrive(other, 256);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(o);
      sm90::fence_regs(pa);
      sm90::fence_regs(s);
      release(vr, it);
      release(kr, it + 1);
      if (live) softmax_tile<D, T>(s, pa, o, st, key0(it + 1), w.ke, c);
    }
    const int last = n_tiles - 1;
    acquire(vr, last);
    sm90::named_barrier_sync(me, 256);
    sm90::wgmma_fence();
    issue_pv<D, F8>(o, pa, vr.tile(last));
    sm90::wgmma_commit();
    if (wg == 0) sm90::named_barrier_arrive(other, 256);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(o);
    sm90::fence_regs(pa);
    release(vr, last);
  }
  store_rows<D>(p, w, row0, o, st);
}

#endif  // __CUDA_ARCH_FEAT_SM90_ALL

template <int D, bool F8>
__global__ void __launch_bounds__(kThreads, 1) attention_prefill_sm90_kernel(const __grid_constant__ Sm90Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Ly = Sm90Layout<D, F8>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = sm90::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms are 1024-byte periodic
  unsigned char* smem = smem_raw + (base - raw);
  const Ring kr = k_ring<D, F8>(base), vr = v_ring<D, F8>(base);

  const CtaWork w = locate_work(p);
  if (!w.ok) return;
  const int n_tiles = w.ke > w.kb ? (w.ke - w.kb + kKeys - 1) / kKeys : 0;
  if (threadIdx.x == 0) {
    for (int i = 0; i < kr.stages; ++i) {
      sm90::mbar_init(kr.full_bar(i), 128);  // one arrival per producer thread
      sm90::mbar_init(kr.empty_bar(i), 8);   // one per consumer warp
    }
    for (int i = 0; i < vr.stages; ++i) {
      sm90::mbar_init(vr.full_bar(i), 128);
      sm90::mbar_init(vr.empty_bar(i), 8);
    }
  }
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    sm90::regs_dealloc<80>();
    produce<D, F8>(p, w, n_tiles, kr, vr, smem, base, base + Ly::kStagingOffset);
  } else {
    sm90::regs_alloc<208>();
    consume<D, F8>(p, w, n_tiles, wg - 1, smem, base, kr, vr);
  }
#else
  __trap();  // launched only where the sm_90a image exists (attention_prefill_sm90_available)
#endif
}

template <int D, bool F8>
cudaError_t launch_typed(const Sm90Params& p, cudaStream_t s) {
  constexpr int kSmem = Sm90Layout<D, F8>::kSmem;
  cudaError_t e = allow_dynamic_smem<attention_prefill_sm90_kernel<D, F8>>(kSmem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(p.tiles) * static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(p.num_splits));
  attention_prefill_sm90_kernel<D, F8><<<grid, kThreads, kSmem, s>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool attention_prefill_sm90_available() {
  static const bool ok = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, attention_prefill_sm90_kernel<128, false>) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.binaryVersion == 90;
  }();
  return ok;
}

cudaError_t launch_attention_prefill_sm90(const PagedAttentionArgs& a, const KvCacheLayer& c,
                                          const AttentionPlan& plan, unsigned* err, cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (a.num_tokens > 0x3fffffffLL || a.num_seqs <= 0 || c.num_kv_heads <= 0 || a.num_heads % c.num_kv_heads != 0)
    return cudaErrorInvalidValue;
  if ((c.dtype != DType::kBF16 && c.dtype != DType::kF8E4M3) || (c.head_dim != 64 && c.head_dim != 128))
    return cudaErrorInvalidValue;
  const bool fp8 = c.dtype == DType::kF8E4M3;
  const int64_t group = a.num_heads / c.num_kv_heads;
  if (group > kRows) return cudaErrorInvalidValue;
  if (plan.num_splits < 1 || (plan.num_splits > 1 && (!plan.partial || plan.split_len <= 0)))
    return cudaErrorInvalidValue;
  Sm90Params p{};
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
  p.group = static_cast<int>(group);
  p.max_blocks_per_seq = static_cast<int>(a.max_blocks_per_seq);
  p.block_size = static_cast<int>(c.block_size);
  p.tokens_per_cta = static_cast<int>(kRows / group);
  // At most one partial tile per sequence beyond num_tokens / tokens_per_cta.
  p.tiles = static_cast<int>((a.num_tokens + p.tokens_per_cta - 1) / p.tokens_per_cta + a.num_seqs);
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  p.score_scale = a.scale * kLog2e * (fp8 ? c.k_scale : 1.0f);
  p.v_scale = fp8 ? c.v_scale : 1.0f;
  const cudaError_t e = c.head_dim == 128 ? (fp8 ? launch_typed<128, true>(p, s) : launch_typed<128, false>(p, s))
                                          : (fp8 ? launch_typed<64, true>(p, s) : launch_typed<64, false>(p, s));
  if (e != cudaSuccess || p.num_splits == 1) return e;
  return launch_attention_merge(p.partial, a.num_tokens * a.num_heads, p.num_splits, c.head_dim, p.out, s);
}

}  // namespace lancet::cuda
