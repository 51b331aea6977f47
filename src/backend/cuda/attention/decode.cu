// Decode attention on tensor cores (the fast precision mode's path for query rows that are not
// part of a long prompt chunk: decode steps, verification steps, short chunks). One CTA per
// (query token, KV head, context split) holds the KV head's query heads as the 16 rows of an
// m16n8k16 MMA tile (rows past the group are zero), so S = Q K^T and O += P V cost two MMA
// k-steps per 16 keys and the CUDA cores only run the online softmax. Each of the 4 warps runs
// its own two-stage cp.async pipeline over interleaved stages of 16 keys (BF16) or 32 keys
// (FP8: one softmax per 32 keys) from the paged cache into shared memory, zero-filling keys
// past the range; per stage, each lane finds one key's cache row and the copies take the rows'
// offsets from those lanes by shuffles (one block-table read and division per lane).
//
// FP8 caches: the E4M3 rows stay as they are in shared memory and every lane builds its MMA
// fragments from them in registers (one cvt per pair of values, no FP16 copy of the tile).
// That works because the head dimensions and, inside a 16-key stage, the keys may be taken in
// any order that Q, K, P and V agree on: lane (g, t) multiplies the K dims t * D/4 ... (one
// 32-bit word per k-step), the keys 4t .. 4t + 3 of each 16-key half of P V (one word per
// dim, built from four rows by byte permutes), and the V dims g * D/8 ... (contiguous); the
// output columns are put back in order when the warps merge.
//
// Precision: Q and P are rounded to BF16 for a BF16 cache; for an FP8 cache the MMA runs in
// FP16, which holds E4M3 values exactly and rounds Q and P to FP16. The K scale is applied to
// the scores and the V scale to the output. Accumulation is FP32.
// Partial results of a split go through the split-KV merge (attention/merge.cu).
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_fp8.h>

#include <type_traits>

#include "backend/cuda/attention/common.cuh"
#include "backend/cuda/dynamic_smem.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/pdl.cuh"
#include "backend/cuda/mma.cuh"

