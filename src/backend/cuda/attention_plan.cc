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
constexpr int64_t kMaxPrefillSplits = 16;
constexpr int64_t kMaxPrefillSplitRows = 16384;
// A CTA's fixed cost (the query tile's load, filling the pipeline, the epilogue) in keys' worth.
constexpr int64_t kPrefillCtaOverheadKeys = 256;

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

// A prompt chunk late in a long context: its work items (one per 128 packed query rows and KV
// head, taken in rounds by one persistent CTA per multiprocessor) each read every key, so the
// step takes as many such reads as it has rounds of items. 136 items on 132 multiprocessors
// are two rounds, twice the time of 128 (on an H200, 8B shape: a chunk of ~520 tokens after
// 100K keys took 61 or 122 ms by that alone). The split count minimizes rounds x keys per split
// (plus a per-item overhead), counting the items of the step's longest chunk: at most
// num_tokens - (num_seqs - 1) rows when the other sequences compute one token each (decodes
// riding along, whose items are short). Splits are ranges of at least kMinPrefillSplitKeys, at
// most kMaxPrefillSplits, and their partial results (num_tokens x splits rows) at most
// kMaxPrefillSplitRows.
AttentionStepPlan plan_prefill_splits(const AttentionShape& s, const KvCacheLayer& c, const AttentionDevice& d) {
  const int64_t group = s.num_heads / std::max<int64_t>(c.num_kv_heads, 1);
  const int64_t ctx = s.max_context_len;
  if (d.num_sms <= 0 || ctx < 2 * kMinPrefillSplitKeys) return split_plan(1, ctx, kPrefillSplitAlign);
  const int64_t rows = std::max<int64_t>(1, s.num_tokens - std::max<int64_t>(s.num_seqs - 1, 0));
  const int64_t heavy = std::max<int64_t>(attention_prefill_ctas(rows, group, c.num_kv_heads), 1);
  const int64_t limit = std::min({kMaxPrefillSplits, ctx / kMinPrefillSplitKeys,
                                  std::max<int64_t>(kMaxPrefillSplitRows / std::max<int64_t>(s.num_tokens, 1), 1)});
  int64_t best = 1;
  double best_cost = 0;
  for (int64_t t = 1; t <= limit; ++t) {
    const AttentionStepPlan p = split_plan(t, ctx, kPrefillSplitAlign);
    const int64_t splits = p.num_splits, keys = splits > 1 ? p.split_len : ctx;
    const int64_t rounds = (heavy * splits + d.num_sms - 1) / d.num_sms;
    const double cost = static_cast<double>(rounds) * static_cast<double>(keys + kPrefillCtaOverheadKeys);
    if (t == 1 || cost < best_cost) best = t, best_cost = cost;
  }
  return split_plan(best, ctx, kPrefillSplitAlign);
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

namespace {

// The plan of a step that runs in one kernel (its route's).
AttentionStepPlan plan_single_route(const AttentionShape& s, const KvCacheLayer& c, const AttentionDevice& d) {
  const int64_t group = s.num_heads / std::max<int64_t>(c.num_kv_heads, 1);
  const int64_t ctx = s.max_context_len;
  switch (attention_route(s, c, d)) {
    case AttentionRoute::kPrefillF32Cache:
      return AttentionStepPlan{1, 0, 1};
    case AttentionRoute::kPrefillPacked:
      return plan_prefill_splits(s, c, d);
    case AttentionRoute::kDecode: {
      // Splits of whole rounds (every warp of the CTA one pipeline stage), as many as the
      // context has rounds, up to as many CTAs as the multiprocessors hold at once (b=1 at 128K
      // keys on an H200, 8 KV heads: BF16 3.93 TB/s with 49 splits, three CTAs per
      // multiprocessor, 3.72-3.74 with 33, two; FP8 3.68-3.74 with 49, 3.49-3.50 with 40, 2.97
      // with 33): at a short context each CTA then runs one round, the latency of a decode step.
      const int64_t round = attention_decode_keys_per_round(c.dtype);
      const int64_t per_cta = attention_decode_heads_per_cta();
      const int64_t per_sm = attention_decode_ctas_per_sm();
      const int64_t base_ctas = s.num_tokens * c.num_kv_heads * ((group + per_cta - 1) / per_cta);
      // Rounded down: a split count rounded up can make a few CTAs more than the
      // multiprocessors hold, and they run as a second wave after all the others.
      int64_t target = 1;
      if (base_ctas < d.num_sms && ctx > round)
        target = std::min(
            {std::max<int64_t>(per_sm * d.num_sms / base_ctas, 1), (ctx + round - 1) / round, kMaxSplits});
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

// The two parts of a mixed step as single-route shapes.
// The decode part splits over its own longest context: streams beside a long prompt's chunk
// would otherwise split their short contexts into ranges of the chunk's length, most of them
// empty.
AttentionShape decode_part(const AttentionShape& s) {
  const int64_t ctx = s.decode_max_context_len > 0 ? std::min(s.decode_max_context_len, s.max_context_len)
                                                   : s.max_context_len;
  return AttentionShape{s.decode_tokens, s.decode_seqs, s.num_heads, ctx, 0, 0};
}

AttentionShape prompt_part(const AttentionShape& s) {
  return AttentionShape{s.num_tokens - s.decode_tokens, s.num_seqs - s.decode_seqs, s.num_heads, s.max_context_len,
                        0, 0};
}

}  // namespace

AttentionStepPlan plan_attention_splits(const AttentionShape& s, const KvCacheLayer& c, const AttentionDevice& d) {
  if (s.decode_seqs > 0 && s.decode_seqs < s.num_seqs && s.decode_tokens > 0 && s.decode_tokens < s.num_tokens) {
    const AttentionShape dec = decode_part(s), pro = prompt_part(s);
    if (attention_route(dec, c, d) == AttentionRoute::kDecode &&
        attention_route(pro, c, d) == AttentionRoute::kPrefillPacked) {
      AttentionStepPlan p = plan_single_route(pro, c, d);
      const AttentionStepPlan dp = plan_single_route(dec, c, d);
      p.max_splits = p.num_splits;  // eager only: no graph replays a mixed step
      p.decode_seqs = static_cast<int32_t>(s.decode_seqs);
      p.decode_tokens = static_cast<int32_t>(s.decode_tokens);
      p.decode_splits = dp.num_splits;
      p.decode_split_len = dp.split_len;
      return p;
    }
  }
  return plan_single_route(s, c, d);
}

}  // namespace lancet::cuda
