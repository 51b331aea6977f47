// Prompt-chunk attention on tensor cores for bf16 and fp8 caches, flash-attention style with
// the query heads of one KV head packed together: a CTA of 4 warps takes 128 query rows, each
// row one (token, query head of the group) pair, so one K/V tile load serves every head of the
// group; each warp owns 32 rows (two m16 tiles), so every K/V fragment read from shared memory
// feeds two MMAs. K/V tiles (32 keys at head_dim 128, 64 at 64) are double-buffered: the next tile's copies (cp.async for
// bf16; registers, converted on store, for fp8) are in flight while the current tile is
// computed, and one barrier per tile separates the buffers' uses. Q sits in shared memory,
// pre-scaled into log2 units. The causal mask runs only on tiles that reach past a warp's first
// row, and tiles past its last row are skipped.
//
// Split-KV: when the grid alone would leave multiprocessors idle (a short chunk late in a long
// context), the keys are cut into num_splits ranges and the splits' partial results combined
// by the split-KV merge (attention/merge.cu).
//
// Precision: BF16 cache -> BF16 MMA (Q, P rounded to BF16); FP8 cache -> FP16 MMA (E4M3 values
// exact in FP16, Q and P rounded to FP16, the K scale applied to the scores, the V scale to
// the output). FP32 accumulation. f32 caches take attention/prefill_f32_cache.cu.
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "backend/cuda/attention/common.cuh"
#include "backend/cuda/dynamic_smem.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/mma.cuh"

namespace lancet::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRowsPerCta = 128;  // (token, head) rows
constexpr int kRowsPerWarp = 32;  // two m16 tiles
constexpr int kSplitAlign = 64;   // split ranges start at multiples of every tile size

struct PrefillParams : PagedKernelParams {
  float* partial;               // [num_tokens, num_heads, num_splits, D + 2] when num_splits > 1,
                                // rows from first_row
  int64_t first_row;            // query_start[0]: the launch's first query row
  int tokens_per_cta;  // kRowsPerCta / group
  int num_splits, split_len;  // split_len: a multiple of kSplitAlign
  float q_scale;      // softmax scale * log2(e), applied to Q
  float score_scale;  // K cache scale (fp8) or 1
  float v_scale;      // V cache scale (fp8) or 1
};

template <int D, typename KV>
struct Layout {
  // Keys per tile: 32 at head_dim 128 keeps the two m-tiles' scores and outputs in registers.
  static constexpr int kTileK = D == 128 ? 32 : 64;
  static constexpr bool kFp8 = std::is_same_v<KV, __nv_fp8_e4m3>;
  static constexpr MmaType kType = kFp8 ? MmaType::kF16 : MmaType::kBF16;
  static constexpr int kStride = D + 8;  // b16 per shared row: conflict-free ldmatrix
  static_assert(kSplitAlign % kTileK == 0, "split ranges must start on tile boundaries");
  static constexpr int kQBytes = kRowsPerCta * kStride * 2;
  static constexpr int kTileBytes = kTileK * kStride * 2;       // one K or V tile
  static constexpr int kSmem = kQBytes + 2 * 2 * kTileBytes;   // Q + two (K, V) buffers
  // Per thread per tile: 16-byte chunks of K (and of V) as stored in the cache.
  static constexpr int kRawChunk = 16 / static_cast<int>(sizeof(KV));  // values per 16 bytes
  static constexpr int kChunksPerRow = D / kRawChunk;
  static constexpr int kLoads = kTileK * kChunksPerRow / kThreads;
  static_assert(kTileK * kChunksPerRow % kThreads == 0, "tile chunks must divide among the threads");
};

