// Decode GEMV for FP8 E4M3 weights on the tensor cores (sm_89+): y[b, r] = w_scale[r] * x_scale[b] *
// sum_k q(x)[b, k] W[r, k] for n <= kGemvMaxRows rows of x, i.e. W8A8 as the prefill GEMMs run.
// Converting E4M3 to f32 on the CUDA cores costs more instructions per weight byte than the memory
// delivers bytes, so the conversion-free path is the tensor cores' own FP8 product:
//  - a tile is 16 weight rows (SILU: 16 gate rows and the same 16 up rows), the M of an
//    m16n8k32 MMA; a CTA's 8 warps split K and their partial sums meet in shared memory. The
//    grid is persistent (at most the CTAs resident at once, each taking every gridDim.x-th
//    tile): x is prepared once per CTA, and the next tile's weights load during this tile's
//    epilogue, instead of a CTA per tile starting cold (on an H200, 70B down projection at 4
//    rows 140.5 -> 86.1 us, batch-1 decode 334.8 -> 340.2 tok/s on the 8B shape and 48.1 ->
//    50.0 on the 70B);
//  - x's rows are the MMA's N (<= 8 columns; the rest are zero). When the kernel that produced x
//    also quantized it (rms_norm: GemvParams::xq), every CTA copies those codes into shared memory;
//    otherwise every CTA quantizes x per row itself, straight from f32 x, with the rule every FP8
//    producer shares (kernels.h), so no separate quantization kernel runs and a CTA's result does
//    not depend on any other's: in one pass when x's producer left partial maxima of its rows
//    (the gate/up tiles' epilogue, for the down projection) or the row fits in registers, else
//    in two (XIn below). All give the same bytes, so the same result bit for bit;
//  - each lane streams 16 contiguous bytes of two rows per 64-byte k-block (L1-bypassing loads,
//    two stages of KS k-blocks in flight, both issued before pdl_wait: weights are constant;
//    KS = 4 for plain rows of k >= kDeepStageK, which measured faster there on an H200 (down
//    projections: 21.8 -> 20.2 us at 4096 x 14336) and slower on 4096-wide rows, else 2). The MMA's k
//    order is a permutation of memory order, applied to x's fragment alike (a dot product does not
//    depend on the order of its terms).
// The f32 accumulation inside one MMA is the tensor cores' (as the prefill GEMM's fast mode).
#include <cuda_fp8.h>

#include <algorithm>
#include <map>
#include <mutex>
#include <utility>

#include "backend/cuda/dynamic_smem.h"
#include "backend/cuda/fp8_pack.cuh"
#include "backend/cuda/device_info.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_load.cuh"