namespace lancet::cuda {
namespace {

constexpr int kWarps = 4;
constexpr int kThreads = kWarps * 32;
constexpr int kRows = 16;      // query heads per CTA (the MMA's M)
constexpr int kCtasPerSm = 3;  // resident CTAs per multiprocessor (shared memory, <= 168 registers)

// 2^x through the special-function unit (no denormal or range fix-up: arguments are <= 0 and
// results below 2^-126 count as 0).
__device__ __forceinline__ float fast_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

struct DecodeParams : PagedKernelParams {
  float* partial;               // [num_tokens, num_heads, grid_splits, D + 2]
  int head_chunks;              // CTAs per KV head (kRows query heads each)
  int num_splits, split_len;  // the plan (overridden by plan_dev when set)
  int grid_splits;            // splits in the grid: the partial buffer's stride
  const int32_t* plan_dev;    // [2] {num_splits, split_len} read at run time, or null
  float q_scale;      // softmax scale * log2(e), applied to Q
  float score_scale;  // the K cache scale (1 unless fp8), applied to the scores
  float v_scale;      // the V cache scale (1 unless fp8)
};

template <int D, typename KV>
struct Layout {
  static constexpr bool kFp8 = std::is_same_v<KV, __nv_fp8_e4m3>;
  static constexpr MmaType kType = kFp8 ? MmaType::kF16 : MmaType::kBF16;
  // Keys per pipeline stage: one MMA k-step of P V for BF16; two for FP8, whose rows are half
  // the bytes (one softmax per 32 keys).
  static constexpr int kKeys = kFp8 ? 32 : 16;
  static constexpr int kHalves = kKeys / 16;
  // Stages per warp in shared memory: few enough that kCtasPerSm CTAs of 4 warps fit a
  // multiprocessor (the kernel is latency-bound: more warps beat deeper pipelines).
  static constexpr int kStages = 2;
  static constexpr int kStride = D + 8;                   // b16 per shared tile row (conflict-free ldmatrix)
  static constexpr int kTileBytes = kKeys * kStride * 2;  // one K or V tile of b16
  static constexpr int kRawRow = D * static_cast<int>(sizeof(KV));  // bytes per cache row
  // FP8 rows in shared memory, laid out so a quarter warp's 16-byte fragment reads hit distinct
  // banks: K rows (2n and 2n + 1 at 32-byte lane offsets) D + 16 bytes apart at head_dim 128;
  // V rows (4t apart at 16-byte lane offsets) unpadded at head_dim 128 with 16-byte chunk c of
  // row r at c ^ 2 ((r / 4) % 4) (v_chunk), D + 16 bytes apart at head_dim 64.
  static constexpr int kKRawStride = D == 128 ? D + 16 : D;
  static constexpr int kVRawStride = D == 128 ? D : D + 16;
  static __device__ __forceinline__ int v_chunk(int row, int chunk) {
    return D == 128 ? chunk ^ (2 * ((row >> 2) & 3)) : chunk;
  }
  // BF16: stages are the MMA tiles themselves; FP8: the E4M3 rows (K then V).
  static constexpr int kStageBytes = kFp8 ? kKeys * (kKRawStride + kVRawStride) : 2 * kTileBytes;
  static constexpr int kWarpBytes = kStages * kStageBytes;
  static constexpr int kOStride = D + 8;  // floats per row of a warp's output in the merge (conflict-free stores)
  static constexpr int kMergeBytes = kWarps * kRows * (kOStride + 2) * 4;
  static constexpr int kSmem = kWarps * kWarpBytes > kMergeBytes ? kWarps * kWarpBytes : kMergeBytes;
  static_assert(kCtasPerSm * (kSmem + 1024) <= 227 * 1024, "kCtasPerSm CTAs must fit a multiprocessor's shared memory");
  static constexpr int kChunksPerRow = kRawRow / 16;
  static constexpr int kCopies = kKeys * kChunksPerRow / 32;  // 16-byte copies per lane per K (and V)
  static_assert(kKeys * kChunksPerRow % 32 == 0, "a stage's rows must divide among the lanes");
  static_assert(kWarpBytes % 16 == 0 && kTileBytes % 16 == 0 && kStageBytes % 16 == 0, "16-byte alignment");
};

template <int D, typename KV>
__global__ void __launch_bounds__(kThreads, kCtasPerSm) flash_decode_kernel(DecodeParams p) {
  using Ly = Layout<D, KV>;
  constexpr MmaType T = Ly::kType;
  constexpr int S = Ly::kStages;
  constexpr int K = Ly::kKeys;
  extern __shared__ __align__(16) unsigned char smem[];
  pdl_wait();
  // The plan first: its load flies with the sequence lookups instead of after them.
  const int2 plan = p.plan_dev ? make_int2(p.plan_dev[0], p.plan_dev[1]) : make_int2(p.num_splits, p.split_len);

  const int t = blockIdx.x;
  const int kvh = blockIdx.y / p.head_chunks;
  const int r0 = (blockIdx.y % p.head_chunks) * kRows;  // first head of the group in this CTA
  const int nh = min(kRows, p.group - r0);
  const int h0 = kvh * p.group + r0;
  const int split = blockIdx.z;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const int g = lane / 4, tig = lane % 4;

  const QueryRow qrow =
      find_query_row(t, p.query_start, p.context_lens, p.num_seqs, p.max_blocks_per_seq, p.block_size, p.err);
  const int s = qrow.seq, n_keys = qrow.n_keys;
  const SplitRange range = split_range(nullptr, plan.x, plan.y, split, n_keys, p.err);
  if (!range.run) return;
  const int num_splits = range.num_splits, kb = range.kb, ke = range.ke;

  // Q as the A operand: row r = head h0 + r (zero past the group), scaled into log2 units.
  unsigned qa[D / 16][4];
  {
    const float* q_lo = g < nh ? p.q + (static_cast<int64_t>(t) * p.num_heads + h0 + g) * D : nullptr;
    const float* q_hi = g + 8 < nh ? p.q + (static_cast<int64_t>(t) * p.num_heads + h0 + g + 8) * D : nullptr;
    if constexpr (Ly::kFp8) {
      // k-step kk, columns 2t, 2t + 1 and 2t + 8, 2t + 9: the dims t * D/4 + kk * 4 (+ 2), the
      // K fragment's order; four contiguous floats per row and k-step.
      const float4 zero = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int c = tig * (D / 4) + kk * 4;
        const float4 a = q_lo ? *reinterpret_cast<const float4*>(q_lo + c) : zero;
        const float4 b = q_hi ? *reinterpret_cast<const float4*>(q_hi + c) : zero;
        qa[kk][0] = pack2<T>(a.x * p.q_scale, a.y * p.q_scale);
        qa[kk][1] = pack2<T>(b.x * p.q_scale, b.y * p.q_scale);
        qa[kk][2] = pack2<T>(a.z * p.q_scale, a.w * p.q_scale);
        qa[kk][3] = pack2<T>(b.z * p.q_scale, b.w * p.q_scale);
      }
    } else {
      // k-step kk, columns 2t, 2t + 1 and 2t + 8, 2t + 9: dims kk * 16 + 2t (+ 8) in order.
      const float2 zero = make_float2(0.0f, 0.0f);
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        const int c = kk * 16 + tig * 2, c2 = c + 8;
        const float2 a0 = q_lo ? *reinterpret_cast<const float2*>(q_lo + c) : zero;
        const float2 a1 = q_hi ? *reinterpret_cast<const float2*>(q_hi + c) : zero;
        const float2 a2 = q_lo ? *reinterpret_cast<const float2*>(q_lo + c2) : zero;
        const float2 a3 = q_hi ? *reinterpret_cast<const float2*>(q_hi + c2) : zero;
        qa[kk][0] = pack2<T>(a0.x * p.q_scale, a0.y * p.q_scale);
        qa[kk][1] = pack2<T>(a1.x * p.q_scale, a1.y * p.q_scale);
        qa[kk][2] = pack2<T>(a2.x * p.q_scale, a2.y * p.q_scale);
        qa[kk][3] = pack2<T>(a3.x * p.q_scale, a3.y * p.q_scale);
      }
    }
  }
  float o[D / 8][4];
#pragma unroll
  for (int n = 0; n < D / 8; ++n) o[n][0] = o[n][1] = o[n][2] = o[n][3] = 0.0f;
  float m_lo = -INFINITY, m_hi = -INFINITY, l_lo = 0.0f, l_hi = 0.0f;

