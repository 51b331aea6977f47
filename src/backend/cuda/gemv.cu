// Matrix-vector products for decode (a few rows of x): y[b, r] = scale[r] * sum_k x[b, k] W[r, k]
// with W in BF16, or FP8 E4M3 on devices without FP8 tensor cores (gemv_fp8.cu has the path of
// those that have them), x and y in f32. At batch 1 a linear layer is a pure stream of its
// weights, so the kernel is written for bandwidth:
//  - a warp streams R weight rows at once with 16-byte loads that bypass L1 (each byte is read
//    once), U chunks per row per lane in flight per stage (the other warps of the SM cover the
//    latency; a second buffer per warp would cost the registers of that occupancy);
//  - the first stage is loaded before pdl_wait(): weights are constant, so with programmatic
//    dependent launch (pdl.cuh) the weight stream starts while the previous kernel finishes;
//  - x (a few KB, shared by every warp) comes through the read-only cache, each value serving
//    all R rows.
// One launch covers up to three weight matrices that share x (q, k, v), or gate and up with
// SiLU*mul applied before the store, so decode runs a handful of kernels per layer.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/stream_load.cuh"

namespace lancet::cuda {
namespace {

constexpr int kWarps = 4;  // warps per CTA

template <typename WT>
struct Unpack;

// 8 BF16 weights per 16 bytes; group(v, j) gives weights 4j .. 4j+3 (j < kElems / 4).
__device__ __forceinline__ unsigned word(const uint4& v, int i) {
  return i == 0 ? v.x : (i == 1 ? v.y : (i == 2 ? v.z : v.w));
}

template <>
struct Unpack<__nv_bfloat16> {
  static constexpr int kElems = 8;
  __device__ __forceinline__ static float4 group(const uint4& v, int j) {
    const unsigned a = word(v, 2 * j), b = word(v, 2 * j + 1);
    return make_float4(__uint_as_float(a << 16), __uint_as_float(a & 0xffff0000u), __uint_as_float(b << 16),
                       __uint_as_float(b & 0xffff0000u));
  }
};

// 16 FP8 E4M3 weights per 16 bytes (exactly, through FP16).
template <>
struct Unpack<__nv_fp8_e4m3> {
  static constexpr int kElems = 16;
  __device__ __forceinline__ static float4 group(const uint4& v, int j) {
    const unsigned u = word(v, j);
    const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u & 0xffff), __NV_E4M3);
    const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u >> 16), __NV_E4M3);
    const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
    const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
    return make_float4(a.x, a.y, b.x, b.y);
  }
};

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Weight row r of the launch (rows numbered across segments): its segment and local row.
__device__ __forceinline__ int find_segment(const GemvParams& p, int64_t* r) {
  int s = 0;
  while (s + 1 < p.num_segments && *r >= p.seg[s].rows) *r -= p.seg[s].rows, ++s;
  return s;
}

// One stage: chunks [stage * 32 U, (stage + 1) * 32 U) of each of the M rows; lane takes every
// 32nd. Out-of-range chunks load nothing and are skipped by multiply_stage.
template <int M, int U>
__device__ __forceinline__ void load_stage(uint4 (&v)[U][M], const uint4* const (&w)[M], int64_t stage, int lane,
                                           int64_t chunks) {
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = stage * 32 * U + u * 32 + lane;
#pragma unroll
    for (int i = 0; i < M; ++i) v[u][i] = c < chunks ? load_stream(w[i] + c) : make_uint4(0, 0, 0, 0);
  }
}

template <typename WT, int NB, int M, int U>
__device__ __forceinline__ void multiply_stage(const uint4 (&v)[U][M], float (&acc)[M][NB], const float* x,
                                               int64_t k, int64_t stage, int lane, int64_t chunks) {
  using Un = Unpack<WT>;
  constexpr int E = Un::kElems;
#pragma unroll
  for (int u = 0; u < U; ++u) {
    const int64_t c = stage * 32 * U + u * 32 + lane;
    if (c >= chunks) break;
#pragma unroll
    for (int j = 0; j < E / 4; ++j) {
      float4 f[M];
#pragma unroll
      for (int i = 0; i < M; ++i) f[i] = Un::group(v[u][i], j);
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const float4 t = __ldg(reinterpret_cast<const float4*>(x + b * k + c * E) + j);
#pragma unroll
        for (int i = 0; i < M; ++i) {
          float a = acc[i][b];
          a = fmaf(t.x, f[i].x, a);
          a = fmaf(t.y, f[i].y, a);
          a = fmaf(t.z, f[i].z, a);
          a = fmaf(t.w, f[i].w, a);
          acc[i][b] = a;
        }
      }
    }
  }
}