namespace lancet::cuda {
namespace {

constexpr int kWarps = 8;
constexpr int kThreads = kWarps * 32;
constexpr int kTileRows = 16;  // the MMA's M
constexpr int kBlock = 64;     // k bytes per lane-quad per step pair (4 lanes x 16 bytes)
constexpr int64_t kDeepStageK = 12288;  // plain rows at least this long take 4 k-blocks per stage
constexpr int kXPad = 16;      // bytes after each quantized x row in shared memory
constexpr int kMaxSmem = 200 * 1024;  // x rows of up to ~50K columns at kGemvMaxRows

// d += a . b on E4M3 operands (m16n8k32, f32 accumulators).
__device__ __forceinline__ void mma_e4m3(float (&d)[4], unsigned a0, unsigned a1, unsigned a2, unsigned a3,
                                         unsigned b0, unsigned b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 890
  asm volatile(
      "mma.sync.aligned.m16n8k32.row.col.f32.e4m3.e4m3.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#endif
}

struct RowRef {
  const unsigned char* w;  // the row's bytes (row 0 of segment 0 for rows past the launch)
  int seg;
  int64_t local;
  bool live;
};

__device__ __forceinline__ RowRef row_ref(const GemvParams& p, int64_t r, int which) {
  RowRef ref{nullptr, 0, 0, r < p.total_rows};
  int64_t local = ref.live ? r : 0;
  int s = which;  // SILU: segment 0 (gate) or 1 (up) by role
  if (!p.silu) {
    s = 0;
    while (s + 1 < p.num_segments && local >= p.seg[s].rows) local -= p.seg[s].rows, ++s;
  }
  ref.seg = s;
  ref.local = local;
  ref.w = static_cast<const unsigned char*>(p.seg[s].w) + local * p.k;
  return ref;
}

// M streams of 2 rows (rows g and g + 8 of the tile): one 16-byte load per row per k-block.
template <int M, int KS>
__device__ __forceinline__ void load_stage(uint4 (&v)[KS][M][2], const RowRef (&rows)[M][2], int64_t blk0,
                                           int64_t blk_end, int t, int64_t k) {
#pragma unroll
  for (int u = 0; u < KS; ++u) {
    const int64_t off = (blk0 + u) * kBlock + t * 16;
    const bool in = blk0 + u < blk_end && off < k;
#pragma unroll
    for (int m = 0; m < M; ++m)
#pragma unroll
      for (int h = 0; h < 2; ++h)
        v[u][m][h] = in ? load_stream(reinterpret_cast<const uint4*>(rows[m][h].w + off)) : make_uint4(0, 0, 0, 0);
  }
}

template <int M, int KS>
__device__ __forceinline__ void multiply_stage(const uint4 (&v)[KS][M][2], float (&acc)[M][4],
                                               const unsigned char* xq, int64_t xstride, int n, int64_t blk0,
                                               int64_t blk_end, int g, int t) {
#pragma unroll
  for (int u = 0; u < KS; ++u) {
    if (blk0 + u >= blk_end) break;
    const int64_t off = (blk0 + u) * kBlock + t * 16;
    // x's fragment: 8 bytes of row g per MMA (zero for columns past n).
    uint2 b[2] = {make_uint2(0, 0), make_uint2(0, 0)};
    if (g < n) {
      const uint4 xv = *reinterpret_cast<const uint4*>(xq + g * xstride + off);
      b[0] = make_uint2(xv.x, xv.y);
      b[1] = make_uint2(xv.z, xv.w);
    }
#pragma unroll
    for (int m = 0; m < M; ++m) {
      const uint4 lo = v[u][m][0], hi = v[u][m][1];
      mma_e4m3(acc[m], lo.x, hi.x, lo.y, hi.y, b[0].x, b[0].y);
      mma_e4m3(acc[m], lo.z, hi.z, lo.w, hi.w, b[1].x, b[1].y);
    }
  }
}

// How a launch gets x's E4M3 codes into shared memory ([n][xstride], zero past k) and their
// scales, all with the per-row rule every FP8 producer shares (kernels.h), so all four give the
// same bytes and the same results bit for bit:
//  - kCodes: x's producer quantized it (rms_norm): one copy of n * k bytes (copy_x);
//  - kAbsmax: x's producer wrote partial maxima of |x| per row (the gate/up epilogue, one per
//    CTA): the row's scale is their maximum, then one pass over x's f32 row;
//  - kHeld4 / kHeld8 (k <= 4096 / 8192): each thread loads its part of the row (4 or 8 float4s)
//    into registers once, the block reduces its maximum, and the codes are made from the
//    registers. kHeld8's registers allow two CTAs per SM instead of three, so it is taken only
//    where that adds no wave (launch_input);
//  - kTwoPass: the row's maximum, then a second pass over it for the codes.
enum class XIn { kCodes, kAbsmax, kHeld4, kHeld8, kTwoPass };
__host__ __device__ constexpr int held_vec(XIn in) { return in == XIn::kHeld4 ? 4 : in == XIn::kHeld8 ? 8 : 0; }
__host__ __device__ constexpr int64_t held_k(XIn in) { return int64_t{held_vec(in)} * 4 * kThreads; }

__device__ __forceinline__ float absmax4(float4 v) {
  return fmaxf(fmaxf(fabsf(v.x), fabsf(v.y)), fmaxf(fabsf(v.z), fabsf(v.w)));
}

// The row's scale from each thread's partial maximum. red: kWarps floats used by this call
// alone (a later call takes other ones, so no barrier is needed after the reads).
__device__ float row_scale(float m, float* red) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(0xffffffffu, m, o));
  if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = m;
  __syncthreads();
  float a = 0.0f;
#pragma unroll
  for (int w = 0; w < kWarps; ++w) a = fmaxf(a, red[w]);
  return fmaxf(a / kFp8Max, kFp8MinScale);
}

// x's row as codes from f32 with a known scale (zero past k, up to xstride).
__device__ __forceinline__ void quantize_row(const float4* __restrict__ xr, int64_t k, int64_t xstride, float inv,
                                             unsigned* q) {
  for (int64_t i = threadIdx.x; i < xstride / 4; i += kThreads)
    q[i] = fp8x4(4 * i < k ? __ldg(xr + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f), inv);
}

// x rows [n, k] f32 (k a multiple of 16, rows 16-byte aligned) -> codes and scales as IN says;
// absmax: [n, partials] for kAbsmax. red: n * kWarps floats.
template <XIn IN>
__device__ void quantize_x(const float* __restrict__ x, const float* __restrict__ absmax, int64_t partials, int n,
                           int64_t k, int64_t xstride, unsigned char* xq, float* xscale, float* red) {
  for (int b = 0; b < n; ++b) {
    const float4* xr = reinterpret_cast<const float4*>(x + b * k);
    unsigned* q = reinterpret_cast<unsigned*>(xq + b * xstride);
    float m = 0.0f;
    if constexpr (held_vec(IN) > 0) {
      float4 v[held_vec(IN)];
#pragma unroll
      for (int r = 0; r < held_vec(IN); ++r) {
        const int64_t i = threadIdx.x + r * kThreads;
        v[r] = 4 * i < k ? __ldg(xr + i) : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
        m = fmaxf(m, absmax4(v[r]));
      }
      const float scale = row_scale(m, red + b * kWarps);
      if (threadIdx.x == 0) xscale[b] = scale;
      const float inv = 1.0f / scale;
#pragma unroll
      for (int r = 0; r < held_vec(IN); ++r) {
        const int64_t i = threadIdx.x + r * kThreads;
        if (4 * i < k) q[i] = fp8x4(v[r], inv);
      }
      for (int64_t i = k / 4 + threadIdx.x; i < xstride / 4; i += kThreads) q[i] = 0;
      continue;
    }
    if constexpr (IN == XIn::kAbsmax) {
      for (int64_t i = threadIdx.x; i < partials; i += kThreads) m = fmaxf(m, __ldg(absmax + b * partials + i));
    } else {
      for (int64_t i = threadIdx.x; i < k / 4; i += kThreads) m = fmaxf(m, absmax4(__ldg(xr + i)));
    }
    const float scale = row_scale(m, red + b * kWarps);
    if (threadIdx.x == 0) xscale[b] = scale;
    quantize_row(xr, k, xstride, 1.0f / scale, q);
  }
  __syncthreads();
}

// x's codes as its producer quantized them ([n, k] e4m3, rows 16-byte aligned) and their scales
// into shared memory in quantize_x's layout: one L2 read of n * k bytes instead of two passes over
// x's f32 rows and a block reduction.
__device__ void copy_x(const unsigned char* __restrict__ xq, const float* __restrict__ scale, int n, int64_t k,
                       int64_t xstride, unsigned char* xs, float* xscale) {
  const int64_t chunks = xstride / 16;  // per row, zero past k
  for (int64_t i = threadIdx.x; i < n * chunks; i += kThreads) {
    const int64_t b = i / chunks, c = i % chunks * 16;
    const uint4 v = c < k ? __ldg(reinterpret_cast<const uint4*>(xq + b * k + c)) : make_uint4(0, 0, 0, 0);
    *reinterpret_cast<uint4*>(xs + b * xstride + c) = v;
  }
  if (threadIdx.x < n) xscale[threadIdx.x] = __ldg(scale + threadIdx.x);
  __syncthreads();
}

// One tile's outputs from the warps' partial sums in red (threads < kTileRows * n: row
// threadIdx.x % 16 of the tile, x row threadIdx.x / 16).
template <bool SILU>
__device__ __forceinline__ void tile_epilogue(const GemvParams& p, int64_t tile, int64_t tiles, const float* red,
                                              const float* xscale) {
  constexpr int M = SILU ? 2 : 1;
  const int row = threadIdx.x % kTileRows, col = threadIdx.x / kTileRows;
  const RowRef ref = row_ref(p, tile * kTileRows + row, 0);
  float s[M];
#pragma unroll
  for (int m = 0; m < M; ++m) {
    s[m] = 0.0f;
    for (int w = 0; w < kWarps; ++w) s[m] += red[((w * M + m) * kTileRows + row) * 8 + col];
    const GemvSegment& sg = p.seg[SILU ? m : ref.seg];
    s[m] *= xscale[col] * (sg.scale ? sg.scale[sg.per_row_scale ? ref.local : 0] : 1.0f);
  }
  const GemvSegment& sg = p.seg[ref.seg];
  if constexpr (!SILU) {
    if (ref.live) sg.y[col * sg.rows + ref.local] = s[0];
  } else {
    const float gt = s[0], up = s[M - 1];
    const float a = ref.live ? gt / (1.0f + __expf(-gt)) * up : 0.0f;
    if (ref.live) p.act[col * sg.rows + ref.local] = a;
    if (p.act_absmax) {
      // The tile's maximum of |act| per x row: a column's 16 lanes are one half-warp, and the
      // last warp that holds columns may hold only its lower half (n odd).
      const unsigned lanes = threadIdx.x / 32 * 32 + 32 <= kTileRows * p.n ? 0xffffffffu : 0x0000ffffu;
      float m = fabsf(a);
#pragma unroll
      for (int o = kTileRows / 2; o > 0; o >>= 1) m = fmaxf(m, __shfl_xor_sync(lanes, m, o));
      if (row == 0) p.act_absmax[col * tiles + tile] = m;
    }
  }
}

template <int M>
__device__ __forceinline__ void tile_rows(const GemvParams& p, int64_t r0, int g, RowRef (&rows)[M][2]) {
#pragma unroll
  for (int m = 0; m < M; ++m) {
    rows[m][0] = row_ref(p, r0 + g, m);
    rows[m][1] = row_ref(p, r0 + g + 8, m);
  }
}

// Persistent: CTA c takes tiles c, c + gridDim.x, ... (the grid is at most what is resident),
// so x is quantized (or copied) once per CTA, not once per tile, and the next tile's first two
// stages of weights are in flight during this tile's epilogue.
template <bool SILU, int KS, XIn IN>
__global__ void __launch_bounds__(kThreads, (!SILU && KS == 2 && IN != XIn::kHeld8) ? 3 : 2)
    gemv_fp8_kernel(const GemvParams p, int64_t xstride) {
  constexpr int M = SILU ? 2 : 1;
  extern __shared__ __align__(16) unsigned char smem[];
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, g = lane / 4, t = lane % 4;
  const int64_t tiles = (p.total_rows + kTileRows - 1) / kTileRows;
  int64_t tile = blockIdx.x;
  RowRef rows[M][2];
  tile_rows<M>(p, tile * kTileRows, g, rows);
  const int64_t nblk = (p.k + kBlock - 1) / kBlock;
  const int64_t blk_begin = nblk * warp / kWarps, blk_end = nblk * (warp + 1) / kWarps;
  // Two stages of weights in flight before the wait and x's quantization (weights are constant).
  uint4 va[KS][M][2], vb[KS][M][2];
  load_stage<M, KS>(va, rows, blk_begin, blk_end, t, p.k);
  if (blk_begin + KS < blk_end) load_stage<M, KS>(vb, rows, blk_begin + KS, blk_end, t, p.k);
  pdl_wait();

  const int n = static_cast<int>(p.n);
  unsigned char* xq = smem;                                               // [n][xstride]
  float* xscale = reinterpret_cast<float*>(smem + n * xstride);           // [n]
  float* red = xscale + kGemvMaxRows;                                     // [kWarps][M][16][8]
  if constexpr (IN == XIn::kCodes)
    copy_x(static_cast<const unsigned char*>(p.xq), p.xq_scale, n, p.k, xstride, xq, xscale);
  else
    quantize_x<IN>(p.x, p.x_absmax, p.x_partials, n, p.k, xstride, xq, xscale, red);

  for (;;) {
    float acc[M][4];
#pragma unroll
    for (int m = 0; m < M; ++m) acc[m][0] = acc[m][1] = acc[m][2] = acc[m][3] = 0.0f;
    for (int64_t b = blk_begin; b < blk_end; b += 2 * KS) {
      multiply_stage<M, KS>(va, acc, xq, xstride, n, b, blk_end, g, t);
      if (b + 2 * KS < blk_end) load_stage<M, KS>(va, rows, b + 2 * KS, blk_end, t, p.k);
      if (b + KS >= blk_end) break;
      multiply_stage<M, KS>(vb, acc, xq, xstride, n, b + KS, blk_end, g, t);
      if (b + 3 * KS < blk_end) load_stage<M, KS>(vb, rows, b + 3 * KS, blk_end, t, p.k);
    }
    const int64_t next = tile + gridDim.x;
    if (next < tiles) {
      tile_rows<M>(p, next * kTileRows, g, rows);
      load_stage<M, KS>(va, rows, blk_begin, blk_end, t, p.k);
      if (blk_begin + KS < blk_end) load_stage<M, KS>(vb, rows, blk_begin + KS, blk_end, t, p.k);
    } else {
      pdl_launch_dependents();  // the next kernel may start its prologue during the epilogue
    }
    // The warps' partial sums: D[row][col] at rows g, g + 8 and columns 2t, 2t + 1.
#pragma unroll
    for (int m = 0; m < M; ++m) {
      float* rw = red + ((warp * M + m) * kTileRows) * 8;
      rw[g * 8 + 2 * t] = acc[m][0];
      rw[g * 8 + 2 * t + 1] = acc[m][1];
      rw[(g + 8) * 8 + 2 * t] = acc[m][2];
      rw[(g + 8) * 8 + 2 * t + 1] = acc[m][3];
    }
    __syncthreads();
    if (threadIdx.x < kTileRows * n) tile_epilogue<SILU>(p, tile, tiles, red, xscale);
    if (next >= tiles) break;
    __syncthreads();  // red is rewritten by the next tile
    tile = next;
  }
}

// CTAs of `kernel` resident on one multiprocessor at `smem` bytes of dynamic shared memory (the
// occupancy calculator, asked once per kernel and size).
int resident_ctas_per_sm(const void* kernel, int64_t smem) {
  static std::mutex mu;
  static std::map<std::pair<const void*, int64_t>, int> cache;
  std::lock_guard<std::mutex> lock(mu);
  auto [it, fresh] = cache.try_emplace({kernel, smem}, 1);
  if (fresh) {
    int ctas = 0;
    if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&ctas, kernel, kThreads, static_cast<size_t>(smem)) ==
        cudaSuccess)
      it->second = std::max(ctas, 1);
    else
      cudaGetLastError();
  }
  return it->second;
}