template <int D, typename KV>
__global__ void __launch_bounds__(kThreads, 2) flash_prefill_gqa_kernel(PrefillParams p) {
  using Ly = Layout<D, KV>;
  constexpr MmaType T = Ly::kType;
  constexpr int kStride = Ly::kStride;
  constexpr int kTileK = Ly::kTileK;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned short* s_q = reinterpret_cast<unsigned short*>(smem);
  auto s_k = [&](int b) { return reinterpret_cast<unsigned short*>(smem + Ly::kQBytes + b * 2 * Ly::kTileBytes); };
  auto s_v = [&](int b) {
    return reinterpret_cast<unsigned short*>(smem + Ly::kQBytes + b * 2 * Ly::kTileBytes + Ly::kTileBytes);
  };

  const int kvh = blockIdx.y;
  const int split = blockIdx.z;
  const int G = p.group, tpc = p.tokens_per_cta;
  // This CTA's (sequence, token tile): tiles never straddle sequences.
  int tile = blockIdx.x, s = 0, qs = 0, qlen = 0;
  for (; s < p.num_seqs; ++s) {
    qs = p.query_start[s];
    qlen = p.query_start[s + 1] - qs;
    const int tiles = (qlen + tpc - 1) / tpc;
    if (tile < tiles) break;
    tile -= tiles;
  }
  if (s >= p.num_seqs) return;
  const int ctx = p.context_lens[s];
  if (qlen <= 0 || ctx < qlen || static_cast<int64_t>(ctx) > static_cast<int64_t>(p.max_blocks_per_seq) * p.block_size) {
    if (threadIdx.x == 0 && split == 0) atomicOr(p.err, kErrSeqShape);
    return;
  }
  const int q0 = tile * tpc;                 // first token of the tile (within the sequence)
  const int ntok = min(tpc, qlen - q0);
  const int rows = ntok * G;                 // real rows; the rest are zero padding
  const int pos0 = ctx - qlen + q0;          // position of the tile's first token
  const int kv_end = pos0 + ntok;            // keys the tile's last token sees
  int kb = 0, ke = kv_end;
  if (p.num_splits > 1) {
    kb = min(split * p.split_len, kv_end);
    ke = min(kb + p.split_len, kv_end);
  }
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;

  // Q rows into shared memory: row r = token r / G, head r % G, scaled into log2 units.
  for (int idx = threadIdx.x; idx < kRowsPerCta * (D / 8); idx += kThreads) {
    const int r = idx / (D / 8), c = (idx % (D / 8)) * 8;
    uint4 v = make_uint4(0, 0, 0, 0);
    if (r < rows) {
      const float* src = p.q + (static_cast<int64_t>(qs + q0 + r / G) * p.num_heads + kvh * G + r % G) * D + c;
      const float4 a = reinterpret_cast<const float4*>(src)[0], b = reinterpret_cast<const float4*>(src)[1];
      const float sc = p.q_scale;
      v = make_uint4(pack2<T>(a.x * sc, a.y * sc), pack2<T>(a.z * sc, a.w * sc), pack2<T>(b.x * sc, b.y * sc),
                     pack2<T>(b.z * sc, b.w * sc));
    }
    *reinterpret_cast<uint4*>(s_q + r * kStride + c) = v;
  }

  const unsigned char* kc = static_cast<const unsigned char*>(p.k_cache);
  const unsigned char* vc = static_cast<const unsigned char*>(p.v_cache);
  const int32_t* table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  constexpr int kRowBytes = D * static_cast<int>(sizeof(KV));
  // Byte offset of key's row in the cache, or -1 (past the range, or a bad block id).
  auto locate = [&](int key, bool report) -> int64_t {
    if (key >= ke) return -1;
    const int32_t blk = table[key / p.block_size];
    if (blk < 0 || blk >= p.num_blocks) {
      if (report) atomicOr(p.err, kErrBlockId);
      return -1;
    }
    return ((static_cast<int64_t>(blk) * p.block_size + key % p.block_size) * p.num_kv_heads + kvh) * kRowBytes;
  };
  uint4 rk[Ly::kFp8 ? Ly::kLoads : 1], rv[Ly::kFp8 ? Ly::kLoads : 1];
  // Starts the copy of the tile at k0 into buffer b (bf16: cp.async; fp8: registers).
  auto fetch = [&](int k0, int b) {
#pragma unroll
    for (int i = 0; i < Ly::kLoads; ++i) {
      const int idx = threadIdx.x + i * kThreads;
      const int r = idx / Ly::kChunksPerRow, c = idx % Ly::kChunksPerRow;
      const int64_t row = locate(k0 + r, c == 0);
      if constexpr (Ly::kFp8) {
        rk[i] = rv[i] = make_uint4(0, 0, 0, 0);
        if (row >= 0) {
          rk[i] = *reinterpret_cast<const uint4*>(kc + row + c * 16);
          rv[i] = *reinterpret_cast<const uint4*>(vc + row + c * 16);
        }
      } else {
        const int bytes = row >= 0 ? 16 : 0;  // zero-fill keys past the range
        const int64_t src = row >= 0 ? row + c * 16 : 0;
        cp_async16_zfill(s_k(b) + r * kStride + c * 8, kc + src, bytes);
        cp_async16_zfill(s_v(b) + r * kStride + c * 8, vc + src, bytes);
      }
    }
    if constexpr (!Ly::kFp8) cp_async_commit();
  };
  // Completes the copy into buffer b (fp8: converts the registers and stores them).
  auto land = [&](int b) {
    if constexpr (Ly::kFp8) {
#pragma unroll
      for (int i = 0; i < Ly::kLoads; ++i) {
        const int idx = threadIdx.x + i * kThreads;
        const int r = idx / Ly::kChunksPerRow, c = idx % Ly::kChunksPerRow;
        uint4 lo, hi;
        fp8x16_to_f16(rk[i], &lo, &hi);
        *reinterpret_cast<uint4*>(s_k(b) + r * kStride + c * 16) = lo;
        *reinterpret_cast<uint4*>(s_k(b) + r * kStride + c * 16 + 8) = hi;
        fp8x16_to_f16(rv[i], &lo, &hi);
        *reinterpret_cast<uint4*>(s_v(b) + r * kStride + c * 16) = lo;
        *reinterpret_cast<uint4*>(s_v(b) + r * kStride + c * 16 + 8) = hi;
      }
    } else {
      cp_async_wait<0>();
    }
  };

  float o[2][D / 8][4];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int n = 0; n < D / 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  float m[2][2] = {{-INFINITY, -INFINITY}, {-INFINITY, -INFINITY}};  // [m-tile][lo, hi]
  float l[2][2] = {{0.0f, 0.0f}, {0.0f, 0.0f}};
  // Positions of this thread's four rows (padding rows take the last token's: never stored).
  const int wr0 = warp * kRowsPerWarp;
  int qpos[2][2];
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) qpos[mt][h] = pos0 + min((wr0 + mt * 16 + h * 8 + g) / G, ntok - 1);
  const bool warp_live = wr0 < rows;
  const int warp_first_pos = pos0 + min(wr0 / G, ntok - 1);
  const int warp_last_pos = pos0 + min((wr0 + kRowsPerWarp - 1) / G, ntok - 1);

  const int n_tiles = ke > kb ? (ke - kb + kTileK - 1) / kTileK : 0;
  if (n_tiles > 0) {
    fetch(kb, 0);
    land(0);
  }
  __syncthreads();  // Q and the first tile are in shared memory
  for (int j = 0; j < n_tiles; ++j) {
    const int k0 = kb + j * kTileK, b = j % 2;
    if (j + 1 < n_tiles) fetch(k0 + kTileK, b ^ 1);  // in flight during this tile's math
    if (warp_live && k0 <= warp_last_pos) {
      const unsigned short* sk = s_k(b);
      const unsigned short* sv = s_v(b);
      // S = Q K^T: 32 rows x 64 keys. A fragments through ldmatrix (lane l: row l % 16, dims
      // + (l / 16) * 8); B as in the decode kernel: matrix l / 8 holds keys (l / 16) * 8 ...,
      // dims + ((l / 8) % 2) * 8.
      float sc[2][kTileK / 8][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt)
#pragma unroll
        for (int n = 0; n < kTileK / 8; ++n) sc[mt][n][0] = sc[mt][n][1] = sc[mt][n][2] = sc[mt][n][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        unsigned a[2][4];
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
          ldmatrix_x4(a[mt], s_q + (wr0 + mt * 16 + lane % 16) * kStride + kk * 16 + (lane / 16) * 8);
#pragma unroll
        for (int n = 0; n < kTileK / 8; n += 2) {
          unsigned bf[4];
          ldmatrix_x4(bf, sk + (n * 8 + (lane / 16) * 8 + lane % 8) * kStride + kk * 16 + ((lane / 8) % 2) * 8);
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            mma16816<T>(sc[mt][n], a[mt], bf[0], bf[1]);
            mma16816<T>(sc[mt][n + 1], a[mt], bf[2], bf[3]);
          }
        }
      }
      if constexpr (Ly::kFp8) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int n = 0; n < kTileK / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) sc[mt][n][e] *= p.score_scale;
      }
      // Causal mask (and keys past this split's range) only where the tile reaches them.
      if (k0 + kTileK - 1 > warp_first_pos || k0 + kTileK > ke) {
#pragma unroll
        for (int mt = 0; mt < 2; ++mt)
#pragma unroll
          for (int n = 0; n < kTileK / 8; ++n)
#pragma unroll
            for (int e = 0; e < 4; ++e) {
              const int kpos = k0 + n * 8 + tig * 2 + (e & 1);
              if (kpos > qpos[mt][e >> 1] || kpos >= ke) sc[mt][n][e] = -INFINITY;
            }
      }
      unsigned pa[2][kTileK / 16][4];