// Dot products of R weight rows (with SILU: R gate rows and the same up rows) with NB rows of x.
template <typename WT, int NB, bool SILU, int R, int U>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(const GemvParams p) {
  using Un = Unpack<WT>;
  constexpr int E = Un::kElems;
  constexpr int M = SILU ? 2 * R : R;  // weight rows streamed per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  const bool warp_live = r0 < p.total_rows;
  const int64_t chunks = p.k / E;
  const size_t row_bytes = static_cast<size_t>(p.k) * sizeof(WT);
  const uint4* w[M];
  int seg_of[R];
  int64_t local[R];
  bool live[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    live[i] = r0 + i < p.total_rows;
    local[i] = live[i] ? r0 + i : 0;  // dead rows re-read row 0 and are not stored
    seg_of[i] = SILU ? 0 : find_segment(p, &local[i]);
    w[i] = reinterpret_cast<const uint4*>(static_cast<const char*>(p.seg[seg_of[i]].w) + local[i] * row_bytes);
    if (SILU)
      w[R + i] = reinterpret_cast<const uint4*>(static_cast<const char*>(p.seg[1].w) + local[i] * row_bytes);
  }
  const int64_t stages = (chunks + 32 * U - 1) / (32 * U);
  uint4 v[U][M];
  if (warp_live) load_stage<M, U>(v, w, 0, lane, chunks);  // weights only: before the wait
  pdl_wait();
  if (!warp_live) return;

  float acc[M][NB];
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int b = 0; b < NB; ++b) acc[i][b] = 0.0f;
  for (int64_t s = 0; s < stages; ++s) {
    if (s > 0) load_stage<M, U>(v, w, s, lane, chunks);
    multiply_stage<WT, NB, M, U>(v, acc, p.x, p.k, s, lane, chunks);
  }
  pdl_launch_dependents();  // the next kernel may start its prologue during this one's stores
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int b = 0; b < NB; ++b) acc[i][b] = warp_sum(acc[i][b]);
  if (lane != 0) return;
#pragma unroll
  for (int i = 0; i < R; ++i) {
    if (!live[i]) continue;
    const GemvSegment& sg = p.seg[seg_of[i]];
    const float sc0 = sg.scale ? sg.scale[sg.per_row_scale ? local[i] : 0] : 1.0f;
    if (!SILU) {
#pragma unroll
      for (int b = 0; b < NB; ++b) sg.y[b * sg.rows + local[i]] = acc[i][b] * sc0;
    } else {
      const GemvSegment& su = p.seg[1];
      const float sc1 = su.scale ? su.scale[su.per_row_scale ? local[i] : 0] : 1.0f;
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const float g = acc[i][b] * sc0, u = acc[R + i][b] * sc1;
        p.act[b * sg.rows + local[i]] = g / (1.0f + __expf(-g)) * u;
      }
    }
  }
}

// NB <= 2: two rows per warp (SILU: one gate + one up row), four chunks deep; NB > 2: four
// rows (x reuse), two deep. SILU streams gate and up rows: half the rows for the same loads in
// flight.
template <typename WT, int NB, bool SILU>
cudaError_t launch_shape(const GemvParams& p, cudaStream_t s) {
  constexpr int R = NB <= 2 ? (SILU ? 1 : 2) : (SILU ? 2 : 4);
  constexpr int U = NB <= 2 ? 4 : 2;
  const int64_t rows_per_cta = kWarps * R;
  const unsigned grid = static_cast<unsigned>((p.total_rows + rows_per_cta - 1) / rows_per_cta);
  return launch_pdl(gemv_kernel<WT, NB, SILU, R, U>, dim3(grid), dim3(kWarps * 32), 0, s, p);
}

template <typename WT, bool SILU>
cudaError_t launch_nb(const GemvParams& p, cudaStream_t s) {
  switch (p.n) {
    case 1: return launch_shape<WT, 1, SILU>(p, s);
    case 2: return launch_shape<WT, 2, SILU>(p, s);
    case 3: return launch_shape<WT, 3, SILU>(p, s);
    case 4: return launch_shape<WT, 4, SILU>(p, s);
    default: return cudaErrorInvalidValue;
  }
}

}  // namespace

int gemv_k_multiple(bool fp8) { return fp8 ? Unpack<__nv_fp8_e4m3>::kElems : Unpack<__nv_bfloat16>::kElems; }

cudaError_t launch_gemv(const GemvParams& p, bool fp8, cudaStream_t s) {
  if (p.n < 1 || p.n > kGemvMaxRows || p.num_segments < 1 || p.num_segments > 3 || p.total_rows <= 0 ||
      (p.silu && (p.num_segments != 2 || !p.act)))
    return cudaErrorInvalidValue;
  if (fp8 && gemv_fp8_mma_supported()) return launch_gemv_fp8_mma(p, s);
  if (p.x_absmax || p.act_absmax) return cudaErrorInvalidValue;  // the tensor-core path's alone
  if (fp8) return p.silu ? launch_nb<__nv_fp8_e4m3, true>(p, s) : launch_nb<__nv_fp8_e4m3, false>(p, s);
  return p.silu ? launch_nb<__nv_bfloat16, true>(p, s) : launch_nb<__nv_bfloat16, false>(p, s);
}

}  // namespace lancet::cuda
