// Multi-adapter LoRA on the CUDA backend (BGMV/SGMV style): lora_apply for up to
// kLoraMaxModules projections of one input (q, k and v) in two launches, for every slot at once,
// on the tensor cores (bf16 m16n8k16 MMA, f32 accumulation).
//  - shrink, grid (K split, slot, module + num_modules x row CTA): part[ks, k, j] = x[rows[k], K
//    slice ks] . A_s[j, K slice ks] for the slot's rows k and ranks j < rank_s. The MMA's M is
//    the ranks (A_s rows, 64 per pass), N the step's rows (8 per tile), K the input features;
//    each of the four warps takes every fourth 32-feature step of the CTA's slice and the warps'
//    sums are added in warp order. A decode step has few rows per slot, so the input features are
//    split over up to kMaxSplits CTAs per (module, slot), chosen from the shapes and the slot
//    count only: every A element is read by one CTA per row CTA, and a row's sums do not depend
//    on the other rows of the step.
//  - expand, grid (128-output tile of every module, slot, row CTA): y[rows[k], o] +=
//    (sum over ks of part[ks, k, :]) . B_s[o, :rank_s], M the outputs (B_s rows), N the rows, K
//    the ranks. The partial sums are added in split order (deterministic, no atomics) as the CTA
//    stages 32 rows of scratch in shared memory.
// x and the scratch enter the MMA as bf16 pairs hi + lo (x = hi + lo to about 16 bits), so the
// result keeps f32-level accuracy in the activations; the factors are bf16 as stored.
// Inside a 32-feature step, lane t of a quad holds features 8t..8t+7 of its row in both
// operands (one 16-byte load of A or B); the first MMA takes 8t..8t+3 of every lane and the
// second 8t+4..8t+7, a permutation of the reduction index that both operands share.
// The partials of a split step live in the backend's workspace (kLoraPartialFloats); with one
// split, or when the workspace is too small, the shrink writes its sums into each module's own
// scratch ([num_rows, R]) and the expand reads them from there.
// Both grids depend only on host-known sizes (slots, the modules' shapes, the step's row count as
// an upper bound), so a captured graph replays them for any rows: each CTA reads its slot's
// segment (slot_start) from device memory and exits when the slot has no rows or rank 0.
// Both kernels are programmatic dependent launches (pdl.cuh): before pdl_wait they read only the
// factors and slot ranks (written by copies, never by a kernel), and the expand loads its first
// B fragments there, overlapping the shrink's tail.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "backend/cuda/kernels.h"
#include "backend/cuda/mma.cuh"
#include "backend/cuda/pdl.cuh"

