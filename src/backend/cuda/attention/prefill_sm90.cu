// Prompt-chunk attention for Hopper (sm_90a), FlashAttention-3's structure: a CTA of three
// warpgroups takes 128 query rows, each row one (token, query head of the group) pair so one
// K/V tile serves every head of a KV head's group. Warpgroup 0 is the producer: it gathers the
// K and V tiles (128 keys) page by page from the paged cache into 128-byte-swizzled shared
// memory (cp.async, 16 bytes per copy, zero-filled past the key range) through a two-stage
// ring handshaked by mbarriers. Warpgroups 1 and 2 are consumers of 64 rows each: S = Q K^T
// on wgmma with both operands in shared memory, the online softmax in registers, and
// O += P V on wgmma with P straight from the score registers; their matrix products and
// softmaxes interleave, so the tensor cores stay busy while one of them exponentiates. Key
// tiles run from the last (the causal diagonal, the only masked ones) to the first.
//
// BF16 caches only (FP8 caches take flash_prefill_gqa.cu). Q is rounded to BF16 and scaled in
// f32 on the scores; P is rounded to BF16; FP32 accumulation. Split-KV writes the partial
// results that launch_attention_reduce combines, like the other kernels.
#include <cuda_bf16.h>

#include "backend/cuda/attention/sm90_ptx.cuh"
#include "backend/cuda/attention_common.cuh"
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
  const __nv_bfloat16* k_cache; // [num_blocks, block_size, num_kv_heads, D]
  const __nv_bfloat16* v_cache;
  float* partial;               // [num_tokens, num_heads, num_splits, D + 2] when num_splits > 1
  unsigned* err;
  int64_t num_blocks;
  int num_seqs, num_heads, num_kv_heads, group, max_blocks_per_seq, block_size;
  int tokens_per_cta;  // kRows / group
  int tiles;           // bound on the (sequence, token tile) pairs of the batch
  int num_splits, split_len;
  float score_scale;   // softmax scale * log2(e): raw scores -> log2 units
};

// Shared memory: Q, then a ring of K tiles and a ring of V tiles (K is needed a turn before V,
// so its ring is deeper), then the rings' mbarriers: per stage a "full" barrier (the producer's
// 128 threads arrive as their copies land) and an "empty" one (the 8 consumer warps arrive
// when their products have read the stage).
template <int D>
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
  static constexpr int kBarOffset = kVOffset + kVStages * kTileBytes;
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