  const unsigned char* kc = static_cast<const unsigned char*>(p.k_cache);
  const unsigned char* vc = static_cast<const unsigned char*>(p.v_cache);
  const int32_t* table = p.block_tables + static_cast<int64_t>(s) * p.max_blocks_per_seq;
  unsigned char* wbase = smem + warp * Ly::kWarpBytes;
  const int first = kb + warp * K;  // the warp's stage i covers keys first + i * kWarps * K ...
  const int n_stages = ke > first ? (ke - first + kWarps * K - 1) / (kWarps * K) : 0;

  // Lane l < K finds the cache row of key key0 + l of each stage (one block-table read and one
  // division per lane and stage); the copies take their rows' offsets from those lanes. The
  // table entry of a stage is read a stage before its copies are issued, so the copies never
  // wait on it.
  auto table_entry = [&](int i) -> int32_t {  // the lane's block id for stage i (-1: no key)
    const int key = first + i * kWarps * K + lane;
    return i < n_stages && lane < K && key < ke ? table[key / p.block_size] : -1;
  };
  auto issue = [&](int i, int32_t blk) {
    if (i < n_stages) {
      unsigned char* buf = wbase + (i % S) * Ly::kStageBytes;
      const int key0 = first + i * kWarps * K;
      int64_t my_row = -1;  // byte offset of the key's row, or -1: zero-fill
      if (lane < K && key0 + lane < ke) {
        const int key = key0 + lane;
        const int bi = key / p.block_size;
        if (blk < 0 || blk >= p.num_blocks) {
          atomicOr(p.err, kErrBlockId);
        } else {
          my_row = ((static_cast<int64_t>(blk) * p.block_size + (key - bi * p.block_size)) * p.num_kv_heads + kvh) *
                   Ly::kRawRow;
        }
      }
#pragma unroll
      for (int c = 0; c < Ly::kCopies; ++c) {
        const int idx = lane + 32 * c;
        const int r = idx / Ly::kChunksPerRow, off = (idx % Ly::kChunksPerRow) * 16;
        const int64_t row = __shfl_sync(0xffffffffu, my_row, r);
        const int bytes = row >= 0 ? 16 : 0;
        const int64_t src = row >= 0 ? row + off : 0;
        const int dk = Ly::kFp8 ? r * Ly::kKRawStride + off : r * Ly::kStride * 2 + off;
        const int dv = Ly::kFp8 ? K * Ly::kKRawStride + r * Ly::kVRawStride + Ly::v_chunk(r, off / 16) * 16
                                : Ly::kTileBytes + r * Ly::kStride * 2 + off;
        cp_async16_zfill(buf + dk, kc + src, bytes);
        cp_async16_zfill(buf + dv, vc + src, bytes);
      }
    }
    cp_async_commit();  // one group per stage index, empty or not, keeps the wait count exact
  };

#pragma unroll
  for (int i = 0; i < S - 1; ++i) issue(i, table_entry(i));
  int32_t next_blk = table_entry(S - 1);
  for (int i = 0; i < n_stages; ++i) {
    issue(i + S - 1, next_blk);
    next_blk = table_entry(i + S);
    cp_async_wait<S - 1>();
    __syncwarp();
    const unsigned char* buf = wbase + (i % S) * Ly::kStageBytes;
    // S = Q K^T: 16 heads x K keys (n-tiles of 8 keys).
    float sc[2 * Ly::kHalves][4];
#pragma unroll
    for (int nt = 0; nt < 2 * Ly::kHalves; ++nt) sc[nt][0] = sc[nt][1] = sc[nt][2] = sc[nt][3] = 0.0f;
    if constexpr (Ly::kFp8) {
      // n-tile nt, column g: key 16 (nt / 2) + 4 (g / 2) + 2 (nt % 2) + g % 2 (so that P V's
      // lane t holds keys 4t .. 4t + 3 of each 16-key half); lane t's dims t * D/4 ..., one word
      // per k-step.
#pragma unroll
      for (int nt = 0; nt < 2 * Ly::kHalves; ++nt) {
        const unsigned char* row =
            buf + (16 * (nt / 2) + 4 * (g / 2) + 2 * (nt % 2) + g % 2) * Ly::kKRawStride + tig * (D / 4);
        unsigned kw[D / 16];
#pragma unroll
        for (int c = 0; c < D / 64; ++c) {
          const uint4 v = *reinterpret_cast<const uint4*>(row + c * 16);
          kw[4 * c] = v.x;
          kw[4 * c + 1] = v.y;
          kw[4 * c + 2] = v.z;
          kw[4 * c + 3] = v.w;
        }
#pragma unroll
        for (int kk = 0; kk < D / 16; ++kk)
          mma16816<T>(sc[nt], qa[kk], fp8x2_to_f16x2(kw[kk]), fp8x2_to_f16x2(kw[kk] >> 16));
      }
    } else {
      // ldmatrix.x4 matrix l / 8 holds keys ((l / 16) * 8 ...) and dims kk + ((l / 8) % 2) * 8.
      const unsigned short* k16 = reinterpret_cast<const unsigned short*>(buf);
      const unsigned short* kb16 = k16 + ((lane / 16) * 8 + lane % 8) * Ly::kStride + ((lane / 8) % 2) * 8;
#pragma unroll
      for (int kk = 0; kk < D / 16; ++kk) {
        unsigned b[4];
        ldmatrix_x4(b, kb16 + kk * 16);
        mma16816<T>(sc[0], qa[kk], b[0], b[1]);
        mma16816<T>(sc[1], qa[kk], b[2], b[3]);
      }
    }
    const int key0 = first + i * kWarps * K;
#pragma unroll
    for (int n = 0; n < 2 * Ly::kHalves; ++n)
#pragma unroll
      for (int j = 0; j < 2; ++j) {
        // zero-filled keys past the range
        const int key = key0 + (Ly::kFp8 ? 16 * (n / 2) + 4 * tig + 2 * (n % 2) : n * 8 + tig * 2) + j;
        const bool in = key < ke;
        sc[n][j] = in ? sc[n][j] * p.score_scale : -INFINITY;
        sc[n][2 + j] = in ? sc[n][2 + j] * p.score_scale : -INFINITY;
      }
    float mx_lo = -INFINITY, mx_hi = -INFINITY;
#pragma unroll
    for (int n = 0; n < 2 * Ly::kHalves; ++n) {
      mx_lo = fmaxf(mx_lo, fmaxf(sc[n][0], sc[n][1]));
      mx_hi = fmaxf(mx_hi, fmaxf(sc[n][2], sc[n][3]));
    }
#pragma unroll
    for (int off = 1; off <= 2; off *= 2) {
      mx_lo = fmaxf(mx_lo, __shfl_xor_sync(0xffffffffu, mx_lo, off));
      mx_hi = fmaxf(mx_hi, __shfl_xor_sync(0xffffffffu, mx_hi, off));
    }
    mx_lo = fmaxf(m_lo, mx_lo);
    mx_hi = fmaxf(m_hi, mx_hi);
    // Rows with every key masked so far keep m = -inf; 0 as their base makes every p 0.
    const float base_lo = mx_lo == -INFINITY ? 0.0f : mx_lo, base_hi = mx_hi == -INFINITY ? 0.0f : mx_hi;
    const float corr_lo = fast_exp2(m_lo - base_lo), corr_hi = fast_exp2(m_hi - base_hi);
    m_lo = mx_lo;
    m_hi = mx_hi;
    // P as the A operand of each 16-key k-step: keys 0-7 in registers 0/1, 8-15 in 2/3.
    unsigned pa[Ly::kHalves][4];
    float sum_lo = 0.0f, sum_hi = 0.0f;
#pragma unroll
    for (int h = 0; h < Ly::kHalves; ++h) {
      float pl[2][4];
#pragma unroll
      for (int n = 0; n < 2; ++n) {
        pl[n][0] = fast_exp2(sc[2 * h + n][0] - base_lo);
        pl[n][1] = fast_exp2(sc[2 * h + n][1] - base_lo);
        pl[n][2] = fast_exp2(sc[2 * h + n][2] - base_hi);
        pl[n][3] = fast_exp2(sc[2 * h + n][3] - base_hi);
      }
      sum_lo += (pl[0][0] + pl[0][1]) + (pl[1][0] + pl[1][1]);
      sum_hi += (pl[0][2] + pl[0][3]) + (pl[1][2] + pl[1][3]);
      pa[h][0] = pack2<T>(pl[0][0], pl[0][1]);
      pa[h][1] = pack2<T>(pl[0][2], pl[0][3]);
      pa[h][2] = pack2<T>(pl[1][0], pl[1][1]);
      pa[h][3] = pack2<T>(pl[1][2], pl[1][3]);
    }
    l_lo = l_lo * corr_lo + sum_lo;
    l_hi = l_hi * corr_hi + sum_hi;
    // Once the maxima settle, corr is exactly 1 in every lane and the rescale is skipped.
    if (__any_sync(0xffffffffu, corr_lo != 1.0f || corr_hi != 1.0f)) {
#pragma unroll
      for (int n = 0; n < D / 8; ++n) {
        o[n][0] *= corr_lo;
        o[n][1] *= corr_lo;
        o[n][2] *= corr_hi;
        o[n][3] *= corr_hi;
      }
    }
    if constexpr (Ly::kFp8) {
      // O += P V per 16-key half: lane (g, t) needs V[keys 4t .. 4t + 3][dim g * D/8 + n] for
      // n-tile n: its four rows' D/8 bytes, paired key by key with byte permutes.
      constexpr int kWords = D / 32;  // words of the lane's D/8 bytes per row
#pragma unroll
      for (int h = 0; h < Ly::kHalves; ++h) {
        unsigned vw[4][kWords];
#pragma unroll
        for (int k = 0; k < 4; ++k) {
          const int vr = 16 * h + 4 * tig + k;  // lane g's D/8 bytes: half of chunk g / 2 at head_dim 64
          const unsigned char* row = buf + K * Ly::kKRawStride + vr * Ly::kVRawStride +
                                     Ly::v_chunk(vr, g * (D / 8) / 16) * 16 + (g * (D / 8)) % 16;
          if constexpr (kWords == 4) {
            const uint4 v = *reinterpret_cast<const uint4*>(row);
            vw[k][0] = v.x;
            vw[k][1] = v.y;
            vw[k][2] = v.z;
            vw[k][3] = v.w;
          } else {
            const uint2 v = *reinterpret_cast<const uint2*>(row);
            vw[k][0] = v.x;
            vw[k][1] = v.y;
          }
        }
#pragma unroll
        for (int w = 0; w < kWords; ++w) {
          // pairs (key 4t, 4t + 1) and (4t + 2, 4t + 3) of dims 4w, 4w + 1 and of 4w + 2, 4w + 3
          const unsigned lo01 = __byte_perm(vw[0][w], vw[1][w], 0x5140), hi01 = __byte_perm(vw[0][w], vw[1][w], 0x7362);
          const unsigned lo23 = __byte_perm(vw[2][w], vw[3][w], 0x5140), hi23 = __byte_perm(vw[2][w], vw[3][w], 0x7362);
          mma16816<T>(o[4 * w], pa[h], fp8x2_to_f16x2(lo01), fp8x2_to_f16x2(lo23));
          mma16816<T>(o[4 * w + 1], pa[h], fp8x2_to_f16x2(lo01 >> 16), fp8x2_to_f16x2(lo23 >> 16));
          mma16816<T>(o[4 * w + 2], pa[h], fp8x2_to_f16x2(hi01), fp8x2_to_f16x2(hi23));
          mma16816<T>(o[4 * w + 3], pa[h], fp8x2_to_f16x2(hi01 >> 16), fp8x2_to_f16x2(hi23 >> 16));
        }
      }
    } else {
      // O += P V, V (keys x dims) through ldmatrix.trans: matrix l / 8 holds keys
      // ((l / 8) % 2) * 8 ... and dims n0 + (l / 16) * 8.
      const unsigned short* v16 = reinterpret_cast<const unsigned short*>(buf + Ly::kTileBytes);
      const unsigned short* vb16 = v16 + (((lane / 8) % 2) * 8 + lane % 8) * Ly::kStride + (lane / 16) * 8;
#pragma unroll
      for (int n = 0; n < D / 8; n += 2) {
        unsigned b[4];
        ldmatrix_x4_trans(b, vb16 + n * 8);
        mma16816<T>(o[n], pa[0], b[0], b[1]);
        mma16816<T>(o[n + 1], pa[0], b[2], b[3]);
      }
    }
    __syncwarp();  // this stage's buffers are refilled later
  }
  cp_async_wait<0>();
  pdl_launch_dependents();  // the next kernel may start its prologue during the merge

#pragma unroll
  for (int off = 1; off <= 2; off *= 2) {
    l_lo += __shfl_xor_sync(0xffffffffu, l_lo, off);
    l_hi += __shfl_xor_sync(0xffffffffu, l_hi, off);
  }
  __syncthreads();  // every warp is done with its stages: the merge reuses the shared memory
  constexpr int OS = Ly::kOStride;
  float* s_o = reinterpret_cast<float*>(smem);  // [kWarps][kRows][OS]: n-tile n, column j at n * 8 + j
  float* s_m = s_o + kWarps * kRows * OS;       // [kWarps][kRows]
  float* s_l = s_m + kWarps * kRows;            // [kWarps][kRows]
#pragma unroll
  for (int n = 0; n < D / 8; ++n) {
    const int c = n * 8 + tig * 2;
    *reinterpret_cast<float2*>(s_o + (warp * kRows + g) * OS + c) = make_float2(o[n][0], o[n][1]);
    *reinterpret_cast<float2*>(s_o + (warp * kRows + g + 8) * OS + c) = make_float2(o[n][2], o[n][3]);
  }
  if (tig == 0) {
    s_m[warp * kRows + g] = m_lo;
    s_m[warp * kRows + g + 8] = m_hi;
    s_l[warp * kRows + g] = l_lo;
    s_l[warp * kRows + g + 8] = l_hi;
  }
  __syncthreads();

