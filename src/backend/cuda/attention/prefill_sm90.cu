// Prompt-chunk attention for Hopper (sm_90a), FlashAttention-3's structure: a CTA of three
// warpgroups takes 128 query rows, each row one (token, query head of the group) pair so one
// K/V tile serves every head of a KV head's group. Warpgroup 0 is the producer: it gathers the
// K and V tiles (128 keys) page by page from the paged cache into 128-byte-swizzled shared
// memory (cp.async, 16 bytes per copy, zero-filled past the key range) through a ring of K
// tiles and a ring of V tiles, handshaked by mbarriers. Warpgroups 1 and 2 are consumers of 64
// rows each: S = Q K^T on wgmma with both operands in shared memory, the online softmax in
// registers, and O += P V on wgmma with P straight from the score registers; the two take
// turns on the tensor cores (named barriers), so one's softmax runs while the other's products
// do. Key tiles run from the last (the causal diagonal, the only masked ones) to the first.
// The CTAs are persistent, one per SM: each walks work items (token tile, KV head, split) in
// the snake order of work_order.h, items numbered from the batch's last token tile (the most
// keys) to its first. The rings count tiles across a CTA's items, so the producer fetches the
// next item's first tiles while the consumers finish and store the last one.
//
// BF16 caches: Q and P rounded to BF16. FP8 E4M3 caches: the producer copies the E4M3 tiles
// into a staging area and widens them to FP16 (exact) in the rings; Q and P are rounded to
// FP16, the K scale goes into the score scale and the V scale onto the output. With an E4M3
// query (Fp8AttentionMath::kE4m3Query) the consumers round each query row to E4M3 under its
// own scale and Q K^T runs on E4M3 wgmma from the K tiles as the cache holds them (no
// widening of K; the row's scale joins the score scale); P V is as above, or (E4M3 query and
// P, Fp8AttentionMath::kE4m3QueryAndP) on E4M3 wgmma with P times 256 rounded to E4M3 and V
// transposed to key-major E4M3 rows by the producer. With a two-term E4M3 query
// (Fp8AttentionMath::kE4m3x2Query) each row is also held as a second E4M3 term, the rounding
// of what the first left, and Q K^T runs both terms into one accumulator; P V as for the E4M3
// query, or in E4M3 (Fp8AttentionMath::kE4m3x2QueryAndP). FP32 accumulation; scores scaled in f32.
// Split-KV writes the partial results that launch_attention_merge combines, like the other
// kernels.
#include <type_traits>

#include "backend/cuda/attention/prefill_sm90_consumer.cuh"
#include "backend/cuda/attention/prefill_sm90_layout.cuh"
#include "backend/cuda/attention/prefill_sm90_producer.cuh"
#include "backend/cuda/attention/work_order.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/dynamic_smem.h"

namespace lancet::cuda {
namespace {

using namespace prefill_sm90;

template <int D, Sm90Kv KV>
__global__ void __launch_bounds__(kThreads, 1) attention_prefill_sm90_kernel(const __grid_constant__ Sm90Params p) {
#if defined(__CUDA_ARCH_FEAT_SM90_ALL)
  using Ly = Sm90Layout<D, KV>;
  extern __shared__ unsigned char smem_raw[];
  const uint32_t raw = sm90::smem_u32(smem_raw);
  const uint32_t base = (raw + 1023u) & ~1023u;  // swizzle atoms are 1024-byte periodic
  unsigned char* smem = smem_raw + (base - raw);
  Ring kr = k_ring<D, KV>(base), vr = v_ring<D, KV>(base);
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
  // Broadcast from lane 0, so the compiler knows the warpgroup index is uniform across the warp
  // (the consumers' tile and descriptor arithmetic then stays in uniform registers).
  const int wg = __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x / 128), 0);
  // Both roles walk the same items (each its own loop: the roles' register budgets differ).
  auto for_each_item = [&](auto&& run) {
    for (int64_t k = 0;; ++k) {
      const int64_t item = persistent_item(blockIdx.x, k, gridDim.x, p.items);
      if (item < 0) break;
      const CtaWork w = locate_work(p, item);
      if (!w.ok) continue;
      const int n_tiles = w.ke > w.kb ? (w.ke - w.kb + kKeys - 1) / kKeys : 0;
      run(w, n_tiles);
      kr.offset += n_tiles;
      vr.offset += n_tiles;
    }
  };
  if (wg == 0) {
    sm90::regs_dealloc<Ly::kProducerRegs>();
    for_each_item([&](const CtaWork& w, int n_tiles) {
      produce<D, KV>(p, w, n_tiles, kr, vr, smem, base, base + Ly::kStagingOffset);
    });
  } else {
    sm90::regs_alloc<Ly::kConsumerRegs>();
    for_each_item([&](const CtaWork& w, int n_tiles) { consume<D, KV>(p, w, n_tiles, wg - 1, smem, base, kr, vr); });
  }
#else
  __trap();  // launched only where the sm_90a image exists (attention_prefill_sm90_available)
#endif
}