namespace lancet::cuda {
namespace {

constexpr int kThreads = 128;  // both kernels: four warps
constexpr int kWarps = kThreads / 32;
constexpr int kStepK = 32;                      // reduction elements per warp step: two k16 MMAs
constexpr int kSliceUnit = kWarps * kStepK;     // K slices are multiples of one CTA step
constexpr int kRankGroup = 64;                  // ranks per shrink pass
constexpr int kRankTiles = kRankGroup / 16;     // 16-rank MMA tiles per pass
constexpr int kChunkRows = 32;                  // rows per expand pass (and per large shrink pass)
constexpr int kExpandOuts = kWarps * 32;        // outputs per expand CTA: two 16-output tiles per warp
constexpr int kMaxRankSteps = static_cast<int>(kLoraMaxRank) / kStepK;
constexpr int kPreSteps = 2;                    // B steps the expand loads before pdl_wait
constexpr int kStageElems = 4;                  // scratch elements per thread and staging round
constexpr int kRowsPerCta = 32;                 // row CTAs: one per this many rows per slot on average
constexpr int kMaxRowCtas = 64;
constexpr int64_t kTargetCtas = 264;            // the shrink's K split aims at two CTAs per SM
constexpr int64_t kMaxSplits = 16;
static_assert(kLoraMaxRank % kStepK == 0, "whole rank steps");

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
  int64_t chunk = 0;  // input features per K split (a multiple of kSliceUnit)
  int num_modules = 0;
  int splits = 1;
  unsigned* err = nullptr;
};

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
// shares of whole `unit`s, so that few rows take one CTA.
__device__ __forceinline__ bool row_share(int n, int z, int Z, int unit, int* lo, int* hi) {
  int share = max((n + Z - 1) / Z, unit);
  share = (share + unit - 1) / unit * unit;
  const int64_t l = static_cast<int64_t>(z) * share;
  if (l >= n) return false;
  *lo = static_cast<int>(l);
  *hi = static_cast<int>(min(static_cast<int64_t>(n), l + share));
  return true;
}

// Eight bf16 at p[0..8) as four words (element 2w in the low half of word w), zero past `n`
// elements. VEC: one 16-byte load (p 16-byte aligned, n >= 8 or n <= 0). The factors are
// constant (the read-only path).
template <bool VEC>
__device__ __forceinline__ uint4 load_bf16x8(const uint16_t* p, int64_t n) {
  if (n <= 0) return make_uint4(0, 0, 0, 0);
  if constexpr (VEC) {
    return __ldg(reinterpret_cast<const uint4*>(p));
  } else {
    unsigned w[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const unsigned l = 2 * i < n ? __ldg(p + 2 * i) : 0u, h = 2 * i + 1 < n ? __ldg(p + 2 * i + 1) : 0u;
      w[i] = l | (h << 16);
    }
    return make_uint4(w[0], w[1], w[2], w[3]);
  }
}

// Eight f32 of x at p[0..8), zero past n (x was written by an earlier kernel: plain loads).
template <bool VEC>
__device__ __forceinline__ void load_f32x8(const float* p, int64_t n, float (&f)[8]) {
  if (VEC && n >= 8) {
    const float4 lo = reinterpret_cast<const float4*>(p)[0], hi = reinterpret_cast<const float4*>(p)[1];
    f[0] = lo.x, f[1] = lo.y, f[2] = lo.z, f[3] = lo.w, f[4] = hi.x, f[5] = hi.y, f[6] = hi.z, f[7] = hi.w;
  } else {
#pragma unroll
    for (int i = 0; i < 8; ++i) f[i] = i < n ? p[i] : 0.0f;
  }
}

// v = hi + lo with hi and lo bf16: the pair of an f32 operand.
__device__ __forceinline__ void split_bf16(float a, float b, unsigned* hi, unsigned* lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(a, b);
  const float2 hf = __bfloat1622float2(h);
  *hi = *reinterpret_cast<const unsigned*>(&h);
  *lo = pack_bf16(a - hf.x, b - hf.y);
}

// The two k16 MMAs of one 32-element step: fragment rows g and g + 8 of the A operand in a0, a1
// (eight elements each), the B operand's eight elements of column g as hi + lo pairs.
__device__ __forceinline__ void mma_step(float (&c)[4], const uint4& a0, const uint4& a1, const unsigned (&bh)[4],
                                         const unsigned (&bl)[4]) {
  const unsigned f0[4] = {a0.x, a1.x, a0.y, a1.y}, f1[4] = {a0.z, a1.z, a0.w, a1.w};
  mma_bf16(c, f0, bh[0], bh[1]);
  mma_bf16(c, f0, bl[0], bl[1]);
  mma_bf16(c, f1, bh[2], bh[3]);
  mma_bf16(c, f1, bl[2], bl[3]);
}

// ---- shrink ----

// Grid (K split, slot, module + num_modules x row CTA). Per pass of NT x 8 rows and 64 ranks,
// warp w accumulates the 32-feature steps w, w + 4, ... of the CTA's K slice; warps 1..3 leave
// their sums in shared memory and warp 0 adds them in order and stores the slot's ranks.
template <bool VEC, int NT>
__global__ void __launch_bounds__(kThreads) lora_shrink_kernel(const __grid_constant__ LoraParams p) {
  const int ks = blockIdx.x, s = blockIdx.y;
  const int mi = static_cast<int>(blockIdx.z) % p.num_modules;
  const int z = static_cast<int>(blockIdx.z) / p.num_modules, Z = static_cast<int>(gridDim.z) / p.num_modules;
  const ModuleParams& M = p.m[mi];
  const int R = M.R;
  const int rank = min(__ldg(M.slot_rank + s), R);  // constant input: before the wait
  pdl_wait();
  const bool report = threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.z == 0;
  int begin, end, lo, hi;
  if (!slot_segment(p, s, report, &begin, &end) || rank <= 0) return;
  if (!row_share(end - begin, z, Z, NT * 8, &lo, &hi)) return;
  pdl_launch_dependents();  // the expand may start loading its B fragments

  const int64_t in = p.in;
  const int64_t kb = static_cast<int64_t>(ks) * p.chunk, ke = min(in, kb + p.chunk);
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const uint16_t* as = M.a + static_cast<int64_t>(s) * R * in;
  float* part = M.part + static_cast<int64_t>(ks) * p.num_rows * R;
  __shared__ float red[kWarps - 1][kRankTiles * NT * 4][32];

  for (int r0 = lo; r0 < hi; r0 += NT * 8) {
    const int nr = min(NT * 8, hi - r0);
    const float* xr[NT];  // this lane's row of each 8-row tile (null: none)
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      const int m = nt * 8 + g;
      xr[nt] = nullptr;
      if (m < nr) {
        const int tok = p.rows[begin + r0 + m];
        if (tok >= 0 && tok < p.num_tokens)
          xr[nt] = p.x + static_cast<int64_t>(tok) * in;
        else if (t == 0 && ks == 0 && mi == 0)
          atomicOr(p.err, kErrLoraRows);  // its sums are zero; the expand skips the row
      }
    }
    for (int j0 = 0; j0 < rank; j0 += kRankGroup) {
      const int mtn = min(kRankTiles, (rank - j0 + 15) / 16);  // tiles with ranks of the slot
      float acc[kRankTiles][NT][4];
#pragma unroll
      for (int mt = 0; mt < kRankTiles; ++mt)
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int c = 0; c < 4; ++c) acc[mt][nt][c] = 0.0f;
#pragma unroll 2
      for (int64_t k0 = kb + warp * kStepK; k0 < ke; k0 += kSliceUnit) {
        const int64_t k = k0 + 8 * t, left = ke - k;
        uint4 a[kRankTiles][2];
#pragma unroll
        for (int mt = 0; mt < kRankTiles; ++mt)
#pragma unroll
          for (int h = 0; h < 2; ++h) {
            const int j = j0 + mt * 16 + h * 8 + g;
            a[mt][h] = mt < mtn && j < rank ? load_bf16x8<VEC>(as + static_cast<int64_t>(j) * in + k, left)
                                            : make_uint4(0, 0, 0, 0);
          }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if (nt * 8 >= nr) break;  // warp-uniform
          float xv[8];
          if (xr[nt]) {
            load_f32x8<VEC>(xr[nt] + k, left, xv);
          } else {
#pragma unroll
            for (int i = 0; i < 8; ++i) xv[i] = 0.0f;
          }
          unsigned bh[4], bl[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) split_bf16(xv[2 * i], xv[2 * i + 1], &bh[i], &bl[i]);
#pragma unroll
          for (int mt = 0; mt < kRankTiles; ++mt)
            if (mt < mtn) mma_step(acc[mt][nt], a[mt][0], a[mt][1], bh, bl);
        }
      }
      // Sums over the warps (in warp order), then the slot's ranks of the pass's rows into part:
      // c0, c1 are rank g of rows 2t, 2t + 1 of the tile, c2, c3 rank g + 8.
      if (warp > 0) {
#pragma unroll
        for (int mt = 0; mt < kRankTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) red[warp - 1][(mt * NT + nt) * 4 + c][lane] = acc[mt][nt][c];
      }
      __syncthreads();
      if (warp == 0) {
#pragma unroll
        for (int mt = 0; mt < kRankTiles; ++mt)
#pragma unroll
          for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int c = 0; c < 4; ++c) {
              float v = acc[mt][nt][c];
#pragma unroll
              for (int w = 0; w < kWarps - 1; ++w) v += red[w][(mt * NT + nt) * 4 + c][lane];
              const int j = j0 + mt * 16 + g + (c >= 2 ? 8 : 0), m = nt * 8 + 2 * t + (c & 1);
              if (j < rank && m < nr) part[static_cast<int64_t>(begin + r0 + m) * R + j] = v;
            }
      }
      __syncthreads();  // red is reused by the next pass
    }
  }
}