  // Merge the warps; write the normalized output or this split's partial result. Dim d sits at
  // n-tile n, column j: for BF16 d = n * 8 + j, for FP8 d = j * D/8 + n (the V fragments' order).
  merge_warps_and_store<D, kWarps, kThreads, kRows>(
      p, t, h0, nh, split, num_splits, s_m, s_l, [](int d) { return Ly::kFp8 ? (d % (D / 8)) * 8 + d / (D / 8) : d; },
      [&](int w, int r, int at) { return s_o[(w * kRows + r) * OS + at]; }, [](float x) { return fast_exp2(x); });
}

template <int D, typename KV>
cudaError_t launch_typed(const DecodeParams& p, int64_t num_tokens, cudaStream_t s) {
  cudaError_t e = allow_dynamic_smem<flash_decode_kernel<D, KV>>(Layout<D, KV>::kSmem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(num_tokens), static_cast<unsigned>(p.num_kv_heads * p.head_chunks),
                  static_cast<unsigned>(p.grid_splits));
  return launch_pdl(flash_decode_kernel<D, KV>, grid, dim3(kThreads), Layout<D, KV>::kSmem, s, p);
}

template <int D>
cudaError_t launch_dim(const DecodeParams& p, DType kv, int64_t num_tokens, cudaStream_t s) {
  cudaError_t e = kv == DType::kF8E4M3 ? launch_typed<D, __nv_fp8_e4m3>(p, num_tokens, s)
                                       : launch_typed<D, __nv_bfloat16>(p, num_tokens, s);
  if (e != cudaSuccess || p.grid_splits == 1) return e;
  return launch_attention_merge(p.partial, num_tokens * p.num_heads, p.grid_splits, p.plan_dev, D, p.out, s);
}

}  // namespace