#pragma unroll
      for (int mt = 0; mt < 2; ++mt) {
        float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
        for (int n = 0; n < kTileK / 8; ++n) {
          mx_lo = fmaxf(mx_lo, fmaxf(sc[mt][n][0], sc[mt][n][1]));
          mx_hi = fmaxf(mx_hi, fmaxf(sc[mt][n][2], sc[mt][n][3]));
        }
#pragma unroll
        for (int off = 1; off <= 2; off *= 2) {
          mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
          mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
        }
        mx_lo = fmaxf(m[mt][0], mx_lo);
        mx_hi = fmaxf(m[mt][1], mx_hi);
        // Rows with every key masked so far keep m = -inf; 0 as their base makes every p 0.
        const float base_lo = mx_lo == -INFINITY ? 0.0f : mx_lo, base_hi = mx_hi == -INFINITY ? 0.0f : mx_hi;
        const float corr_lo = exp2f(m[mt][0] - base_lo), corr_hi = exp2f(m[mt][1] - base_hi);
        m[mt][0] = mx_lo;
        m[mt][1] = mx_hi;
        float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
        for (int n = 0; n < kTileK / 8; ++n) {
          const float p0 = exp2f(sc[mt][n][0] - base_lo), p1 = exp2f(sc[mt][n][1] - base_lo);
          const float p2 = exp2f(sc[mt][n][2] - base_hi), p3 = exp2f(sc[mt][n][3] - base_hi);
          sum_lo += p0 + p1;
          sum_hi += p2 + p3;
          pa[mt][n / 2][(n % 2) * 2] = pack2<T>(p0, p1);
          pa[mt][n / 2][(n % 2) * 2 + 1] = pack2<T>(p2, p3);
        }
        l[mt][0] = l[mt][0] * corr_lo + sum_lo;
        l[mt][1] = l[mt][1] * corr_hi + sum_hi;
        if (__any_sync(0xffffffffu, corr_lo != 1.0f || corr_hi != 1.0f)) {  // skipped once the maxima settle
#pragma unroll
          for (int n = 0; n < D / 8; ++n) {
            o[mt][n][0] *= corr_lo;
            o[mt][n][1] *= corr_lo;
            o[mt][n][2] *= corr_hi;
            o[mt][n][3] *= corr_hi;
          }
        }
      }
      // O += P V: V fragments through ldmatrix.trans (matrix l / 8: keys ((l / 8) % 2) * 8 ...,
      // dims + (l / 16) * 8), each feeding both m-tiles.