// ---- expand ----

// Scratch rows in shared memory: bf16, a row stride of 16 words past a multiple of 32 (the 16-byte
// fragment loads of two rows fall in different banks).
__host__ __device__ constexpr int scratch_stride(int R) { return (R + 63) / 64 * 64 + 32; }

// B_s's eight ranks 8t + [0, 8) of step `step` for output o (zero past the module's outputs).
template <bool VEC>
__device__ __forceinline__ uint4 load_b(const uint16_t* bs, int64_t out, int R, int64_t o, int step, int t) {
  const int k = step * kStepK + 8 * t;
  if (o >= out) return make_uint4(0, 0, 0, 0);
  return load_bf16x8<VEC>(bs + o * R + k, R - k);
}

// Grid (output tile over all modules, slot, row CTA). Warp w owns outputs o0 + 32w + [0, 32) as
// two 16-output MMA tiles; per pass of 32 rows the CTA stages the rows' scratch (the K splits'
// partial sums added in order, as hi + lo bf16) and tokens in shared memory, and each warp adds
// its products to y.
template <bool VEC>
__global__ void __launch_bounds__(kThreads) lora_expand_kernel(const __grid_constant__ LoraParams p) {
  __shared__ __align__(16) uint16_t sh[kChunkRows * scratch_stride(kLoraMaxRank)];
  __shared__ __align__(16) uint16_t sl[kChunkRows * scratch_stride(kLoraMaxRank)];
  __shared__ int tok[kChunkRows];
  const int tile = static_cast<int>(blockIdx.x);
  int mi = 0;
  while (mi + 1 < p.num_modules && tile >= p.m[mi + 1].tile_begin) ++mi;
  const ModuleParams& M = p.m[mi];
  const int s = blockIdx.y, z = blockIdx.z, Z = gridDim.z;
  const int R = M.R, ss = scratch_stride(R);
  const int rank = min(__ldg(M.slot_rank + s), R);  // constant input: before the wait
  const int steps = (rank + kStepK - 1) / kStepK;
  const int warp = static_cast<int>(threadIdx.x >> 5), lane = static_cast<int>(threadIdx.x & 31);
  const int g = lane >> 2, t = lane & 3;
  const int64_t ow = static_cast<int64_t>(tile - M.tile_begin) * kExpandOuts + warp * 32;  // the warp's outputs
  const uint16_t* bs = M.b + static_cast<int64_t>(s) * M.out * R;
  uint4 pre[kPreSteps][2][2];  // [step][output tile][fragment row g, g + 8]
#pragma unroll
  for (int st = 0; st < kPreSteps; ++st)
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        pre[st][mt][h] =
            st < steps ? load_b<VEC>(bs, M.out, R, ow + mt * 16 + h * 8 + g, st, t) : make_uint4(0, 0, 0, 0);
  pdl_wait();
  const bool report = threadIdx.x == 0 && blockIdx.x == 0 && blockIdx.z == 0;
  int begin, end, lo, hi;
  if (!slot_segment(p, s, report, &begin, &end) || rank <= 0) return;
  if (!row_share(end - begin, z, Z, kChunkRows, &lo, &hi)) return;

  const int cols = steps * kStepK;
  const int64_t split_stride = p.num_rows * R;
  for (int r0 = lo; r0 < hi; r0 += kChunkRows) {
    const int nr = min(kChunkRows, hi - r0);
    __syncthreads();  // the previous pass's scratch is used
    // The pass's rows: each thread sums its elements' splits with their loads in flight (four
    // splits of kStageElems elements at a time; unrolling all 16 measured slower), then stores
    // them; the rest of the last 8-row tile is zero (its MMA columns are not stored, but stay
    // finite).
    const int active = nr * cols;
    for (int e0 = 0; e0 < active; e0 += kStageElems * kThreads) {
      const float* src[kStageElems];
      float v[kStageElems];
#pragma unroll
      for (int e = 0; e < kStageElems; ++e) {
        const int idx = e0 + e * kThreads + static_cast<int>(threadIdx.x), m = idx / cols, j = idx % cols;
        v[e] = 0.0f;
        src[e] = idx < active && j < rank ? M.part + static_cast<int64_t>(begin + r0 + m) * R + j : nullptr;
      }
#pragma unroll 4
      for (int k = 0; k < p.splits; ++k) {
#pragma unroll
        for (int e = 0; e < kStageElems; ++e)
          if (src[e]) v[e] += src[e][k * split_stride];
      }
#pragma unroll
      for (int e = 0; e < kStageElems; ++e) {
        const int idx = e0 + e * kThreads + static_cast<int>(threadIdx.x), m = idx / cols, j = idx % cols;
        if (idx >= active) break;
        const __nv_bfloat16 h = __float2bfloat16_rn(v[e]);
        const __nv_bfloat16 l = __float2bfloat16_rn(v[e] - __bfloat162float(h));
        sh[m * ss + j] = *reinterpret_cast<const uint16_t*>(&h);
        sl[m * ss + j] = *reinterpret_cast<const uint16_t*>(&l);
      }
    }
    for (int idx = active + static_cast<int>(threadIdx.x); idx < (nr + 7) / 8 * 8 * cols; idx += kThreads) {
      const int m = idx / cols, j = idx % cols;
      sh[m * ss + j] = 0;
      sl[m * ss + j] = 0;
    }
    if (threadIdx.x < kChunkRows) {
      const int m = static_cast<int>(threadIdx.x);
      tok[m] = m < nr ? p.rows[begin + r0 + m] : -1;
    }
    __syncthreads();
    const int ntn = (nr + 7) / 8;
    float acc[2][kChunkRows / 8][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kChunkRows / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) acc[mt][nt][c] = 0.0f;
#pragma unroll
    for (int st = 0; st < kMaxRankSteps; ++st) {
      if (st >= steps) break;
      uint4 b[2][2];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int h = 0; h < 2; ++h)
          b[mt][h] = st < kPreSteps ? pre[st < kPreSteps ? st : 0][mt][h]
                                    : load_b<VEC>(bs, M.out, R, ow + mt * 16 + h * 8 + g, st, t);
#pragma unroll
      for (int nt = 0; nt < kChunkRows / 8; ++nt) {
        if (nt >= ntn) break;
        const int off = (nt * 8 + g) * ss + st * kStepK + 8 * t;
        const uint4 vh = *reinterpret_cast<const uint4*>(sh + off), vl = *reinterpret_cast<const uint4*>(sl + off);
        const unsigned bh[4] = {vh.x, vh.y, vh.z, vh.w}, bl[4] = {vl.x, vl.y, vl.z, vl.w};
#pragma unroll
        for (int mt = 0; mt < 2; ++mt) mma_step(acc[mt][nt], b[mt][0], b[mt][1], bh, bl);
      }
    }
    // c0, c1: output g of the tile for rows 2t, 2t + 1; c2, c3: output g + 8. Every y element
    // of the pass is loaded before any is stored (all loads in flight at once); rows outside
    // the step were reported by the shrink.
    auto y_at = [&](int mt, int nt, int c) -> float* {
      const int64_t o = ow + mt * 16 + g + (c >= 2 ? 8 : 0);
      const int m = nt * 8 + 2 * t + (c & 1);
      const int tk = nt < ntn && m < nr ? tok[m] : -1;
      return o < M.out && tk >= 0 && tk < p.num_tokens ? M.y + static_cast<int64_t>(tk) * M.out + o : nullptr;
    };
    float old[2][kChunkRows / 8][4];
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kChunkRows / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const float* y = y_at(mt, nt, c);
          old[mt][nt][c] = y ? *y : 0.0f;
        }