template <int D, Sm90Kv KV>
cudaError_t launch_typed(const Sm90Params& p, int num_sms, cudaStream_t s) {
  constexpr int kSmem = Sm90Layout<D, KV>::kSmem;
  cudaError_t e = allow_dynamic_smem<attention_prefill_sm90_kernel<D, KV>>(kSmem);
  if (e != cudaSuccess) return e;
  const dim3 grid(static_cast<unsigned>(persistent_ctas(p.items, num_sms)));
  attention_prefill_sm90_kernel<D, KV><<<grid, kThreads, kSmem, s>>>(p);
  return cudaGetLastError();
}

}  // namespace

bool attention_prefill_sm90_available() {
  static const bool ok = [] {
    cudaFuncAttributes attr{};
    if (cudaFuncGetAttributes(&attr, attention_prefill_sm90_kernel<128, Sm90Kv::kBf16>) != cudaSuccess) {
      cudaGetLastError();
      return false;
    }
    return attr.binaryVersion == 90;
  }();
  return ok;
}

cudaError_t launch_attention_prefill_sm90(const PagedAttentionArgs& a, const KvCacheLayer& c,
                                          const AttentionPlan& plan, Fp8AttentionMath fp8_math, unsigned* err,
                                          cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (!paged_shape_ok(a, c, 0x3fffffffLL)) return cudaErrorInvalidValue;
  if ((c.dtype != DType::kBF16 && c.dtype != DType::kF8E4M3) || (c.head_dim != 64 && c.head_dim != 128))
    return cudaErrorInvalidValue;
  const bool fp8 = c.dtype == DType::kF8E4M3;
  const int64_t group = a.num_heads / c.num_kv_heads;
  if (group > kRows) return cudaErrorInvalidValue;
  if (plan.num_splits < 1 || (plan.num_splits > 1 && (!plan.partial || plan.split_len <= 0)))
    return cudaErrorInvalidValue;
  Sm90Params p{};
  static_cast<PagedKernelParams&>(p) = paged_kernel_params(a, c, err);
  p.partial = plan.partial;
  p.first_row = plan.first_row;
  p.tokens_per_cta = static_cast<int>(kRows / group);
  // At most one partial tile per sequence beyond num_tokens / tokens_per_cta.
  p.tiles = static_cast<int>((a.num_tokens + p.tokens_per_cta - 1) / p.tokens_per_cta + a.num_seqs);
  p.num_splits = plan.num_splits;
  p.split_len = plan.split_len;
  p.items = static_cast<int64_t>(p.tiles) * p.num_kv_heads * p.num_splits;
  p.score_scale = a.scale * kLog2e * (fp8 ? c.k_scale : 1.0f);
  p.v_scale = fp8 ? c.v_scale : 1.0f;
  const int num_sms = current_device_sms();  // persistent CTAs, one per SM
  const Sm90Kv kv = !fp8                                                ? Sm90Kv::kBf16
                    : fp8_math == Fp8AttentionMath::kE4m3QueryAndP   ? Sm90Kv::kFp8QueryP
                    : fp8_math == Fp8AttentionMath::kE4m3Query       ? Sm90Kv::kFp8Query
                    : fp8_math == Fp8AttentionMath::kE4m3x2Query     ? Sm90Kv::kFp8Query2
                    : fp8_math == Fp8AttentionMath::kE4m3x2QueryAndP ? Sm90Kv::kFp8Query2P
                                                                     : Sm90Kv::kFp8;
  auto launch = [&](auto dim) {
    constexpr int D = decltype(dim)::value;
    switch (kv) {
      case Sm90Kv::kFp8QueryP: return launch_typed<D, Sm90Kv::kFp8QueryP>(p, num_sms, s);
      case Sm90Kv::kFp8Query: return launch_typed<D, Sm90Kv::kFp8Query>(p, num_sms, s);
      case Sm90Kv::kFp8Query2: return launch_typed<D, Sm90Kv::kFp8Query2>(p, num_sms, s);
      case Sm90Kv::kFp8Query2P: return launch_typed<D, Sm90Kv::kFp8Query2P>(p, num_sms, s);
      case Sm90Kv::kFp8: return launch_typed<D, Sm90Kv::kFp8>(p, num_sms, s);
      case Sm90Kv::kBf16: break;
    }
    return launch_typed<D, Sm90Kv::kBf16>(p, num_sms, s);
  };
  const cudaError_t e = c.head_dim == 128 ? launch(std::integral_constant<int, 128>{})
                                          : launch(std::integral_constant<int, 64>{});
  if (e != cudaSuccess || p.num_splits == 1) return e;
  return launch_attention_merge(p.partial, a.num_tokens * a.num_heads, p.num_splits, nullptr, c.head_dim,
                                p.out + plan.first_row * a.num_heads * c.head_dim, s);
}

}  // namespace lancet::cuda