#pragma unroll
      for (int t = 0; t < kTileK / 16; ++t) {
        const unsigned short* vb = sv + (t * 16 + ((lane / 8) % 2) * 8 + lane % 8) * kStride + (lane / 16) * 8;
#pragma unroll
        for (int n = 0; n < D / 8; n += 2) {
          unsigned bf[4];
          ldmatrix_x4_trans(bf, vb + n * 8);
#pragma unroll
          for (int mt = 0; mt < 2; ++mt) {
            mma16816<T>(o[mt][n], pa[mt][t], bf[0], bf[1]);
            mma16816<T>(o[mt][n + 1], pa[mt][t], bf[2], bf[3]);
          }
        }
      }
    }
    if (j + 1 < n_tiles) land(b ^ 1);
    __syncthreads();  // buffer b is free for tile j + 2; buffer b ^ 1 is complete
  }

  // Row sums over the quad, then normalize and store (or write this split's partial result).
#pragma unroll
  for (int mt = 0; mt < 2; ++mt)
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float lv = l[mt][h];
      lv += __shfl_xor_sync(0xffffffffu, lv, 1);
      lv += __shfl_xor_sync(0xffffffffu, lv, 2);
      const int r = wr0 + mt * 16 + h * 8 + g;
      if (r >= rows) continue;
      const int64_t oh = static_cast<int64_t>(qs + q0 + r / G) * p.num_heads + kvh * G + r % G;
      if (p.num_splits == 1) {
        const float inv = lv > 0.0f ? p.v_scale / lv : 0.0f;
        float* dst = p.out + oh * D;
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<float2*>(dst + n * 8 + tig * 2) = make_float2(o[mt][n][2 * h] * inv, o[mt][n][2 * h + 1] * inv);
      } else {
        float* part = p.partial + ((oh - p.first_row * p.num_heads) * p.num_splits + split) * (D + 2);
#pragma unroll
        for (int n = 0; n < D / 8; ++n)
          *reinterpret_cast<float2*>(part + n * 8 + tig * 2) =
              make_float2(o[mt][n][2 * h] * p.v_scale, o[mt][n][2 * h + 1] * p.v_scale);
        if (tig == 0) {
          part[D] = m[mt][h];  // log2 units
          part[D + 1] = lv;
        }
      }
    }
}