#pragma unroll
    for (int mt = 0; mt < 2; ++mt)
#pragma unroll
      for (int nt = 0; nt < kChunkRows / 8; ++nt)
#pragma unroll
        for (int c = 0; c < 4; ++c)
          if (float* y = y_at(mt, nt, c)) *y = old[mt][nt][c] + acc[mt][nt][c];
  }
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// Row CTAs per slot: one per kRowsPerCta rows when the step's rows are spread over the slots,
// at most kMaxRowCtas (rows crowded into one slot take more rows per CTA instead).
int64_t row_ctas(int64_t num_rows, int64_t num_slots) {
  return std::clamp<int64_t>(ceil_div(num_rows, kRowsPerCta * std::max<int64_t>(num_slots, 1)), 1, kMaxRowCtas);
}

// K splits of the shrink, from the shapes and slot count (not the rows, so that a row's sums
// are the same in any step): about kTargetCtas CTAs, at most kMaxSplits, slices of whole
// kSliceUnit; fewer when the partials ([splits, num_rows, R] per module) would pass
// partial_floats.
int64_t split_count(int64_t num_modules, int64_t num_slots, int64_t num_rows, int64_t in, int64_t rows_times_ranks,
                    int64_t partial_floats) {
  if (num_modules <= 0 || num_slots <= 0 || num_rows <= 0 || in <= 0 || rows_times_ranks <= 0) return 1;
  int64_t splits = std::clamp<int64_t>(ceil_div(kTargetCtas, num_modules * num_slots), 1, kMaxSplits);
  splits = std::min({splits, ceil_div(in, kSliceUnit), partial_floats / rows_times_ranks});
  if (splits <= 1) return 1;
  return ceil_div(in, ceil_div(ceil_div(in, splits), kSliceUnit) * kSliceUnit);
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
    vec_b = vec_b && w.max_rank % 8 == 0;
  }
  if (tiles > INT32_MAX || slots > 65535) return cudaErrorInvalidConfiguration;
  const int64_t splits = partials ? split_count(n, slots, p.num_rows, p.in, rows_times_ranks, partial_floats) : 1;
  p.splits = static_cast<int>(splits);
  p.chunk = splits == 1 ? p.in : ceil_div(ceil_div(p.in, splits), kSliceUnit) * kSliceUnit;
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
  // One 8-row tile per shrink pass when the step averages at most 8 rows per slot (decode).
  const bool small = p.num_rows <= 8 * slots;
  const bool vec_a = p.in % 8 == 0 && reinterpret_cast<uintptr_t>(p.x) % 16 == 0;
  cudaError_t e;
  if (vec_a)
    e = small ? launch_pdl(lora_shrink_kernel<true, 1>, sgrid, dim3(kThreads), 0, s, p)
              : launch_pdl(lora_shrink_kernel<true, 4>, sgrid, dim3(kThreads), 0, s, p);
  else
    e = small ? launch_pdl(lora_shrink_kernel<false, 1>, sgrid, dim3(kThreads), 0, s, p)
              : launch_pdl(lora_shrink_kernel<false, 4>, sgrid, dim3(kThreads), 0, s, p);
  if (e != cudaSuccess) return e;
  const dim3 egrid(static_cast<unsigned>(tiles), static_cast<unsigned>(slots), static_cast<unsigned>(Z));
  return vec_b ? launch_pdl(lora_expand_kernel<true>, egrid, dim3(kThreads), 0, s, p)
               : launch_pdl(lora_expand_kernel<false>, egrid, dim3(kThreads), 0, s, p);
}

}  // namespace lancet::cuda
