// The Hopper prompt kernel's consumer warpgroups: Q into shared memory, S = Q K^T and O += P V
// on wgmma, the online softmax, and the output (or split partial) rows.
#pragma once

#include "backend/cuda/attention/prefill_sm90_layout.cuh"

namespace lancet::cuda::prefill_sm90 {

#if defined(__CUDA_ARCH_FEAT_SM90_ALL)

// The E4M3 codes of four values (the low byte first).
__device__ __forceinline__ unsigned e4m3x4(float a, float b, float c, float d) {
  const __nv_fp8x2_storage_t lo = __nv_cvt_float2_to_fp8x2(make_float2(a, b), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t hi = __nv_cvt_float2_to_fp8x2(make_float2(c, d), __NV_SATFINITE, __NV_E4M3);
  return static_cast<unsigned>(lo) | static_cast<unsigned>(hi) << 16;
}

// The values of the four E4M3 codes of w (exact).
__device__ __forceinline__ float4 e4m3x4_values(unsigned w) {
  const __half2 a(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w & 0xffff), __NV_E4M3));
  const __half2 b(__nv_cvt_fp8x2_to_halfraw2(static_cast<__nv_fp8x2_storage_t>(w >> 16), __NV_E4M3));
  const float2 fa = __half22float2(a), fb = __half22float2(b);
  return make_float4(fa.x, fa.y, fb.x, fb.y);
}

// An E4M3 query: rows of warpgroup wg, each rounded to E4M3 under its own scale (absmax / 448,
// 1 for a zero row) into the swizzled Q block, the scales to qscale[row]. The D / 16 threads of
// a row (16 values each) are neighbours in one warp; each thread loads all of its chunks before
// it rounds any, so their loads fly together. kTwo: also the low terms (the E4M3 rounding of
// each scaled value minus its first term) into the block after it.
template <int D, bool kTwo>
__device__ __forceinline__ void load_q_e4m3(const Sm90Params& p, const CtaWork& w, int wg, unsigned char* sq,
                                            float* qscale) {
  constexpr int kPerRow = D / 16;
  constexpr int kIters = 64 * kPerRow / 128;  // chunks of 16 values per thread
  const int tid = threadIdx.x % 128;
  float4 x[kIters][4];
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int idx = tid + 128 * it;
    const int r = wg * 64 + idx / kPerRow, c = idx % kPerRow;
#pragma unroll
    for (int j = 0; j < 4; ++j) x[it][j] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    if (r < w.rows) {
      const float4* src = reinterpret_cast<const float4*>(p.q + head_row(p, w, r) * D + c * 16);
#pragma unroll
      for (int j = 0; j < 4; ++j) x[it][j] = src[j];
    }
  }
#pragma unroll
  for (int it = 0; it < kIters; ++it) {
    const int idx = tid + 128 * it;
    const int r = wg * 64 + idx / kPerRow, c = idx % kPerRow;
    float v[16];
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      v[4 * j] = x[it][j].x;
      v[4 * j + 1] = x[it][j].y;
      v[4 * j + 2] = x[it][j].z;
      v[4 * j + 3] = x[it][j].w;
    }
    float amax = 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) amax = fmaxf(amax, fabsf(v[i]));
#pragma unroll
    for (int off = 1; off < kPerRow; off *= 2) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, off));
    const float inv = amax > 0.0f ? kFp8Max / amax : 0.0f;
#pragma unroll
    for (int i = 0; i < 16; ++i) v[i] *= inv;
    unsigned words[4];
#pragma unroll
    for (int j = 0; j < 4; ++j) words[j] = e4m3x4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
    *reinterpret_cast<uint4*>(sq + sm90::swizzled_offset(r, c)) = make_uint4(words[0], words[1], words[2], words[3]);
    if constexpr (kTwo) {
      unsigned low[4];
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        const float4 h = e4m3x4_values(words[j]);
        low[j] = e4m3x4(v[4 * j] - h.x, v[4 * j + 1] - h.y, v[4 * j + 2] - h.z, v[4 * j + 3] - h.w);
      }
      *reinterpret_cast<uint4*>(sq + kRows * 128 + sm90::swizzled_offset(r, c)) =
          make_uint4(low[0], low[1], low[2], low[3]);
    }
    if (c == 0) qscale[r] = amax > 0.0f ? amax / kFp8Max : 1.0f;
  }
}

