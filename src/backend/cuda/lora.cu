// Multi-adapter LoRA on the CUDA backend (BGMV/SGMV style): lora_apply for up to
// kLoraMaxModules projections of one input (q, k and v) in two launches, for every slot at once,
// with bf16 factors and f32 accumulation.
//  - shrink, grid (K split, slot, module x row CTA): part[ks, k, j] = x[rows[k], K slice ks] .
//    A_s[j, K slice ks] for the slot's rows k and ranks j < rank_s. A decode step has few rows per
//    slot, so the input features are split over up to kMaxSplits CTAs per (module, slot): each
//    CTA reads its slice of x once per tile of rows and its slice of A once per tile, and every
//    A element is read from memory by exactly one CTA when a slot's rows are one tile.
//  - expand, grid (output tile of every module, slot, row CTA): y[rows[k], o] +=
//    (sum over ks of part[ks, k, :]) . B_s[o, :rank_s]; the partial sums are added in split
//    order (deterministic, no atomics) as the CTA stages the rows' scratch in shared memory.
// The partials of a split step live in the backend's workspace (kLoraPartialFloats); with one
// split, or when the workspace is too small, the shrink writes its sums into each module's own
// scratch ([num_rows, R]) and the expand reads them from there.
// Both grids depend only on host-known sizes (slots, the modules' shapes, the step's row count as
// an upper bound), so a captured graph replays them for any rows: each CTA reads its slot's
// segment (slot_start) from device memory and exits when the slot has no rows or rank 0.
// Both kernels are programmatic dependent launches (pdl.cuh): before pdl_wait they read only the
// factors and slot ranks (written by copies, never by a kernel), and the expand stages its B tile
// there, overlapping the shrink's tail.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/dynamic_smem.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"