template <int D, typename KV>
cudaError_t launch_typed(const PrefillParams& p, unsigned grid_x, cudaStream_t s) {
  cudaError_t e = allow_dynamic_smem<flash_prefill_gqa_kernel<D, KV>>(Layout<D, KV>::kSmem);
  if (e != cudaSuccess) return e;
  const dim3 grid(grid_x, static_cast<unsigned>(p.num_kv_heads), static_cast<unsigned>(p.num_splits));
  flash_prefill_gqa_kernel<D, KV><<<grid, kThreads, Layout<D, KV>::kSmem, s>>>(p);
  return cudaGetLastError();
}

}  // namespace

int64_t attention_prefill_ctas(int64_t num_tokens, int64_t group, int64_t num_kv_heads) {
  const int64_t tpc = group <= kRowsPerCta ? kRowsPerCta / group : 0;
  if (tpc == 0) return 0;
  return (num_tokens + tpc - 1) / tpc * num_kv_heads;
}

cudaError_t launch_attention_prefill_sm80(const PagedAttentionArgs& a, const KvCacheLayer& c,
                                          const AttentionPlan& plan, unsigned* err, cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (!paged_shape_ok(a, c, 0x3fffffffLL)) return cudaErrorInvalidValue;
  if (c.dtype != DType::kBF16 && c.dtype != DType::kF8E4M3) return cudaErrorInvalidValue;
  const int64_t group = a.num_heads / c.num_kv_heads;
  if (group > kRowsPerCta) return cudaErrorInvalidValue;
  if (plan.num_splits < 1 || (plan.num_splits > 1 && (!plan.partial || plan.split_len <= 0 || plan.split_len % kSplitAlign)))
    return cudaErrorInvalidValue;
  const bool fp8 = c.dtype == DType::kF8E4M3;
  PrefillParams p{};
  static_cast<PagedKernelParams&>(p) = paged_kernel_params(a, c, err);
  p.partial = plan.partial;
  p.first_row = plan.first_row;
  p.tokens_per_cta = static_cast<int>(kRowsPerCta / group);
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  p.q_scale = a.scale * kLog2e;
  p.score_scale = fp8 ? c.k_scale : 1.0f;
  p.v_scale = fp8 ? c.v_scale : 1.0f;
  // Tiles: at most one partial tile per sequence beyond num_tokens / tokens_per_cta.
  const unsigned grid_x = static_cast<unsigned>((a.num_tokens + p.tokens_per_cta - 1) / p.tokens_per_cta + a.num_seqs);
  cudaError_t e;
  if (c.head_dim == 64)
    e = fp8 ? launch_typed<64, __nv_fp8_e4m3>(p, grid_x, s) : launch_typed<64, __nv_bfloat16>(p, grid_x, s);
  else if (c.head_dim == 128)
    e = fp8 ? launch_typed<128, __nv_fp8_e4m3>(p, grid_x, s) : launch_typed<128, __nv_bfloat16>(p, grid_x, s);
  else
    return cudaErrorInvalidValue;
  if (e != cudaSuccess || p.num_splits == 1) return e;
  return launch_attention_merge(p.partial, a.num_tokens * a.num_heads, p.num_splits, nullptr, c.head_dim,
                                p.out + plan.first_row * a.num_heads * c.head_dim, s);
}

}  // namespace lancet::cuda