// Q rows of warpgroup wg (64 rows from CTA row 64 wg), rounded to the MMA type, into the
// swizzled Q blocks. Each thread loads kBatch chunks of 8 values before it stores any, so their
// loads fly together.
template <int D, Sm90Kv KV>
__device__ __forceinline__ void load_q(const Sm90Params& p, const CtaWork& w, int wg, unsigned char* sq) {
  using Ly = Sm90Layout<D, KV>;
  constexpr MmaType T = kMmaType<KV>;
  constexpr int kPerThread = 64 * (D / 8) / 128;
  constexpr int kBatch = 4;
  static_assert(kPerThread % kBatch == 0, "whole batches of chunks per thread");
  const int tid = threadIdx.x % 128;
  for (int b = 0; b < kPerThread; b += kBatch) {
    float4 a[kBatch][2];
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int idx = tid + 128 * (b + i);
      const int r = wg * 64 + idx / (D / 8), c = idx % (D / 8);
      a[i][0] = a[i][1] = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      if (r < w.rows) {
        const float4* src = reinterpret_cast<const float4*>(p.q + head_row(p, w, r) * D + c * 8);
        a[i][0] = src[0];
        a[i][1] = src[1];
      }
    }
#pragma unroll
    for (int i = 0; i < kBatch; ++i) {
      const int idx = tid + 128 * (b + i);
      const int r = wg * 64 + idx / (D / 8), c = idx % (D / 8);
      const uint4 v = make_uint4(pack2<T>(a[i][0].x, a[i][0].y), pack2<T>(a[i][0].z, a[i][0].w),
                                 pack2<T>(a[i][1].x, a[i][1].y), pack2<T>(a[i][1].z, a[i][1].w));
      *reinterpret_cast<uint4*>(sq + (c / 8) * Ly::kQBlock + sm90::swizzled_offset(r, c % 8)) = v;
    }
  }
}

// S = Q K^T for the warpgroup's 64 rows and the 128 keys of a K tile (issued, not waited for):
// 16 values per k-step on 16-bit operands, 32 on E4M3 ones (32 bytes either way). Each
// k-step's descriptors are the tile's first ones plus a compile-time offset (the address field
// counts 16-byte units and shared addresses stay below its 256 KiB range), so the issue loop
// does not rebuild them between wgmmas.
template <int D, Sm90Kv KV>
__device__ __forceinline__ void issue_qk(float (&s)[64], uint32_t sq, uint32_t sk, int wg) {
  using Ly = Sm90Layout<D, KV>;
  const uint64_t da0 = sm90::desc_k_major(sq + wg * 64 * 128), db0 = sm90::desc_k_major(sk);
  if constexpr (query_fp8(KV)) {
#pragma unroll
    for (int kk = 0; kk < D / 32; ++kk)
      sm90::wgmma_m64n128k32_ss_e4m3(s, sm90::desc_advance(da0, kk * 32), sm90::desc_advance(db0, kk * 32), kk > 0);
    if constexpr (query_two_terms(KV)) {
      // The low terms, into the same scores (their block follows the first terms').
#pragma unroll
      for (int kk = 0; kk < D / 32; ++kk)
        sm90::wgmma_m64n128k32_ss_e4m3(s, sm90::desc_advance(da0, Ly::kQBlock + kk * 32),
                                       sm90::desc_advance(db0, kk * 32), 1);
    }
  } else {
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      const uint64_t da = sm90::desc_advance(da0, (kk / 4) * Ly::kQBlock + (kk % 4) * 32);
      const uint64_t db = sm90::desc_advance(db0, (kk / 4) * Ly::kKvBlock + (kk % 4) * 32);
      if constexpr (kv_fp8(KV)) sm90::wgmma_m64n128k16_ss_f16(s, da, db, kk > 0);
      else sm90::wgmma_m64n128k16_ss_bf16(s, da, db, kk > 0);
    }
  }
}

// k-steps of P V per tile: 16 keys per step on 16-bit P, 32 on E4M3 P.
template <Sm90Kv KV>
constexpr int kPvSteps = p_fp8(KV) ? kKeys / 32 : kKeys / 16;

