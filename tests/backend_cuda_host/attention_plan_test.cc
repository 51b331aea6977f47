// The CUDA backend's attention planner (backend/cuda/attention_plan.h), host code only (no GPU):
// every plan covers its context exactly, and a graph bucket's bound holds every plan a step of
// that bucket can make, the guarantee replayed decode graphs rely on (their launch holds the
// bound and reads the step's own plan at run time).
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <utility>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/kernels.h"
#include "runner/decode_graphs.h"

namespace lancet::cuda {
namespace {

KvCacheLayer cache(DType dtype, int64_t kv_heads, int64_t head_dim) {
  KvCacheLayer c;
  c.dtype = dtype;
  c.num_blocks = 1 << 20;
  c.block_size = 16;
  c.num_kv_heads = kv_heads;
  c.head_dim = head_dim;
  return c;
}

void expect_covers(const AttentionStepPlan& p, int64_t ctx, const std::string& what) {
  ASSERT_GE(p.num_splits, 1) << what;
  ASSERT_LE(p.num_splits, p.max_splits) << what;
  if (p.num_splits == 1) return;
  EXPECT_EQ(p.split_len % 16, 0) << what;
  EXPECT_GE(static_cast<int64_t>(p.num_splits) * p.split_len, ctx) << what;   // every key in a range
  EXPECT_LT(static_cast<int64_t>(p.num_splits - 1) * p.split_len, ctx) << what;  // no empty range
}

TEST(AttentionPlan, DecodeBucketBoundHoldsEveryStepOfTheBucket) {
  const AttentionDevice dev{132, false};
  for (DType dt : {DType::kBF16, DType::kF8E4M3, DType::kF32})
    for (auto [heads, kv, d] : {std::tuple{32, 8, 128}, std::tuple{8, 1, 128}, std::tuple{9, 3, 64}}) {
      const KvCacheLayer c = cache(dt, kv, d);
      for (int64_t bucket : {1, 2, 4, 8, 16, 24, 64, 96, 144, 256, 288, 576, 1024}) {
        const int64_t floor = DecodeGraphs::batch_bucket_floor(bucket);
        ASSERT_EQ(DecodeGraphs::batch_bucket(floor), bucket);
        if (floor > 1) ASSERT_LT(DecodeGraphs::batch_bucket(floor - 1), bucket);
        for (int64_t width : {16, 32, 256, 8192}) {
          const int64_t bound_ctx = width * c.block_size;
          const AttentionStepPlan bound = plan_attention_splits({floor, floor, heads, bound_ctx}, c, dev);
          for (int64_t n = floor; n <= bucket; n += std::max<int64_t>(1, (bucket - floor) / 3))
            for (int64_t ctx : {int64_t{1}, int64_t{63}, int64_t{130}, bound_ctx / 3, bound_ctx - 15, bound_ctx}) {
              const std::string what = std::string(dtype_name(dt)) + " heads " + std::to_string(heads) + "/" +
                                       std::to_string(kv) + " bucket " + std::to_string(bucket) + " n " +
                                       std::to_string(n) + " ctx " + std::to_string(ctx);
              const AttentionStepPlan p = plan_attention_splits({n, n, heads, ctx}, c, dev);
              expect_covers(p, ctx, what);
              EXPECT_LE(p.num_splits, bound.max_splits) << what;
              EXPECT_LE(p.max_splits, bound.max_splits) << what;
            }
        }
      }
    }
}

TEST(AttentionPlan, RoutesFollowTheStepShape) {
  const KvCacheLayer bf16 = cache(DType::kBF16, 8, 128), f32 = cache(DType::kF32, 8, 128);
  const AttentionDevice fast{132, false}, exact{132, true};
  EXPECT_EQ(attention_route({1, 1, 32, 100}, bf16, fast), AttentionRoute::kDecode);
  EXPECT_EQ(attention_route({1, 1, 32, 100}, bf16, exact), AttentionRoute::kExact);
  EXPECT_EQ(attention_route({1, 1, 32, 100}, f32, fast), AttentionRoute::kExact);
  EXPECT_EQ(attention_route({4096, 1, 32, 4096}, bf16, fast), AttentionRoute::kPrefillPacked);
  EXPECT_EQ(attention_route({4096, 1, 32, 4096}, f32, fast), AttentionRoute::kPrefillF32Cache);
  EXPECT_EQ(attention_route({4096, 1, 32, 4096}, bf16, exact), AttentionRoute::kExact);
  // A prompt chunk late in a long context splits its keys; a whole prompt does not.
  const AttentionStepPlan late = plan_attention_splits({256, 1, 32, 131072}, bf16, fast);
  expect_covers(late, 131072, "256 queries at 128K");
  EXPECT_GT(late.num_splits, 1);
  EXPECT_EQ(late.split_len % 64, 0);
  EXPECT_EQ(plan_attention_splits({32768, 1, 32, 32768}, bf16, fast).num_splits, 1);
  // Batch 1 decode over 128K keys: flash decoding over every multiprocessor.
  const AttentionStepPlan one = plan_attention_splits({1, 1, 32, 131072}, bf16, fast);
  expect_covers(one, 131072, "batch 1 at 128K");
  EXPECT_GE(one.num_splits * 8, 132);
  // A batch that fills the GPU by itself does not split.
  EXPECT_EQ(plan_attention_splits({256, 256, 32, 2048}, bf16, fast).num_splits, 1);
}

// Waves of prefill CTAs times the keys each reads: the time of a chunk late in a long context.
int64_t prefill_wave_keys(const AttentionStepPlan& p, int64_t heavy_ctas, int64_t ctx, int64_t sms) {
  const int64_t keys = p.num_splits > 1 ? p.split_len : ctx;
  return (heavy_ctas * p.num_splits + sms - 1) / sms * keys;
}

TEST(AttentionPlan, PrefillSplitsAvoidAPartialSecondWave) {
  const KvCacheLayer c = cache(DType::kBF16, 8, 128);
  const AttentionDevice dev{132, false};
  const int64_t ctx = 107000;
  // A 520-token chunk with 16 decode rows riding along: 17 row tiles x 8 KV heads = 136 CTAs of
  // 100K+ keys on 132 multiprocessors. Unsplit that is two waves; the plan gets close to one.
  const int64_t heavy = attention_prefill_ctas(520, 4, 8);
  ASSERT_EQ(heavy, 136);
  const AttentionStepPlan p = plan_attention_splits({536, 17, 32, ctx}, c, dev);
  expect_covers(p, ctx, "520 + 16 rows at 107K");
  EXPECT_GT(p.num_splits, 1);
  EXPECT_EQ(p.split_len % 64, 0);
  EXPECT_LE(prefill_wave_keys(p, heavy, ctx, 132), 2 * ctx * 6 / 10);
  EXPECT_LE(static_cast<int64_t>(p.num_splits) * 536, 16384);  // partial rows bounded
  // 496 rows: 128 CTAs, one wave already; splitting would not shorten it.
  ASSERT_EQ(attention_prefill_ctas(496, 4, 8), 128);
  EXPECT_EQ(plan_attention_splits({512, 17, 32, ctx}, c, dev).num_splits, 1);
  // A chunk of 8192 rows is 16 waves by itself: no split.
  EXPECT_EQ(plan_attention_splits({8192, 1, 32, 100000}, c, dev).num_splits, 1);
  // Short contexts never split (ranges of at least 2048 keys).
  EXPECT_EQ(plan_attention_splits({536, 17, 32, 4000}, c, dev).num_splits, 1);
  // Every plan covers its context, and no plan is slower than the unsplit launch.
  for (int64_t tokens : {64, 100, 300, 536, 1100, 2048, 4096})
    for (int64_t seqs : {int64_t{1}, int64_t{17}})
      for (int64_t cx : {int64_t{4096}, int64_t{9000}, int64_t{65536}, int64_t{131072}}) {
        if (!attention_prompt_step(tokens, seqs)) continue;  // decode route: planned elsewhere
        const AttentionStepPlan q = plan_attention_splits({tokens, seqs, 32, cx}, c, dev);
        const std::string what = std::to_string(tokens) + " rows, " + std::to_string(seqs) + " seqs, ctx " +
                                 std::to_string(cx);
        expect_covers(q, cx, what);
        const int64_t h = attention_prefill_ctas(tokens - seqs + 1, 4, 8);
        EXPECT_LE(prefill_wave_keys(q, h, cx, 132), prefill_wave_keys({1, 0, 1}, h, cx, 132)) << what;
      }
}

TEST(AttentionPlan, DecodeSplitsAreWholeRoundsOfTheKernel) {
  const AttentionDevice fast{132, false};
  for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
    const KvCacheLayer c = cache(dt, 8, 128);
    const int64_t round = attention_decode_keys_per_round(dt);
    ASSERT_EQ(round, dt == DType::kBF16 ? 64 : 128);  // 4 warps x 16 (BF16) or 32 (FP8) keys
    // Batch 1 at a short context: one round per CTA, as many CTAs as the context has rounds.
    const AttentionStepPlan shortp = plan_attention_splits({1, 1, 32, 200}, c, fast);
    EXPECT_EQ(shortp.split_len, round) << dtype_name(dt);
    EXPECT_EQ(shortp.num_splits, (200 + round - 1) / round) << dtype_name(dt);
    // One round of keys or fewer: no split.
    EXPECT_EQ(plan_attention_splits({1, 1, 32, round}, c, fast).num_splits, 1) << dtype_name(dt);
    for (int64_t ctx : {int64_t{round + 1}, int64_t{1000}, int64_t{131072}}) {
      const AttentionStepPlan p = plan_attention_splits({1, 1, 32, ctx}, c, fast);
      expect_covers(p, ctx, std::string(dtype_name(dt)) + " ctx " + std::to_string(ctx));
      EXPECT_GT(p.num_splits, 1);
      EXPECT_EQ(p.split_len % round, 0) << dtype_name(dt) << " ctx " << ctx;
    }
  }
}

// A split decode step is one wave: its CTAs (rows x KV heads x head chunks x splits) fit the
// multiprocessors' CTA slots at once, and a long context fills most of them (within the cap of
// 64 splits). A split count
// rounded up once made 400 CTAs for 396 slots at batch 1 over 128K keys (8 KV heads, 132
// multiprocessors), and the last 4 ran after all the others.
TEST(AttentionPlan, DecodeSplitsFitOneWave) {
  const AttentionDevice dev{132, false};
  const int64_t slots = attention_decode_ctas_per_sm() * dev.num_sms;
  for (DType dt : {DType::kBF16, DType::kF8E4M3})
    for (auto [heads, kv] : {std::pair{32, 8}, std::pair{64, 8}, std::pair{8, 1}, std::pair{28, 4}, std::pair{48, 3}}) {
      const KvCacheLayer c = cache(dt, kv, 128);
      const int64_t chunks = (heads / kv + attention_decode_heads_per_cta() - 1) / attention_decode_heads_per_cta();
      for (int64_t rows : {1, 2, 3, 5, 8, 13})
        for (int64_t ctx : {int64_t{4096}, int64_t{32768}, int64_t{100000}, int64_t{131072}}) {
          const std::string what = std::string(dtype_name(dt)) + " heads " + std::to_string(heads) + "/" +
                                   std::to_string(kv) + " rows " + std::to_string(rows) + " ctx " + std::to_string(ctx);
          ASSERT_EQ(attention_route({rows, rows, heads, ctx}, c, dev), AttentionRoute::kDecode) << what;
          const AttentionStepPlan p = plan_attention_splits({rows, rows, heads, ctx}, c, dev);
          expect_covers(p, ctx, what);
          const int64_t ctas = rows * kv * chunks * p.num_splits;
          EXPECT_LE(ctas, slots) << what;
          // (Up to 64 splits: with fewer than slots / 64 CTAs per split the cap binds first.)
          if (ctx == 131072 && rows * kv * chunks * 64 >= slots) EXPECT_GT(ctas, slots * 3 / 4) << what;
        }
    }
}

TEST(AttentionPlan, MixedStepsRunTheirDecodeRowsInTheDecodeKernel) {
  const AttentionDevice fast{132, false}, exact{132, true};
  for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
    const KvCacheLayer c = cache(dt, 8, 128);
    // 1,000 decode rows (the scheduler puts them first) and 7 prompt chunks of ~1,000 tokens,
    // as a step of a 1000 x 1000/1000 throughput run makes.
    const AttentionShape mixed{1000 + 7000, 1007, 32, 2000, 1000, 1000};
    ASSERT_EQ(attention_route(mixed, c, fast), AttentionRoute::kPrefillPacked);
    const AttentionStepPlan p = plan_attention_splits(mixed, c, fast);
    EXPECT_EQ(p.decode_seqs, 1000);
    EXPECT_EQ(p.decode_tokens, 1000);
    // Each part is planned as the step of that part alone would be.
    const AttentionStepPlan dp = plan_attention_splits({1000, 1000, 32, 2000}, c, fast);
    const AttentionStepPlan pp = plan_attention_splits({7000, 7, 32, 2000}, c, fast);
    EXPECT_EQ(p.decode_splits, dp.num_splits);
    EXPECT_EQ(p.decode_split_len, dp.split_len);
    EXPECT_EQ(p.num_splits, pp.num_splits);
    EXPECT_EQ(p.split_len, pp.split_len);
    // Few streams beside a chunk late in a long context: both parts split their keys.
    const AttentionStepPlan late = plan_attention_splits({16 + 520, 17, 32, 107000, 16, 16}, c, fast);
    EXPECT_EQ(late.decode_seqs, 16);
    EXPECT_GT(late.decode_splits, 1);
    EXPECT_GT(late.num_splits, 1);
    expect_covers({late.decode_splits, late.decode_split_len, late.decode_splits}, 107000, "16 decodes at 107K");
    expect_covers(late, 107000, "520-token chunk at 107K");
    EXPECT_EQ(late.num_splits, plan_attention_splits({520, 1, 32, 107000}, c, fast).num_splits);
    // Told the streams' own longest context (600 keys), their part splits over that: the plan
    // of those 16 decodes alone, not ranges of the chunk's length, most of them empty.
    const AttentionStepPlan told = plan_attention_splits({16 + 520, 17, 32, 107000, 16, 16, 600}, c, fast);
    const AttentionStepPlan alone = plan_attention_splits({16, 16, 32, 600}, c, fast);
    EXPECT_EQ(told.decode_splits, alone.num_splits);
    EXPECT_EQ(told.decode_split_len, alone.split_len);
    EXPECT_LT(told.decode_split_len, late.decode_split_len);
    expect_covers({told.decode_splits, told.decode_split_len, told.decode_splits}, 600, "16 decodes at 600");
    EXPECT_EQ(told.num_splits, late.num_splits);
    EXPECT_EQ(told.split_len, late.split_len);
    // Drafts ride along as decode rows (up to 3 per sequence).
    EXPECT_EQ(plan_attention_splits({64 * 3 + 500, 65, 32, 4000, 64, 64 * 3}, c, fast).decode_seqs, 64);
    // One kernel for the step: a decode-route rest (a 40-token chunk), no decodes, no prompts,
    // exact precision, an f32 cache.
    EXPECT_EQ(plan_attention_splits({1040, 1001, 32, 2000, 1000, 1000}, c, fast).decode_seqs, 0);
    EXPECT_EQ(plan_attention_splits({7000, 7, 32, 2000, 0, 0}, c, fast).decode_seqs, 0);
    EXPECT_EQ(plan_attention_splits({1000, 1000, 32, 2000, 1000, 1000}, c, fast).decode_seqs, 0);
    EXPECT_EQ(plan_attention_splits(mixed, c, exact).decode_seqs, 0);
    EXPECT_EQ(plan_attention_splits(mixed, cache(DType::kF32, 8, 128), fast).decode_seqs, 0);
  }
  // A step the whole of which would be a decode step, with one long chunk among many decodes,
  // also runs the chunk in the prompt kernel.
  const KvCacheLayer c = cache(DType::kBF16, 8, 128);
  ASSERT_EQ(attention_route({3000, 1001, 32, 3000}, c, fast), AttentionRoute::kDecode);
  EXPECT_EQ(plan_attention_splits({3000, 1001, 32, 3000, 1000, 1000}, c, fast).decode_seqs, 1000);
}

}  // namespace
}  // namespace lancet::cuda