template <bool SILU, int KS, XIn IN>
cudaError_t launch_typed(const GemvParams& p, cudaStream_t s) {
  const int64_t xstride = (p.k + kBlock - 1) / kBlock * kBlock + kXPad;
  const int64_t smem = p.n * xstride + kGemvMaxRows * 4 + kWarps * (SILU ? 2 : 1) * kTileRows * 8 * 4;
  if (smem > kMaxSmem) return cudaErrorInvalidValue;
  // The opt-in is made once per device, so for the largest size any launch uses.
  cudaError_t e = allow_dynamic_smem<gemv_fp8_kernel<SILU, KS, IN>>(kMaxSmem);
  if (e != cudaSuccess) return e;
  const int64_t tiles = gemv_fp8_tiles(p.total_rows);
  const int64_t resident =
      resident_ctas_per_sm(reinterpret_cast<const void*>(gemv_fp8_kernel<SILU, KS, IN>), smem) *
      std::max<int64_t>(current_device_sms(), 1);
  return launch_pdl(gemv_fp8_kernel<SILU, KS, IN>, dim3(static_cast<unsigned>(std::min(tiles, resident))),
                    dim3(kThreads), static_cast<size_t>(smem), s, p, xstride);
}

template <bool SILU, int KS>
cudaError_t launch_input(const GemvParams& p, cudaStream_t s) {
  if (p.xq) return launch_typed<SILU, KS, XIn::kCodes>(p, s);
  if (p.x_absmax) return launch_typed<SILU, KS, XIn::kAbsmax>(p, s);
  if constexpr (KS == 2 && !SILU) {  // KS 4 takes rows longer than 8192; SiLU tiles lack the registers
    if (p.k <= held_k(XIn::kHeld4)) return launch_typed<SILU, KS, XIn::kHeld4>(p, s);
    // kHeld8 at two CTAs per SM where that is as many waves as three per SM.
    const int64_t grid = gemv_fp8_tiles(p.total_rows), sms = std::max(current_device_sms(), 1);
    if (p.k <= held_k(XIn::kHeld8) && (grid + 2 * sms - 1) / (2 * sms) == (grid + 3 * sms - 1) / (3 * sms))
      return launch_typed<SILU, KS, XIn::kHeld8>(p, s);
  }
  return launch_typed<SILU, KS, XIn::kTwoPass>(p, s);
}

}  // namespace

bool gemv_fp8_mma_supported() { return current_device_sm() >= 89; }

int64_t gemv_fp8_tiles(int64_t rows) { return (rows + kTileRows - 1) / kTileRows; }

cudaError_t launch_gemv_fp8_mma(const GemvParams& p, cudaStream_t s) {
  if (p.n < 1 || p.n > kGemvMaxRows || p.k % 16 != 0 || p.num_segments < 1 || p.num_segments > 3 ||
      p.total_rows <= 0 || (p.silu && (p.num_segments != 2 || !p.act)) || (p.act_absmax && !p.silu))
    return cudaErrorInvalidValue;
  if (p.xq && (!p.xq_scale || reinterpret_cast<uintptr_t>(p.xq) % 16 != 0)) return cudaErrorInvalidValue;
  if (p.x_absmax && p.x_partials < 1) return cudaErrorInvalidValue;
  if (p.silu) return launch_input<true, 2>(p, s);
  return p.k >= kDeepStageK ? launch_input<false, 4>(p, s) : launch_input<false, 2>(p, s);
}

}  // namespace lancet::cuda