namespace lancet::cuda {
namespace {

constexpr int kThreads = 256;  // both kernels
constexpr int kWarps = kThreads / 32;
constexpr int kTileRows = 8;           // rows computed together (both kernels)
constexpr int kGroupRanks = 4;         // ranks of one warp's shrink group
constexpr int kExpandOuts = kThreads;  // outputs per expand CTA, one per thread
constexpr int kMinRowsPerCta = 8;      // one tile: row CTAs run side by side, not one after another
constexpr int kMaxRowCtas = 64;
constexpr int64_t kShrinkTargetCtas = 192;  // K splits are added until the shrink has about this many CTAs
constexpr int64_t kMaxSplits = 16;
constexpr int64_t kSplitCols = 256;  // K slices are multiples of one warp step (32 lanes x 8 features)
// The expand stages its B tile before pdl_wait (overlapping the shrink). It then also reads the B
// of slots that have no rows in the step; false stages it only for slots with rows.
constexpr bool kPrefetchB = true;
static_assert(kMinRowsPerCta % kTileRows == 0, "row shares are whole tiles");
static_assert(kTileRows * kGroupRanks == 32, "the shrink's warp reduction handles 32 sums per lane");

struct ModuleParams {
  float* y = nullptr;                  // [num_tokens, out]
  float* part = nullptr;               // [splits, num_rows, R]
  const uint16_t* a = nullptr;         // [num_slots, R, in] bf16
  const uint16_t* b = nullptr;         // [num_slots, out, R] bf16
  const int32_t* slot_rank = nullptr;  // [num_slots]
  int64_t out = 0;
  int R = 0;
  int tile_begin = 0;  // the module's first output tile in the expand's grid
};

struct LoraParams {
  ModuleParams m[kLoraMaxModules];
  const float* x = nullptr;             // [num_tokens, in]
  const int32_t* rows = nullptr;        // [num_rows]
  const int32_t* slot_start = nullptr;  // [num_slots + 1]
  int64_t num_tokens = 0;
  int64_t num_rows = 0;
  int64_t in = 0;
  int64_t chunk = 0;  // input features per K split (a multiple of kSplitCols)
  int num_modules = 0;
  int splits = 1;
  unsigned* err = nullptr;
};

__device__ __forceinline__ float bf16_lo(unsigned w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16_hi(unsigned w) { return __uint_as_float(w & 0xffff0000u); }

// Slot s's rows [*begin, *end) of the step (after pdl_wait). False when it has none; bounds
// outside the step's rows also set the error bit (by the one thread whose `report` is true).
__device__ __forceinline__ bool slot_segment(const LoraParams& p, int s, bool report, int* begin, int* end) {
  const int b = p.slot_start[s], e = p.slot_start[s + 1];
  if (b < 0 || e < b || e > p.num_rows) {
    if (report) atomicOr(p.err, kErrLoraRows);
    return false;
  }
  *begin = b;
  *end = e;
  return b < e;
}

// The rows [*lo, *hi) (counted from the slot's first) of its n that row CTA z of Z handles:
// shares of whole tiles, at least kMinRowsPerCta rows each, so that few rows take one CTA.
__device__ __forceinline__ bool row_share(int n, int z, int Z, int* lo, int* hi) {
  int share = max((n + Z - 1) / Z, kMinRowsPerCta);
  share = (share + kTileRows - 1) / kTileRows * kTileRows;
  const int64_t l = static_cast<int64_t>(z) * share;
  if (l >= n) return false;
  *lo = static_cast<int>(l);
  *hi = static_cast<int>(min(static_cast<int64_t>(n), l + share));
  return true;
}

// ---- shrink ----

// 2H sums per lane -> the totals over the lanes that agree in bit 4 (all 32 lanes when 2H = 64)
// of sums 2 (lane % H) and 2 (lane % H) + 1 in v[0], v[1]: each step a lane keeps one half (its
// partner the other) and adds the partner's copy of it.
template <int H>
__device__ __forceinline__ void warp_reduce_scatter(float* v, unsigned lane) {
  constexpr int o = H / 2;
  const bool up = (lane & o) != 0;
#pragma unroll
  for (int q = 0; q < H; ++q) {
    const float send = up ? v[q] : v[q + H];
    const float keep = up ? v[q + H] : v[q];
    v[q] = keep + __shfl_xor_sync(0xffffffffu, send, o);
  }
  if constexpr (H > 2) warp_reduce_scatter<H / 2>(v, lane);
}

// G input features per load: 8 (16-byte loads of A, two float4 of x) or 1. A is constant (the
// read-only path); x was written by an earlier kernel (plain loads, after pdl_wait).
template <int G>
__device__ __forceinline__ void load_a(const uint16_t* p, float (&f)[G]) {
  if constexpr (G == 8) {
    const uint4 v = __ldg(reinterpret_cast<const uint4*>(p));
    f[0] = bf16_lo(v.x), f[1] = bf16_hi(v.x), f[2] = bf16_lo(v.y), f[3] = bf16_hi(v.y);
    f[4] = bf16_lo(v.z), f[5] = bf16_hi(v.z), f[6] = bf16_lo(v.w), f[7] = bf16_hi(v.w);
  } else {
    f[0] = __uint_as_float(static_cast<unsigned>(__ldg(p)) << 16);
  }
}

template <int G>
__device__ __forceinline__ void load_x(const float* p, float (&f)[G]) {
  if constexpr (G == 8) {
    const float4 lo = reinterpret_cast<const float4*>(p)[0];
    const float4 hi = reinterpret_cast<const float4*>(p)[1];
    f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w, f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
  } else {
    f[0] = *p;
  }
}

// Grid (K split, slot, module + num_modules x row CTA). The slot's ranks are taken in groups of
// kGroupRanks; up to kWarps groups at once, each by kWarps / groups warps that split the K slice
// (G features per lane and step). A lane accumulates kTileRows x kGroupRanks sums, reduced over
// the warp by shuffles and over the group's warps in shared memory (in warp order), into
// part[ks]. x and A are read once per tile of rows (x once per group, from L1 after the first).
template <int G>
__global__ void __launch_bounds__(kThreads, 2) lora_shrink_kernel(const __grid_constant__ LoraParams p) {
  const int ks = blockIdx.x, s = blockIdx.y;
  const int mi = static_cast<int>(blockIdx.z) % p.num_modules;
  const int z = static_cast<int>(blockIdx.z) / p.num_modules, Z = static_cast<int>(gridDim.z) / p.num_modules;
  const ModuleParams& M = p.m[mi];
  const int rank = min(__ldg(M.slot_rank + s), M.R);  // constant input: before the wait
  pdl_wait();
  const bool report = threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.z == 0;
  int begin, end, lo, hi;
  if (!slot_segment(p, s, report, &begin, &end) || rank <= 0) return;
  if (!row_share(end - begin, z, Z, &lo, &hi)) return;
  pdl_launch_dependents();  // the expand may start staging its B tiles

  const int64_t in = p.in, R = M.R;
  const int64_t kb = static_cast<int64_t>(ks) * p.chunk, ke = min(in, kb + p.chunk);
  const int ng = (rank + kGroupRanks - 1) / kGroupRanks;  // rank groups
  const int gpc = min(ng, kWarps);                          // groups computed at once
  const int wpg = kWarps / gpc;                             // warps per group
  const unsigned lane = threadIdx.x & 31;
  const int warp = static_cast<int>(threadIdx.x >> 5);
  const int gw = warp / wpg, sub = warp % wpg;
  const uint16_t* as = M.a + static_cast<int64_t>(s) * R * in;
  float* part = M.part + static_cast<int64_t>(ks) * p.num_rows * R;
  __shared__ float red[kWarps][kTileRows * kGroupRanks];

  // Sum q (row q / kGroupRanks, rank j0 + q % kGroupRanks) of a tile's group into part.
  auto store = [&](int t0, int nm, int j0, int q, float v) {
    const int m = q / kGroupRanks, j = j0 + q % kGroupRanks;
    if (m < nm && j < rank) part[static_cast<int64_t>(begin + t0 + m) * R + j] = v;
  };

  for (int t0 = lo; t0 < hi; t0 += kTileRows) {
    const int nm = min(kTileRows, hi - t0);
    const float* xr[kTileRows];
#pragma unroll
    for (int m = 0; m < kTileRows; ++m) {
      xr[m] = nullptr;
      if (m < nm) {
        const int tok = p.rows[begin + t0 + m];
        if (tok >= 0 && tok < p.num_tokens)
          xr[m] = p.x + static_cast<int64_t>(tok) * in;
        else if (threadIdx.x == 0 && ks == 0 && mi == 0)
          atomicOr(p.err, kErrLoraRows);  // its sums are zero; the expand skips the row
      }
    }
    for (int g0 = 0; g0 < ng; g0 += gpc) {
      const int g = g0 + gw;
      const bool on = gw < gpc && g < ng;  // warp-uniform
      const int j0 = g * kGroupRanks;
      const int nj = on ? min(kGroupRanks, rank - j0) : 0;
      float acc[kTileRows * kGroupRanks];
#pragma unroll
      for (int q = 0; q < kTileRows * kGroupRanks; ++q) acc[q] = 0.0f;
      if (on) {
        const int64_t step = static_cast<int64_t>(wpg) * 32 * G;
        for (int64_t i = kb + (static_cast<int64_t>(sub) * 32 + lane) * G; i < ke; i += step) {
          float a[kGroupRanks][G];
#pragma unroll
          for (int j = 0; j < kGroupRanks; ++j) {
            if (j < nj) {
              load_a<G>(as + (j0 + j) * in + i, a[j]);
            } else {
#pragma unroll
              for (int e = 0; e < G; ++e) a[j][e] = 0.0f;
            }
          }
#pragma unroll
          for (int m = 0; m < kTileRows; ++m) {
            if (!xr[m]) continue;
            float xv[G];
            load_x<G>(xr[m] + i, xv);
#pragma unroll
            for (int j = 0; j < kGroupRanks; ++j) {
              float v = acc[m * kGroupRanks + j];
#pragma unroll
              for (int e = 0; e < G; ++e) v = fmaf(xv[e], a[j][e], v);
              acc[m * kGroupRanks + j] = v;
            }
          }
        }
      }
      // 32 sums over 16-lane halves, then the two halves: lane l < 16 holds sums 2l, 2l + 1.
      warp_reduce_scatter<kTileRows * kGroupRanks / 2>(acc, lane);
      acc[0] += __shfl_xor_sync(0xffffffffu, acc[0], 16);
      acc[1] += __shfl_xor_sync(0xffffffffu, acc[1], 16);
      if (wpg == 1) {  // CTA-uniform
        if (on && lane < 16) {
          store(t0, nm, j0, 2 * lane, acc[0]);
          store(t0, nm, j0, 2 * lane + 1, acc[1]);
        }
      } else {
        if (lane < 16) *reinterpret_cast<float2*>(&red[warp][2 * lane]) = make_float2(acc[0], acc[1]);
        __syncthreads();
        if (static_cast<int>(threadIdx.x) < gpc * 32) {
          const int cg = static_cast<int>(threadIdx.x) / 32, q = static_cast<int>(threadIdx.x) % 32;
          float v = 0.0f;
          for (int u = 0; u < wpg; ++u) v += red[cg * wpg + u][q];
          if (g0 + cg < ng) store(t0, nm, (g0 + cg) * kGroupRanks, q, v);
        }
        __syncthreads();  // red is reused by the next group
      }
    }
  }
}

// ---- expand ----

// Shared memory of the expand: the B tile as [kExpandOuts][stride] words of two bf16 (ranks
// padded to a multiple of 4; an odd stride, so that the threads' rows fall in different banks),
// then the scratch tile as [kTileRows][R padded to a multiple of 4] f32.
__host__ __device__ constexpr int expand_words(int r) { return 2 * ((r + 3) / 4); }
__host__ __device__ constexpr int expand_b_stride(int R) { return expand_words(R) | 1; }
__host__ __device__ constexpr int expand_s_stride(int R) { return 2 * expand_words(R); }
constexpr int expand_smem_bytes(int R) {
  return (kExpandOuts * expand_b_stride(R) + kTileRows * expand_s_stride(R)) * 4;
}

// B tile: word w of output o holds B[o, 2w] (low half) and B[o, 2w + 1], zero past the rank, for
// w < expand_words(rank). VEC: R a multiple of 8, so B rows are loaded 16 bytes at a time (the
// columns past the rank are zero in memory).
template <bool VEC>
__device__ __forceinline__ void stage_b(const uint16_t* bsrc, int R, int rank, int no, int bs, unsigned* bt) {
  if constexpr (VEC) {
    const int per = (rank + 7) / 8;  // 16-byte loads per output: 4 per >= expand_words(rank) words
    for (int idx = threadIdx.x; idx < no * per; idx += kThreads) {
      const int o = idx / per, c = idx % per;
      const uint4 v = __ldg(reinterpret_cast<const uint4*>(bsrc + static_cast<int64_t>(o) * R) + c);
      unsigned* d = bt + o * bs + 4 * c;
      d[0] = v.x, d[1] = v.y, d[2] = v.z, d[3] = v.w;
    }
  } else {
    const int words = expand_words(rank);
    for (int idx = threadIdx.x; idx < no * words; idx += kThreads) {
      const int o = idx / words, w = idx % words;
      const uint16_t* src = bsrc + static_cast<int64_t>(o) * R + 2 * w;
      const unsigned l = 2 * w < rank ? __ldg(src) : 0u, h = 2 * w + 1 < rank ? __ldg(src + 1) : 0u;
      bt[o * bs + w] = l | (h << 16);
    }
  }
}

// Grid (output tile over all modules, slot, row CTA). The CTA stages B_s's rows of its outputs
// (the slot's rank columns) in shared memory once, then per tile of rows the rows' scratch (the
// partial sums of the K splits added in order); each thread owns one output and adds its dot
// products to y.
template <bool VEC>
__global__ void __launch_bounds__(kThreads) lora_expand_kernel(const __grid_constant__ LoraParams p) {
  extern __shared__ __align__(16) unsigned smem[];
  __shared__ int tok[kTileRows];
  const int tile = static_cast<int>(blockIdx.x);
  int mi = 0;
  while (mi + 1 < p.num_modules && tile >= p.m[mi + 1].tile_begin) ++mi;
  const ModuleParams& M = p.m[mi];
  const int s = blockIdx.y, z = blockIdx.z, Z = gridDim.z;
  const int64_t o0 = static_cast<int64_t>(tile - M.tile_begin) * kExpandOuts;
  const int R = M.R, bs = expand_b_stride(R), ss = expand_s_stride(R);
  const int rank = min(__ldg(M.slot_rank + s), R);  // constant input: before the wait
  const int no = static_cast<int>(min(static_cast<int64_t>(kExpandOuts), M.out - o0));
  unsigned* bt = smem;
  float* st = reinterpret_cast<float*>(smem + kExpandOuts * bs);
  const uint16_t* bsrc = M.b + (static_cast<int64_t>(s) * M.out + o0) * R;
  if constexpr (kPrefetchB) {
    if (rank > 0 && no > 0) stage_b<VEC>(bsrc, R, rank, no, bs, bt);
  }
  pdl_wait();
  const bool report = threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.z == 0;
  int begin, end, lo, hi;
  if (!slot_segment(p, s, report, &begin, &end) || rank <= 0 || no <= 0) return;
  if (!row_share(end - begin, z, Z, &lo, &hi)) return;
  if constexpr (!kPrefetchB) stage_b<VEC>(bsrc, R, rank, no, bs, bt);

  const int words = expand_words(rank), cols = 2 * words;  // ranks padded to a multiple of 4
  const int64_t split_stride = p.num_rows * R;
  for (int t0 = lo; t0 < hi; t0 += kTileRows) {
    const int nm = min(kTileRows, hi - t0);
    __syncthreads();  // the B tile is stored; the previous tile's scratch is used
    // Scratch rows of the tile, zero past the rank and for rows past the tile (the shrink wrote
    // only the slot's ranks).
    for (int idx = threadIdx.x; idx < kTileRows * cols; idx += kThreads) {
      const int m = idx / cols, j = idx % cols;
      float v = 0.0f;
      if (m < nm && j < rank) {
        const float* src = M.part + static_cast<int64_t>(begin + t0 + m) * R + j;
#pragma unroll 4
        for (int k = 0; k < p.splits; ++k) v += src[k * split_stride];
      }
      st[m * ss + j] = v;
    }
    if (threadIdx.x < kTileRows) {
      const int m = static_cast<int>(threadIdx.x);
      tok[m] = m < nm ? p.rows[begin + t0 + m] : -1;
    }
    __syncthreads();
    if (static_cast<int>(threadIdx.x) >= no) continue;
    float acc[kTileRows];
#pragma unroll
    for (int m = 0; m < kTileRows; ++m) acc[m] = 0.0f;
    const unsigned* brow = bt + threadIdx.x * bs;
    for (int w = 0; w < words; w += 2) {
      const unsigned u0 = brow[w], u1 = brow[w + 1];
      const float b0 = bf16_lo(u0), b1 = bf16_hi(u0), b2 = bf16_lo(u1), b3 = bf16_hi(u1);
#pragma unroll
      for (int m = 0; m < kTileRows; ++m) {
        if (m >= nm) break;
        const float4 sv = *reinterpret_cast<const float4*>(st + m * ss + 2 * w);
        acc[m] = fmaf(sv.w, b3, fmaf(sv.z, b2, fmaf(sv.y, b1, fmaf(sv.x, b0, acc[m]))));
      }
    }
#pragma unroll
    for (int m = 0; m < kTileRows; ++m) {
      if (m >= nm) break;
      const int t = tok[m];
      if (t < 0 || t >= p.num_tokens) continue;  // reported by the shrink
      float* yo = M.y + static_cast<int64_t>(t) * M.out + o0 + threadIdx.x;
      *yo += acc[m];
    }
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Row CTAs per slot: enough for the step's rows at kMinRowsPerCta each when they are spread
// over the slots, at most kMaxRowCtas. (Counted from all the rows, a decode step's few rows
// per slot would leave most row CTAs idle and give the working ones too few K splits; rows
// crowded into one slot take more rows per CTA instead.)
int64_t row_ctas(int64_t num_rows, int64_t num_slots) {
  return std::clamp<int64_t>(ceil_div(num_rows, kMinRowsPerCta * std::max<int64_t>(num_slots, 1)), 1, kMaxRowCtas);
}

// K splits of the shrink: enough for about kShrinkTargetCtas CTAs, at most kMaxSplits, slices of
// whole kSplitCols, and partials ([splits, num_rows, R] per module) within partial_floats.
int64_t split_count(int64_t num_modules, int64_t num_slots, int64_t num_rows, int64_t in,
                         int64_t rows_times_ranks, int64_t partial_floats) {
  if (num_modules <= 0 || num_slots <= 0 || num_rows <= 0 || in <= 0 || rows_times_ranks <= 0) return 1;
  int64_t splits = std::clamp<int64_t>(ceil_div(kShrinkTargetCtas, num_modules * num_slots * row_ctas(num_rows, num_slots)),
                                       1, kMaxSplits);
  splits = std::min(splits, partial_floats / rows_times_ranks);
  if (splits <= 1) return 1;
  return ceil_div(in, ceil_div(ceil_div(in, splits), kSplitCols) * kSplitCols);
}

}  // namespace

cudaError_t launch_lora_apply(std::span<const LoraApplyArgs> mods, float* partials, int64_t partial_floats,
                              unsigned* err, cudaStream_t s) {
  const int n = static_cast<int>(mods.size());
  if (n <= 0 || n > kLoraMaxModules) return cudaErrorInvalidValue;
  const LoraApplyArgs& a0 = mods[0];
  if (a0.rows.num_rows <= 0) return cudaSuccess;
  LoraParams p;
  p.x = a0.x;
  p.rows = a0.rows.rows;
  p.slot_start = a0.rows.slot_start;
  p.num_tokens = a0.num_tokens;
  p.num_rows = a0.rows.num_rows;
  p.in = a0.w->in;
  p.num_modules = n;
  p.err = err;
  const int64_t slots = a0.rows.num_slots;
  int64_t rows_times_ranks = 0, tiles = 0;
  int smem = 0;
  bool vec_b = true;
  for (int i = 0; i < n; ++i) {
    const LoraModuleWeights& w = *mods[i].w;
    ModuleParams& m = p.m[i];
    m.y = mods[i].y;
    m.a = static_cast<const uint16_t*>(w.a);
    m.b = static_cast<const uint16_t*>(w.b);
    m.slot_rank = w.slot_rank;
    m.out = w.out;
    m.R = static_cast<int>(w.max_rank);
    m.tile_begin = static_cast<int>(tiles);
    tiles += ceil_div(w.out, kExpandOuts);
    rows_times_ranks += p.num_rows * w.max_rank;
    smem = std::max(smem, expand_smem_bytes(m.R));
    vec_b = vec_b && w.max_rank % 8 == 0;
  }
  if (tiles > INT32_MAX || slots > 65535) return cudaErrorInvalidConfiguration;
  const int64_t splits = partials ? split_count(n, slots, p.num_rows, p.in, rows_times_ranks, partial_floats) : 1;
  p.splits = static_cast<int>(splits);
  p.chunk = splits == 1 ? p.in : ceil_div(ceil_div(p.in, splits), kSplitCols) * kSplitCols;
  int64_t off = 0;
  for (int i = 0; i < n; ++i) {
    if (splits == 1) {
      p.m[i].part = mods[i].scratch;
    } else {
      p.m[i].part = partials + off;
      off += splits * p.num_rows * p.m[i].R;
    }
  }

  const int64_t Z = row_ctas(p.num_rows, slots);
  const dim3 sgrid(static_cast<unsigned>(splits), static_cast<unsigned>(slots), static_cast<unsigned>(n * Z));
  const bool vec_a = p.in % 8 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  cudaError_t e = vec_a ? launch_pdl(lora_shrink_kernel<8>, sgrid, dim3(kThreads), 0, s, p)
                        : launch_pdl(lora_shrink_kernel<1>, sgrid, dim3(kThreads), 0, s, p);
  if (e != cudaSuccess) return e;
  // The opt-in covers the largest rank, once per kernel and device.
  e = vec_b ? allow_dynamic_smem<lora_expand_kernel<true>>(expand_smem_bytes(kLoraMaxRank))
            : allow_dynamic_smem<lora_expand_kernel<false>>(expand_smem_bytes(kLoraMaxRank));
  if (e != cudaSuccess) return e;
  const dim3 egrid(static_cast<unsigned>(tiles), static_cast<unsigned>(slots), static_cast<unsigned>(Z));
  return vec_b ? launch_pdl(lora_expand_kernel<true>, egrid, dim3(kThreads), static_cast<size_t>(smem), s, p)
               : launch_pdl(lora_expand_kernel<false>, egrid, dim3(kThreads), static_cast<size_t>(smem), s, p);
}

}  // namespace lancet::cuda