// O += P V with P in registers (issued, not waited for).
template <int D, Sm90Kv KV>
__device__ __forceinline__ void issue_pv(float (&o)[D / 2], const unsigned (&pa)[kPvSteps<KV>][4], uint32_t sv) {
  using Ly = Sm90Layout<D, KV>;
  constexpr bool F8 = kv_fp8(KV);
  if constexpr (p_fp8(KV)) {
    // V^T: D rows of 128 key bytes, K-major; a k-step is 32 bytes along the rows.
    const uint64_t dv0 = sm90::desc_k_major(sv);
#pragma unroll
    for (int t = 0; t < kPvSteps<KV>; ++t) {
      if constexpr (D == 128) sm90::wgmma_m64n128k32_rs_e4m3(o, pa[t], sm90::desc_advance(dv0, t * 32), 1);
      else sm90::wgmma_m64n64k32_rs_e4m3(o, pa[t], sm90::desc_advance(dv0, t * 32), 1);
    }
    return;
  }
  const uint64_t db0 = sm90::desc_mn_major(sv, Ly::kKvBlock);
#pragma unroll
  for (int t = 0; t < kPvSteps<KV>; ++t) {
    const uint64_t db = sm90::desc_advance(db0, t * 16 * 128);
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
  float c[2];           // raw score -> log2 units (softmax scale, K scale, the query row's scale)
};

// Masks the scores of the tile at k0 where it reaches past a row's position (or the key range),
// turns them into P (the MMA type, the wgmma A fragment) and rescales O.
template <int D, Sm90Kv KV>
__device__ __forceinline__ void softmax_tile(float (&s)[64], unsigned (&pa)[kPvSteps<KV>][4], float (&o)[D / 2],
                                             RowState& st, int k0, int ke) {
  constexpr MmaType T = kMmaType<KV>;
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
    const float c = st.c[h];
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
    if constexpr (p_fp8(KV)) {
      // p * 2^kPShift as E4M3; the sum carries the same factor. The A fragment of k-step t
      // holds, for row g (+ 8 h), slots 4 tig .. 4 tig + 3 = this lane's scores of columns
      // j = 4t and 4t + 1 (pa[t][h]), and slots 16 + 4 tig .. = columns 4t + 2 and 4t + 3
      // (pa[t][2 + h]); the producer stores V^T in that key order.
      const float base_p = base_l2 - kPShift;
#pragma unroll
      for (int t = 0; t < kKeys / 32; ++t)
#pragma unroll
        for (int u = 0; u < 2; ++u) {
          const int j0 = 4 * t + 2 * u, j1 = j0 + 1;
          const float p0 = sm90::fast_exp2(fmaf(s[j0 * 4 + 2 * h], c, -base_p));
          const float p1 = sm90::fast_exp2(fmaf(s[j0 * 4 + 2 * h + 1], c, -base_p));
          const float p2 = sm90::fast_exp2(fmaf(s[j1 * 4 + 2 * h], c, -base_p));
          const float p3 = sm90::fast_exp2(fmaf(s[j1 * 4 + 2 * h + 1], c, -base_p));
          sum += (p0 + p1) + (p2 + p3);
          const unsigned lo = __nv_cvt_float2_to_fp8x2(make_float2(p0, p1), __NV_SATFINITE, __NV_E4M3);
          const unsigned hi = __nv_cvt_float2_to_fp8x2(make_float2(p2, p3), __NV_SATFINITE, __NV_E4M3);
          pa[t][2 * u + h] = lo | hi << 16;
        }
    } else {
#pragma unroll
      for (int j = 0; j < kKeys / 8; ++j) {
        const float p0 = sm90::fast_exp2(fmaf(s[j * 4 + 2 * h], c, -base_l2));
        const float p1 = sm90::fast_exp2(fmaf(s[j * 4 + 2 * h + 1], c, -base_l2));
        sum += p0 + p1;
        pa[j / 2][(j % 2) * 2 + h] = pack2<T>(p0, p1);
      }
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
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    float lv = st.l[h];
    lv += __shfl_xor_sync(0xffffffffu, lv, 1);
    lv += __shfl_xor_sync(0xffffffffu, lv, 2);
    const int r = row0 + warp * 16 + g + 8 * h;
    if (r >= w.rows) continue;
    const int64_t oh = head_row(p, w, r);
    if (p.num_splits == 1) {
      const float inv = lv > 0.0f ? p.v_scale / lv : 0.0f;
      float* dst = p.out + oh * D;
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(dst + j * 8 + tig * 2) = make_float2(o[j * 4 + 2 * h] * inv, o[j * 4 + 2 * h + 1] * inv);
    } else {
      float* part = p.partial + ((oh - p.first_row * p.num_heads) * p.num_splits + w.split) * (D + 2);
#pragma unroll
      for (int j = 0; j < D / 8; ++j)
        *reinterpret_cast<float2*>(part + j * 8 + tig * 2) =
            make_float2(o[j * 4 + 2 * h] * p.v_scale, o[j * 4 + 2 * h + 1] * p.v_scale);
      if (tig == 0) {
        part[D] = st.m[h] * st.c[h];  // log2 units
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
template <int D, Sm90Kv KV>
__device__ __forceinline__ void consume(const Sm90Params& p, const CtaWork& w, int n_tiles, int wg,
                                        unsigned char* smem, uint32_t base, const Ring& kr, const Ring& vr) {
  using Ly = Sm90Layout<D, KV>;
  const int tid = threadIdx.x % 128, warp = tid / 32, g = (tid % 32) / 4;
  const int G = p.group;
  float* qscale = reinterpret_cast<float*>(smem + Ly::kQScaleOffset);  // [kRows], E4M3 query only
  if constexpr (query_fp8(KV)) load_q_e4m3<D, query_two_terms(KV)>(p, w, wg, smem, qscale);
  else load_q<D, KV>(p, w, wg, smem);
  sm90::fence_proxy_async();
  sm90::named_barrier_sync(1 + wg, 128);

  const int row0 = wg * 64;
  RowState st;
#pragma unroll
  for (int h = 0; h < 2; ++h) {
    st.qpos[h] = w.pos0 + min((row0 + warp * 16 + g + 8 * h) / G, w.ntok - 1);
    st.m[h] = -INFINITY;
    st.l[h] = 0.0f;
    st.c[h] = p.score_scale;
    if constexpr (query_fp8(KV)) st.c[h] *= qscale[row0 + warp * 16 + g + 8 * h];
  }
  const bool live = row0 < w.rows;
  st.first_pos = w.pos0 + min(row0 / G, w.ntok - 1);
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
  unsigned pa[kPvSteps<KV>][4];
  if (n_tiles > 0) {
    if (wg == 1) sm90::named_barrier_arrive(3, 256);  // warpgroup 0 takes the first turn
    acquire(kr, 0);
    sm90::named_barrier_sync(me, 256);
    sm90::wgmma_fence();
    issue_qk<D, KV>(s, base, kr.tile(0), wg);
    sm90::wgmma_commit();
    sm90::named_barrier_arrive(other, 256);
    sm90::wgmma_wait<0>();
    sm90::fence_regs(s);
    release(kr, 0);
    if (live) softmax_tile<D, KV>(s, pa, o, st, key0(0), w.ke);
    for (int it = 0; it + 1 < n_tiles; ++it) {
      acquire(vr, it);
      acquire(kr, it + 1);
      sm90::named_barrier_sync(me, 256);
      sm90::wgmma_fence();
      issue_pv<D, KV>(o, pa, vr.tile(it));
      issue_qk<D, KV>(s, base, kr.tile(it + 1), wg);
      sm90::wgmma_commit();
      sm90::named_barrier_arrive(other, 256);
      sm90::wgmma_wait<0>();
      sm90::fence_regs(o);
      sm90::fence_regs(pa);
      sm90::fence_regs(s);
      release(vr, it);
      release(kr, it + 1);
      if (live) softmax_tile<D, KV>(s, pa, o, st, key0(it + 1), w.ke);
    }
    const int last = n_tiles - 1;
    acquire(vr, last);
    sm90::named_barrier_sync(me, 256);
    sm90::wgmma_fence();
    issue_pv<D, KV>(o, pa, vr.tile(last));
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

}  // namespace lancet::cuda::prefill_sm90
