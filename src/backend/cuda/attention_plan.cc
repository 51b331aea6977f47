// Split-KV planning for paged attention on the CUDA backend (attention_plan.h): flash decoding
// when the (token, KV head, head chunk) grid alone would leave multiprocessors idle, and split
// prompt chunks late in long contexts. The split target (max_splits) only grows as rows get
// fewer or contexts longer, so a graph bucket's bound covers every step it replays.
#include "backend/cuda/attention_plan.h"

#include <algorithm>

#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

// The exact kernel's splits: at least this many keys; fewer would cost more in the reduction
// than they save (32 measured slower on an H200: 13.8 us against 9.5 for batch 1 over 1024 keys).
constexpr int64_t kMinSplitKeys = 64;
constexpr int64_t kMaxSplits = 64;
constexpr int64_t kDecodeSplitAlign = 16;
// Prefill chunks split only long contexts, in ranges of at least this many keys, aligned to
// the prefill kernel's tiles.
constexpr int64_t kMinPrefillSplitKeys = 2048;
constexpr int64_t kPrefillSplitAlign = 64;

// target splits of ctx keys into ranges of a multiple of align: the plan.
AttentionStepPlan split_plan(int64_t target, int64_t ctx, int64_t align) {
  AttentionStepPlan p{1, 0, static_cast<int32_t>(std::max<int64_t>(target, 1))};
  if (target <= 1 || ctx <= 0) return p;
  int64_t len = (ctx + target - 1) / target;
  len = (len + align - 1) / align * align;
  const int64_t splits = (ctx + len - 1) / len;
  if (splits > 1) {
    p.num_splits = static_cast<int32_t>(splits);
    p.split_len = static_cast<int32_t>(len);
  }
  return p;
}

}  // namespace

AttentionRoute attention_route(const AttentionShape& s, const KvCacheLayer& c, const AttentionDevice& d) {
  const int64_t group = s.num_heads / std::max<int64_t>(c.num_kv_heads, 1);
  if (!d.exact && attention_prompt_step(s.num_tokens, s.num_seqs)) {
    if (c.dtype == DType::kF32 || attention_prefill_ctas(s.num_tokens, group, c.num_kv_heads) == 0)
      return AttentionRoute::kPrefillF32Cache;
    return AttentionRoute::kPrefillPacked;
  }
  return !d.exact && c.dtype != DType::kF32 ? AttentionRoute::kDecode : AttentionRoute::kExact;
}

AttentionStepPlan plan_attention_splits(const AttentionShape& s, const KvCacheLayer& c, const AttentionDevice& d) {
  const int64_t group = s.num_heads / std::max<int64_t>(c.num_kv_heads, 1);
  const int64_t ctx = s.max_context_len;
  switch (attention_route(s, c, d)) {
    case AttentionRoute::kPrefillF32Cache:
      return AttentionStepPlan{1, 0, 1};
    case AttentionRoute::kPrefillPacked: {
      // A short chunk late in a long context (decode rows of other sequences may ride along):
      // split the keys so every multiprocessor works.
      const int64_t ctas = attention_prefill_ctas(s.num_tokens, group, c.num_kv_heads);
      int64_t target = 1;
      if (ctas < d.num_sms && ctx >= 2 * kMinPrefillSplitKeys)
        target = std::min({(2 * d.num_sms + ctas - 1) / ctas, ctx / kMinPrefillSplitKeys, kMaxSplits});
      return split_plan(target, ctx, kPrefillSplitAlign);
    }
    case AttentionRoute::kDecode: {
      // Splits of whole rounds (every warp of the CTA one pipeline stage), as many as the
      // context has rounds, up to two CTAs per multiprocessor: at a short context each CTA
      // then runs one round, the latency of a decode step.
      const int64_t round = attention_decode_keys_per_round(c.dtype);
      const int64_t per_cta = attention_decode_heads_per_cta();
      const int64_t base_ctas = s.num_tokens * c.num_kv_heads * ((group + per_cta - 1) / per_cta);
      int64_t target = 1;
      if (base_ctas < d.num_sms && ctx > round)
        target = std::min({(2 * d.num_sms + base_ctas - 1) / base_ctas, (ctx + round - 1) / round, kMaxSplits});
      return split_plan(target, ctx, round);
    }
    case AttentionRoute::kExact: {
      const int64_t per_cta = attention_exact_heads_per_cta(c.head_dim);
      const int64_t base_ctas = s.num_tokens * c.num_kv_heads * ((group + per_cta - 1) / per_cta);
      int64_t target = 1;
      if (base_ctas < d.num_sms && ctx >= 2 * kMinSplitKeys)
        target = std::min({(2 * d.num_sms + base_ctas - 1) / base_ctas, ctx / kMinSplitKeys, kMaxSplits});
      return split_plan(target, ctx, kDecodeSplitAlign);
    }
  }
  return AttentionStepPlan{1, 0, 1};
}

}  // namespace lancet::cuda
