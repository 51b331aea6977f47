// Matrix-vector products for decode (a few rows of x): y[b, r] = scale[r] * sum_k x[b, k] W[r, k]
// with W in BF16 or FP8 E4M3, x and y in f32. At batch 1 a linear layer is a pure stream of
// its weights, so the kernel is written for bandwidth: a warp streams a few weight rows at
// once with 16-byte loads that bypass L1 (each byte is read once), several per lane in flight,
// and x (a few KB, shared by every warp) comes through the read-only cache. One launch covers up
// to three weight matrices that share x (q, k, v), or gate and up with SiLU*mul applied
// before the store, so decode runs a handful of kernels per layer.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

constexpr int kWarps = 4;  // warps per CTA

__device__ __forceinline__ uint4 load_stream(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}

template <typename WT>
struct Unpack;

// 8 BF16 weights per 16 bytes.
template <>
struct Unpack<__nv_bfloat16> {
  static constexpr int kElems = 8;
  __device__ __forceinline__ static void run(const uint4& v, float* f) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      f[2 * i] = __uint_as_float(u[i] << 16);
      f[2 * i + 1] = __uint_as_float(u[i] & 0xffff0000u);
    }
  }
};

// 16 FP8 E4M3 weights per 16 bytes.
template <>
struct Unpack<__nv_fp8_e4m3> {
  static constexpr int kElems = 16;
  __device__ __forceinline__ static void run(const uint4& v, float* f) {
    const unsigned u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half2_raw lo = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[i] & 0xffff), __NV_E4M3);
      const __half2_raw hi = __nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(u[i] >> 16), __NV_E4M3);
      const float2 a = __half22float2(*reinterpret_cast<const __half2*>(&lo));
      const float2 b = __half22float2(*reinterpret_cast<const __half2*>(&hi));
      f[4 * i] = a.x;
      f[4 * i + 1] = a.y;
      f[4 * i + 2] = b.x;
      f[4 * i + 3] = b.y;
    }
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

// Dot products of R weight rows (with SILU: R gate rows and the same up rows) with NB rows of
// x. A warp streams its rows together so every x value it loads serves all of them (x traffic
// through the cache would otherwise rival the weight stream at NB > 1), and issues U chunks of
// each row before using any, so R * U (SILU: 2 R U) 16-byte loads per lane are in flight.
template <typename WT, int NB, bool SILU, int R, int U>
__global__ void __launch_bounds__(kWarps * 32) gemv_kernel(GemvParams p) {
  using Un = Unpack<WT>;
  constexpr int E = Un::kElems;
  constexpr int M = SILU ? 2 * R : R;  // weight rows streamed per warp
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int64_t r0 = (static_cast<int64_t>(blockIdx.x) * kWarps + warp) * R;
  if (r0 >= p.total_rows) return;
  const int64_t chunks = p.k / E;
  const size_t row_bytes = static_cast<size_t>(p.k) * sizeof(WT);
  const uint4* w[M];
  int seg_of[R];
  int64_t local[R];
  bool live[R];
#pragma unroll
  for (int i = 0; i < R; ++i) {
    live[i] = r0 + i < p.total_rows;
    local[i] = live[i] ? r0 + i : r0;  // dead rows re-read row r0 and are not stored
    seg_of[i] = SILU ? 0 : find_segment(p, &local[i]);
    w[i] = reinterpret_cast<const uint4*>(static_cast<const char*>(p.seg[seg_of[i]].w) + local[i] * row_bytes);
    if (SILU)
      w[R + i] = reinterpret_cast<const uint4*>(static_cast<const char*>(p.seg[1].w) + local[i] * row_bytes);
  }
  float acc[M][NB];
#pragma unroll
  for (int i = 0; i < M; ++i)
#pragma unroll
    for (int b = 0; b < NB; ++b) acc[i][b] = 0.0f;

  for (int64_t c0 = lane; c0 < chunks; c0 += 32 * U) {
    uint4 v[U][M];
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + u * 32;
#pragma unroll
      for (int i = 0; i < M; ++i) v[u][i] = c < chunks ? load_stream(w[i] + c) : make_uint4(0, 0, 0, 0);
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int64_t c = c0 + u * 32;
      if (c >= chunks) break;
#pragma unroll
      for (int b = 0; b < NB; ++b) {
        const float4* xp = reinterpret_cast<const float4*>(p.x + b * p.k + c * E);
        float xv[E];
#pragma unroll
        for (int j = 0; j < E / 4; ++j) {
          const float4 t = __ldg(xp + j);
          xv[4 * j] = t.x;
          xv[4 * j + 1] = t.y;
          xv[4 * j + 2] = t.z;
          xv[4 * j + 3] = t.w;
        }
#pragma unroll
        for (int i = 0; i < M; ++i) {
          float f[E];
          Un::run(v[u][i], f);
          float a = acc[i][b];
#pragma unroll
          for (int e = 0; e < E; ++e) a = fmaf(xv[e], f[e], a);
          acc[i][b] = a;
        }
      }
    }
  }
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

// NB <= 2: two rows per warp, four chunks deep; NB > 2: four rows (x reuse), two deep. SILU
// streams gate and up rows: half the rows for the same loads in flight.
template <typename WT, int NB, bool SILU>
cudaError_t launch_shape(const GemvParams& p, cudaStream_t s) {
  constexpr int R = NB <= 2 ? (SILU ? 1 : 2) : (SILU ? 2 : 4);
  constexpr int U = NB <= 2 ? 4 : 2;
  const int64_t rows_per_cta = kWarps * R;
  const unsigned grid = static_cast<unsigned>((p.total_rows + rows_per_cta - 1) / rows_per_cta);
  gemv_kernel<WT, NB, SILU, R, U><<<grid, kWarps * 32, 0, s>>>(p);
  return cudaGetLastError();
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
  if (fp8) return p.silu ? launch_nb<__nv_fp8_e4m3, true>(p, s) : launch_nb<__nv_fp8_e4m3, false>(p, s);
  return p.silu ? launch_nb<__nv_bfloat16, true>(p, s) : launch_nb<__nv_bfloat16, false>(p, s);
}

}  // namespace lancet::cuda