int attention_decode_heads_per_cta() { return kRows; }

int attention_decode_ctas_per_sm() { return kCtasPerSm; }

int attention_decode_keys_per_round(DType kv) {
  return kWarps * (kv == DType::kF8E4M3 ? Layout<128, __nv_fp8_e4m3>::kKeys : Layout<128, __nv_bfloat16>::kKeys);
}

cudaError_t launch_attention_decode(const PagedAttentionArgs& a, const KvCacheLayer& c, const AttentionPlan& plan,
                                    unsigned* err, cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (!paged_shape_ok(a, c, 0x7fffffffLL) || !grid_plan_ok(plan)) return cudaErrorInvalidValue;
  if (c.dtype != DType::kBF16 && c.dtype != DType::kF8E4M3) return cudaErrorInvalidValue;
  const bool fp8 = c.dtype == DType::kF8E4M3;
  DecodeParams p{};
  static_cast<PagedKernelParams&>(p) = paged_kernel_params(a, c, err);
  p.partial = plan.partial;
  p.head_chunks = (p.group + kRows - 1) / kRows;
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  p.grid_splits = plan.grid_splits;
  p.plan_dev = plan.device;
  p.q_scale = a.scale * kLog2e;
  p.score_scale = fp8 ? c.k_scale : 1.0f;
  p.v_scale = fp8 ? c.v_scale : 1.0f;
  if (c.head_dim == 64) return launch_dim<64>(p, c.dtype, a.num_tokens, s);
  if (c.head_dim == 128) return launch_dim<128>(p, c.dtype, a.num_tokens, s);
  return cudaErrorInvalidValue;
}

}  // namespace lancet::cuda