template <int D>
__device__ __forceinline__ Ring k_ring(uint32_t base) {
  using Ly = Sm90Layout<D>;
  return {base + Ly::kKOffset, base + Ly::kBarOffset, base + Ly::kBarOffset + 8 * Ly::kKStages, Ly::kKStages,
          Ly::kTileBytes};
}
template <int D>
__device__ __forceinline__ Ring v_ring(uint32_t base) {
  using Ly = Sm90Layout<D>;
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

// Producer warpgroup: copies the K tile then the V tile of each step (key tile n_tiles - 1 - it)
// into their rings, K one step ahead of V (the consumers multiply K a turn earlier). Lane l of
// warp w finds the cache row of tile row 32 w + l (one block-table read per row and tile); the
// warp then copies its 32 rows, kChunks 16-byte chunks each, taking each row's offset from the
// lane that found it. Each thread's copies arrive on the stage's full barrier as they land.
template <int D>
__device__ __forceinline__ void produce(const Sm90Params& p, const CtaWork& w, int n_tiles, const Ring& kr,
                                        const Ring& vr) {
  constexpr int kChunks = D / 8;              // 16-byte chunks per cache row
  constexpr int kRowsPerCopy = 32 / kChunks;  // rows one warp-wide copy covers
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int c = lane % kChunks, sub = lane / kChunks;
  const uint32_t col = static_cast<uint32_t>((c / 8) * kKeys * 128);
  const int32_t* table = p.block_tables + static_cast<int64_t>(w.seq) * p.max_blocks_per_seq;
  const int64_t head_off = static_cast<int64_t>(w.kvh) * D;
  const int64_t row_elems = static_cast<int64_t>(p.num_kv_heads) * D;
  // Element offset of this lane's row of tile it in the cache, or -1 (past the key range, or a
  // bad block id: zero-filled).
  auto row_source = [&](int it) -> int64_t {
    const int key = w.kb + (n_tiles - 1 - it) * kKeys + warp * 32 + lane;
    if (key >= w.ke) return -1;
    const int32_t blk = table[key / p.block_size];
    if (blk < 0 || blk >= p.num_blocks) {
      atomicOr(p.err, kErrBlockId);
      return -1;
    }
    return (static_cast<int64_t>(blk) * p.block_size + key % p.block_size) * row_elems + head_off;
  };
  auto copy_tile = [&](const Ring& r, int it, const __nv_bfloat16* cache, int64_t row_src) {
    if (it >= r.stages) sm90::mbar_wait(r.empty_bar(it), r.parity(it) ^ 1);
    const uint32_t dst0 = r.tile(it) + col;
#pragma unroll
    for (int i = 0; i < kChunks; ++i) {
      const int64_t src = __shfl_sync(0xffffffffu, row_src, i * kRowsPerCopy + sub);
      sm90::cp_async16(dst0 + sm90::swizzled_offset(warp * 32 + i * kRowsPerCopy + sub, c % 8),
                       cache + (src >= 0 ? src + c * 8 : 0), src >= 0 ? 16 : 0);
    }
    sm90::cp_async_arrive_noinc(r.full_bar(it));
  };
  if (n_tiles == 0) return;
  int64_t src_cur = row_source(0);
  copy_tile(kr, 0, p.k_cache, src_cur);
  for (int it = 0; it < n_tiles; ++it) {
    const int64_t src_next = it + 1 < n_tiles ? row_source(it + 1) : -1;
    if (it + 1 < n_tiles) copy_tile(kr, it + 1, p.k_cache, src_next);
    copy_tile(vr, it, p.v_cache, src_cur);
    src_cur = src_next;
  }
}

// Q rows of warpgroup wg (64 rows from CTA row 64 wg) as BF16 into the swizzled Q blocks.
template <int D>
__device__ __forceinline__ void load_q(const Sm90Params& p, const CtaWork& w, int wg, unsigned char* sq) {
  using Ly = Sm90Layout<D>;
  const int tid = threadIdx.x % 128;
  for (int idx = tid; idx < 64 * (D / 8); idx += 128) {
    const int r = wg * 64 + idx / (D / 8), c = idx % (D / 8);
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < w.rows) {
      const float* src =
          p.q + (static_cast<int64_t>(w.qs + w.q0 + r / p.group) * p.num_heads + w.kvh * p.group + r % p.group) * D +
          c * 8;
      const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
      v = make_uint4(pack_bf16(a.x, a.y), pack_bf16(a.z, a.w), pack_bf16(b.x, b.y), pack_bf16(b.z, b.w));
    }
    *reinterpret_cast<uint4*>(sq + (c / 8) * Ly::kQBlock + sm90::swizzled_offset(r, c % 8)) = v;
  }
}

// S = Q K^T for the warpgroup's 64 rows and the 128 keys of a K tile (issued, not waited for).
template <int D>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t sq, uint32_t sk, int wg) {
  using Ly = Sm90Layout<D>;
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) {
    const uint64_t da = sm90::desc_k_major(sq + (kk / 4) * Ly::kQBlock + wg * 64 * 128 + (kk % 4) * 32);
    const uint64_t db = sm90::desc_k_major(sk + (kk / 4) * Ly::kKvBlock + (kk % 4) * 32);
    sm90::wgmma_m64n128k16_ss_bf16(s, da, db, kk > 0);
  }
}

