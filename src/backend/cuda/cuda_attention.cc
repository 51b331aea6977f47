// KV cache writes and paged attention on the CUDA backend: argument checks that need no
// device data, the choice between the tensor-core kernels (prefill chunks, decode rows) and the
// CUDA-core kernel, and the split-KV plans (flash decoding; split prefill of short chunks late
// in long contexts) chosen from the grid size.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

Status check_cache(const KvCacheLayer& c) {
  if (c.dtype != DType::kF32 && c.dtype != DType::kBF16 && c.dtype != DType::kF8E4M3)
    return Unimplemented(std::string("cuda kv cache: dtype ") + dtype_name(c.dtype) + " (f32, bf16 or fp8 e4m3)");
  if (c.dtype == DType::kF8E4M3 &&
      !(std::isfinite(c.k_scale) && std::isfinite(c.v_scale) && c.k_scale > 0.0f && c.v_scale > 0.0f))
    return InvalidArgument("kv cache: fp8 K/V scales must be finite and positive");
  if (c.num_blocks <= 0 || c.block_size <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || !c.k || !c.v)
    return InvalidArgument("kv cache: empty layer");
  return OkStatus();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// Splits of at least this many keys; fewer would cost more in the reduction than they save.
constexpr int64_t kMinSplitKeys = 64;
constexpr int64_t kMaxSplits = 64;
// Prefill chunks split only long contexts, in ranges of at least this many keys, aligned to
// the prefill kernel's tiles.
constexpr int64_t kMinPrefillSplitKeys = 2048;
constexpr int64_t kPrefillSplitAlign = 64;

}  // namespace

Status CudaBackend::kv_write(const KvWriteArgs& a, const KvCacheLayer& c) {
  RETURN_IF_ERROR(check_cache(c));
  if (a.num_tokens < 0) return InvalidArgument("kv_write: negative token count");
  if (a.num_tokens == 0) return OkStatus();
  if (!a.k || !a.v || !a.slot_mapping) return InvalidArgument("kv_write: null input");
  return launch_status(launch_kv_write(a, c, err_word_.as<unsigned>(), ctx_->stream), "kv_write");
}

Status CudaBackend::paged_attention(const PagedAttentionArgs& a, const KvCacheLayer& c) {
  RETURN_IF_ERROR(check_cache(c));
  if (c.head_dim != 64 && c.head_dim != 128)
    return Unimplemented("paged_attention: head_dim " + std::to_string(c.head_dim) + " (cuda supports 64 and 128)");
  if (a.num_heads <= 0 || a.num_heads % c.num_kv_heads != 0)
    return InvalidArgument("paged_attention: " + std::to_string(a.num_heads) + " query heads for " +
                           std::to_string(c.num_kv_heads) + " kv heads");
  if (a.num_tokens < 0) return InvalidArgument("paged_attention: negative token count");
  if (a.num_tokens == 0) return OkStatus();
  if (a.num_seqs <= 0 || a.max_blocks_per_seq <= 0)
    return InvalidArgument("paged_attention: tokens without sequences or block tables");
  if (a.max_blocks_per_seq * c.block_size > INT32_MAX || c.num_blocks > INT32_MAX)
    return OutOfRange("paged_attention: context bound past 2^31 tokens");
  if (!a.q || !a.out || !a.query_start || !a.context_lens || !a.block_tables)
    return InvalidArgument("paged_attention: null input");
  if (!aligned16(a.q) || !aligned16(a.out) || !aligned16(c.k) || !aligned16(c.v))
    return InvalidArgument("paged_attention: q, out and the cache must be 16-byte aligned");

  // Fast precision: prompt chunks and every other row (decode, verification, short chunks) of a
  // bf16 or fp8 cache go to the tensor cores; exact precision and f32 caches to the CUDA-core
  // kernel.
  const bool fast = precision_ == ActivationPrecision::kFast;
  const int64_t group = a.num_heads / c.num_kv_heads;
  const int64_t ctx_bound = a.max_blocks_per_seq * c.block_size;
  if (fast && a.num_tokens >= 64 && a.num_tokens >= 4 * a.num_seqs) {
    const int64_t ctas = attention_prefill_ctas(a.num_tokens, group, c.num_kv_heads);
    if (c.dtype == DType::kF32 || ctas == 0)
      return launch_status(launch_attention_prefill_f32_cache(a, c, err_word_.as<unsigned>(), ctx_->stream), "paged_attention");
    // A short chunk late in a long context (decode rows of other sequences may ride along):
    // split the keys so every multiprocessor works.
    AttentionPlan plan;
    if (ctas < num_sms_ && ctx_bound >= 2 * kMinPrefillSplitKeys) {
      int64_t splits = std::min({(2 * num_sms_ + ctas - 1) / ctas, ctx_bound / kMinPrefillSplitKeys, kMaxSplits});
      int64_t len = (ctx_bound + splits - 1) / splits;
      len = (len + kPrefillSplitAlign - 1) / kPrefillSplitAlign * kPrefillSplitAlign;
      splits = (ctx_bound + len - 1) / len;
      if (splits > 1) {
        plan.num_splits = static_cast<int>(splits);
        plan.split_len = static_cast<int>(len);
        const int64_t floats = attention_workspace_floats(a.num_tokens, a.num_heads, c.head_dim, plan.num_splits);
        RETURN_IF_ERROR(ensure_scratch(&attn_partial_, static_cast<size_t>(floats) * sizeof(float)));
        plan.partial = attn_partial_.as<float>();
      }
    }
    if (current_device_sm() == 90 && attention_prefill_sm90_available())
      return launch_status(launch_attention_prefill_sm90(a, c, plan, err_word_.as<unsigned>(), ctx_->stream),
                           "paged_attention");
    return launch_status(launch_attention_prefill_sm80(a, c, plan, err_word_.as<unsigned>(), ctx_->stream),
                         "paged_attention");
  }
  const bool tensor_decode = fast && c.dtype != DType::kF32;

  // Flash decoding when the grid alone would leave most multiprocessors idle.
  AttentionPlan plan;
  const int64_t per_cta = tensor_decode ? attention_decode_heads_per_cta() : attention_exact_heads_per_cta(c.head_dim);
  const int64_t base_ctas = a.num_tokens * c.num_kv_heads * ((group + per_cta - 1) / per_cta);
  if (base_ctas < num_sms_ && ctx_bound >= 2 * kMinSplitKeys) {
    const int64_t want = (2 * num_sms_ + base_ctas - 1) / base_ctas;
    int64_t splits = std::min({want, ctx_bound / kMinSplitKeys, kMaxSplits});
    if (splits > 1) {
      int64_t len = (ctx_bound + splits - 1) / splits;
      len = (len + 15) / 16 * 16;
      splits = (ctx_bound + len - 1) / len;
      plan.num_splits = static_cast<int>(splits);
      plan.split_len = static_cast<int>(len);
    }
  }
  if (plan.num_splits > 1) {
    const int64_t floats = attention_workspace_floats(a.num_tokens, a.num_heads, c.head_dim, plan.num_splits);
    RETURN_IF_ERROR(ensure_scratch(&attn_partial_, static_cast<size_t>(floats) * sizeof(float)));
    plan.partial = attn_partial_.as<float>();
  }
  if (tensor_decode)
    return launch_status(launch_attention_decode(a, c, plan, err_word_.as<unsigned>(), ctx_->stream), "paged_attention");
  return launch_status(launch_attention_exact(a, c, plan, err_word_.as<unsigned>(), ctx_->stream),
                       "paged_attention");
}

}  // namespace lancet::cuda