// O += P V with P in registers (issued, not waited for).
template <int D>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const unsigned (&pa)[kKeys / 16][4], uint32_t sv) {
  using Ly = Sm90Layout<D>;
#pragma unroll
  for (int t = 0; t < kKeys / 16; ++t) {
    const uint64_t db = sm90::desc_mn_major(sv + t * 16 * 128, Ly::kKvBlock);
    if constexpr (D == 128) sm90::wgmma_m64n128k16_rs_bf16(o, pa[t], db, 1);
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
// turns them into P (BF16, the wgmma A fragment) and rescales O.
template <int D>
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
      pa[j / 2][(j % 2) * 2 + h] = pack_bf16(p0, p1);
    }
    st.l[h] = st.l[h] * corr + sum;
#pragma unroll
    for (int j = 0; j < D / 8; ++j) {
      o[j * 4 + 2 * h] *= corr;
      o[j * 4 + 2 * h + 1] *= corr;
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
      const float inv = lv > 0.0f ? 1.0f / lv : 0.0f;
      float* dst = p.out + oh * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(dst + j * 8 + tig * 2) = make_float2(o[j * 4 + 2 * h] * inv, o[j * 4 + 2 * h + 1] * inv);
    } else {
      float* part = p.partial + (oh * p.num_splits + blockIdx.y) * (D + 2);
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(part + j * 8 + tig * 2) = make_float2(o[j * 4 + 2 * h], o[j * 4 + 2 * h + 1]);
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
template <int D>
__device__ __forceinline__ void consume(const Sm90Params& p, const CtaWork& w, int n_tiles, int wg,
                                        unsigned char* smem, uint32_t base, const Ring& kr, const Ring& vr) {
  const int tid = threadIdx.x % 128, warp = tid / 32, g = (tid % 32) / 4;
  const int G = p.group;
  load_q<D>(p, w, wg, smem);
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
    issue_qk<D>(s, base, kr.tile(0), wg);
    sm90::wgmma_commit();
    sm90::named_barrier_arrive(other, 256);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(s);
    release(kr, 0);
    if (live) softmax_tile<D>(s, pa, o, st, key0(0), w.ke, c);
    for (int it = 0; it + 1 < n_tiles; ++it) {
      acquire(vr, it);
      acquire(kr, it + 1);
      sm90::named_barrier_sync(me, 256);
      sm90::wgmma_fence();
      issue_pv<D>(o, pa, vr.tile(it));
      issue_qk<D>(s, base, kr.tile(it + 1), wg);
      sm90::wgmma_commit();
      sm90::named_barrier_arrive(other, 256);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(o);
      sm90::fence_regs(pa);
      sm90::fence_regs(s);
      release(vr, it);
      release(kr, it + 1);
      if (live) softmax_tile<D>(s, pa, o, st, key0(it + 1), w.ke, c);
    }
    const int last = n_tiles - 1;
    acquire(vr, last);
    sm90::named_barrier_sync(me, 256);
    sm90::wgmma_fence();
    issue_pv<D>(o, pa, vr.tile(last));
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

template <int D>
__global__ void __launch_bounds__(kThreads, 1) attention_prefill_sm90_kernel(const __grid_constant__ Sm90Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Ly = Sm90Layout<D>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = sm90::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms are 1024-byte periodic
  unsigned char* smem = smem_raw + (base - raw);
  const Ring kr = k_ring<D>(base), vr = v_ring<D>(base);

  const CtaWork w = locate_work(p);
  if (!w.ok) return;
  const int n_tiles = w.ke > w.kb ? (w.ke - w.kb + kKeys - 1) / kKeys : 0;
  if (threadIdx.x == 0) {
    for (const Ring* r : {&kr, &vr})
      for (int i = 0; i < r->stages; ++i) {
        sm90::mbar_init(r->full_bar(i), 128);  // one arrival per producer thread
        sm90::mbar_init(r->empty_bar(i), 8);   // one per consumer warp
      }
  }
  __syncthreads();
  const int wg = threadIdx.x / 128;
  if (wg == 0) {
    sm90::regs_dealloc<80>();
    produce<D>(p, w, n_tiles, kr, vr);
  } else {
    sm90::regs_alloc<208>();
    consume<D>(p, w, n_tiles, wg - 1, smem, base, kr, vr);
  }
#else
  __trap();  // launched only where the sm_90a image exists (attention_prefill_sm90_available)
#endif
}

template <int D>
cudaError_t launch_typed(const Sm90Params& p, cudaStream_t s) {
  cudaError_t e = allow_dynamic_smem<attention_prefill_sm90_kernel<D>>(Sm90Layout<D>::kSmem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(p.tiles) * static_cast<unsigned>(p.num_kv_heads),
                  static_cast<unsigned>(p.num_splits));
  attention_prefill_sm90_kernel<D><<<grid, kThreads, Sm90Layout<D>::kSmem, s>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool attention_prefill_sm90_available() {
  static const bool ok = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, attention_prefill_sm90_kernel<128>) != cudaSuccess) {
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
  if (c.dtype != DType::kBF16 || (c.head_dim != 64 && c.head_dim != 128)) return cudaErrorInvalidValue;
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
  p.k_cache = static_cast<const __nv_bfloat16*>(c.k);
  p.v_cache = static_cast<const __nv_bfloat16*>(c.v);
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
  p.score_scale = a.scale * kLog2e;
  const cudaError_t e = c.head_dim == 128 ? launch_typed<128>(p, s) : launch_typed<64>(p, s);
  if (e != cudaSuccess || p.num_splits == 1) return e;
  return launch_attention_reduce(p.partial, a.num_tokens * a.num_heads, p.num_splits, c.head_dim, p.out, s);
}

}  // namespace lancet::cuda
