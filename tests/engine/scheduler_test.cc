// Scheduler: chunked prefill sharing steps with decodes, budgets and caps respected,
// preemption by recompute when blocks run out, prefix-cache admission, and randomized
// schedules (arrivals, aborts, tiny pools) that always drain with every block back.
#include "engine/scheduler.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <random>

namespace lancet {
namespace {

struct Harness {
  KvCacheManager kv;
  Scheduler sched;
  std::vector<std::unique_ptr<Sequence>> seqs;
  uint64_t arrivals = 0;

  Harness(int64_t blocks, int32_t bs, SchedulerConfig cfg, bool prefix = true)
      : kv(BlockManagerConfig{{blocks, bs}, prefix, kv_cache_salt("m", "f32", "")}), sched(cfg, &kv) {}

  Sequence* add(std::vector<int32_t> prompt, int32_t max_tokens, int32_t priority = 0) {
    auto s = std::make_unique<Sequence>();
    s->id = static_cast<SeqId>(seqs.size());
    s->tokens = std::move(prompt);
    s->prompt_len = s->num_tokens();
    s->params.max_tokens = max_tokens;
    s->priority = priority;
    s->arrival = arrivals++;
    sched.add(s.get());
    seqs.push_back(std::move(s));
    return seqs.back().get();
  }

  // One engine step without a model: sequences whose KV caught up sample a token
  // (deterministic: the number of tokens so far) and finish at max_tokens.
  SchedulerOutput step() {
    SchedulerOutput out = sched.schedule();
    sched.on_step_done(out);
    for (const auto& s : out.scheduled) {
      Sequence* q = s.seq;
      if (q->num_computed == q->num_tokens()) {
        q->tokens.push_back(static_cast<int32_t>(q->num_tokens() % 50));
        if (q->num_output() >= q->params.max_tokens) {
          q->status = SeqStatus::kFinished;
          q->finish = FinishReason::kLength;
          sched.remove(q);
        }
      }
    }
    return out;
  }
};

std::vector<int32_t> iota_tokens(int n, int start = 0) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = (start + i) % 50;
  return v;
}

TEST(Scheduler, LongPromptIsChunkedAndSharesStepsWithDecodes) {
  Harness h(1000, 16, SchedulerConfig{.max_num_batched_tokens = 64, .max_num_seqs = 8, .max_model_len = 4096});
  Sequence* shortq = h.add(iota_tokens(5), 20);
  h.step();  // short prompt prefilled, first token sampled
  EXPECT_EQ(shortq->num_output(), 1);
  Sequence* longq = h.add(iota_tokens(1000, 7), 2);
  int steps = 0;
  while (longq->num_output() == 0) {
    SchedulerOutput out = h.step();
    ++steps;
    EXPECT_LE(out.num_batched_tokens, 64);
    // The decode is never starved by the long prompt.
    if (!shortq->finished()) {
      bool has_short = false;
      for (auto& s : out.scheduled) has_short |= (s.seq == shortq && s.num_new_tokens == 1);
      EXPECT_TRUE(has_short) << "step " << steps;
    }
  }
  // 1000 prompt tokens at <= 63 per step while the decode runs (64 once it finishes).
  EXPECT_GE(steps, 1000 / 64);
  EXPECT_LE(steps, 1000 / 63 + 2);
}

// The long prompt arrives FIRST (it is the oldest running sequence), streams join while it is
// prefilled: their decodes still run every step, and with a long-prompt threshold new
// arrivals are admitted at once instead of waiting for the whole prefill.
TEST(Scheduler, DecodesOfLaterStreamsRunWhileAnEarlierLongPromptPrefills) {
  for (int64_t threshold : {0, 32}) {
    SCOPED_TRACE("threshold " + std::to_string(threshold));
    Harness h(1000, 16, SchedulerConfig{.max_num_batched_tokens = 64, .max_num_seqs = 8, .max_model_len = 4096,
                                        .long_prefill_token_threshold = threshold});
    Sequence* longq = h.add(iota_tokens(2000, 3), 2);
    h.step();  // the long prompt takes the whole first step
    EXPECT_EQ(longq->num_computed, threshold ? threshold : 64);
    Sequence* a = h.add(iota_tokens(5), 50);
    Sequence* b = h.add(iota_tokens(7, 1), 50);
    int steps = 0, admitted_at = -1;
    while (longq->num_output() == 0) {
      const int live = !a->finished() + !b->finished();
      SchedulerOutput out = h.step();
      ++steps;
      EXPECT_LE(out.num_batched_tokens, 64);
      if (admitted_at < 0 && a->num_output() > 0 && b->num_output() > 0) admitted_at = steps;
      if (admitted_at > 0 && admitted_at < steps) {
        int decodes = 0;
        for (auto& s : out.scheduled) decodes += (s.seq == a || s.seq == b) && s.num_new_tokens == 1;
        EXPECT_EQ(decodes, live) << "step " << steps;
      }
      for (auto& s : out.scheduled)
        if (s.seq == longq && threshold) EXPECT_LE(s.num_new_tokens, threshold);
    }
    // Without a threshold the streams' prompts wait for leftover budget, which the long
    // prompt takes: they start once it is done. With one they start in the next step.
    if (threshold) {
      EXPECT_EQ(admitted_at, 1);
    } else {
      EXPECT_TRUE(admitted_at < 0 || admitted_at >= steps - 1);
    }
  }
}

// A step's cost in the step cost model's form (3 ms a step, 0.01 ms a token, 0.5 ms per
// million prompt query-key pairs, 2 ms per million decode context tokens), and the model fitted
// to it over random steps.
// (Of a step that ran: each sequence's num_computed has moved past its tokens.)
double timed_step_ms(const SchedulerOutput& out) {
  StepFeatures f;
  for (const ScheduledSeq& s : out.scheduled) f.add_chunk(s.seq->num_computed - s.num_new_tokens, s.num_new_tokens);
  return 3.0 + 0.01 * static_cast<double>(f.tokens) + 0.5e-6 * f.prompt_pairs +
         2e-6 * static_cast<double>(f.decode_context);
}

void fit_cost(StepCostModel* m) {
  std::mt19937 rng(9);
  for (int i = 0; i < 100; ++i) {
    StepFeatures f;
    for (int d = 0; d < static_cast<int>(rng() % 32); ++d) f.add_chunk(rng() % 10000, 1);
    f.add_chunk(rng() % 100000, 2 + rng() % 8000);
    m->observe(f, 3.0 + 0.01 * static_cast<double>(f.tokens) + 0.5e-6 * f.prompt_pairs +
                      2e-6 * static_cast<double>(f.decode_context));
  }
  ASSERT_TRUE(m->fitted());
}

// With max_step_ms, a long prompt's chunks shrink as its context grows so that every step
// with 16 decoding streams stays within the budget, while the prompt still finishes. The model
// learns from every step, as the engine's does: one fitted beforehand and one that starts
// empty, whose first chunk is kColdStartChunk and whose chunks then grow with what the steps
// measured (never past the budget on the way).
TEST(Scheduler, TimeBudgetCutsPromptChunksToFitBesideTheDecodes) {
  const SchedulerConfig cfg{.max_num_batched_tokens = 8192, .max_num_seqs = 32, .max_model_len = 70000,
                            .max_step_ms = 50};
  for (bool prefit : {true, false}) {
    Harness h(6000, 16, cfg);
    for (int i = 0; i < 16; ++i) h.add(iota_tokens(20, i), 100000);
    h.step();  // the streams' prompts
    StepCostModel model;
    if (prefit) fit_cost(&model);
    h.sched.set_cost_model(&model);
    Sequence* longq = h.add(iota_tokens(60000, 3), 1);
    int steps = 0;
    int64_t first_chunk = 0, last_chunk = 0, smallest = 1 << 30, largest = 0;
    double worst = 0;
    while (longq->num_output() == 0) {
      SchedulerOutput out = h.step();
      ++steps;
      int decodes = 0;
      for (const ScheduledSeq& s : out.scheduled) {
        if (s.seq == longq) {
          (first_chunk == 0 ? first_chunk : last_chunk) = s.num_new_tokens;
          largest = std::max(largest, s.num_new_tokens);
          if (longq->num_computed < longq->prompt_len) smallest = std::min(smallest, s.num_new_tokens);
        }
        decodes += s.seq != longq && s.num_new_tokens == 1;
      }
      EXPECT_EQ(decodes, 16) << "step " << steps;  // the streams decode every step
      const double ms = timed_step_ms(out);
      worst = std::max(worst, ms);
      StepFeatures f;
      for (const ScheduledSeq& s : out.scheduled) f.add_chunk(s.seq->num_computed - s.num_new_tokens, s.num_new_tokens);
      model.observe(f, ms);
      ASSERT_LT(steps, 1000);
    }
    SCOPED_TRACE(prefit ? "fitted beforehand" : "learned online");
    EXPECT_LE(worst, 50.0 * 1.001);
    // Attention over the longer context costs more (online, the first chunks are the cold start's).
    EXPECT_GT(prefit ? first_chunk : largest, 2 * last_chunk);
    EXPECT_GE(smallest, kMinTimedChunk);
    if (!prefit) {
      EXPECT_EQ(first_chunk, kColdStartChunk);
      EXPECT_GT(largest, 4 * kColdStartChunk);  // the chunks grew to what the budget allows
    }
  }
  // Without a model the token budget alone applies.
  Harness h(6000, 16, cfg);
  for (int i = 0; i < 16; ++i) h.add(iota_tokens(20, i), 100000);
  h.step();
  Sequence* longq = h.add(iota_tokens(60000, 3), 1);
  const SchedulerOutput out = h.step();
  for (const ScheduledSeq& s : out.scheduled)
    if (s.seq == longq) EXPECT_EQ(s.num_new_tokens, 8192 - 16);
}

// The minimum chunk keeps a long prompt moving when the decodes alone fill the budget.
TEST(Scheduler, TimeBudgetStillGivesTheMinimumChunk) {
  const SchedulerConfig cfg{.max_num_batched_tokens = 8192, .max_num_seqs = 64, .max_model_len = 4096,
                            .max_step_ms = 4};
  Harness h(3000, 16, cfg, /*prefix=*/false);  // no cached block of the long prompt
  for (int i = 0; i < 40; ++i) h.add(iota_tokens(30, i), 1000);
  h.step();  // the streams' prompts
  StepCostModel model;
  fit_cost(&model);
  h.sched.set_cost_model(&model);
  Sequence* longq = h.add(iota_tokens(2000, 1), 1);
  int steps = 0;
  while (longq->num_output() == 0) {
    const SchedulerOutput out = h.step();
    for (const ScheduledSeq& s : out.scheduled)
      if (s.seq == longq && longq->num_output() == 0) EXPECT_EQ(s.num_new_tokens, kMinTimedChunk);
    ASSERT_LT(++steps, 100);
  }
  EXPECT_EQ(steps, (2000 + kMinTimedChunk - 1) / kMinTimedChunk);
}

TEST(Scheduler, RespectsMaxNumSeqs) {
  Harness h(1000, 4, SchedulerConfig{.max_num_batched_tokens = 1000, .max_num_seqs = 3, .max_model_len = 100});
  for (int i = 0; i < 10; ++i) h.add(iota_tokens(3, i), 5);
  SchedulerOutput out = h.step();
  EXPECT_EQ(out.scheduled.size(), 3u);
  EXPECT_EQ(h.sched.num_running(), 3);
  EXPECT_EQ(h.sched.num_waiting(), 7);
}

TEST(Scheduler, PreemptsNewestWhenBlocksRunOutAndRecomputes) {
  // 6 blocks of 4 tokens; two sequences that each grow to 12 tokens (3 blocks) fit, three don't.
  Harness h(6, 4, SchedulerConfig{.max_num_batched_tokens = 100, .max_num_seqs = 8, .max_model_len = 100}, false);
  Sequence* a = h.add(iota_tokens(4, 0), 8);
  Sequence* b = h.add(iota_tokens(4, 10), 8);
  Sequence* c = h.add(iota_tokens(4, 20), 8);
  int guard = 0;
  while (!(a->finished() && b->finished() && c->finished()) && guard++ < 200) h.step();
  EXPECT_TRUE(a->finished() && b->finished() && c->finished());
  EXPECT_GT(h.sched.total_preemptions(), 0);
  EXPECT_EQ(a->num_preemptions, 0);  // the oldest is never the victim
  EXPECT_GT(c->num_preemptions, 0);  // the newest is
  EXPECT_EQ(h.kv.num_free_blocks(), 6);
  for (Sequence* s : {a, b, c}) EXPECT_EQ(s->num_output(), 8);
}

TEST(Scheduler, GuaranteedNoEvictAdmitsOnlyWhatTheCacheHoldsToTheWholeLength) {
  // The workload above (6 blocks of 4 tokens, three sequences growing to 12 tokens = 3 blocks):
  // reserving whole lengths admits two, the third waits for the first to finish, and nothing is
  // preempted.
  Harness h(6, 4,
            SchedulerConfig{.max_num_batched_tokens = 100, .max_num_seqs = 8, .max_model_len = 100,
                            .reserve_whole_length = true},
            false);
  Sequence* a = h.add(iota_tokens(4, 0), 8);
  Sequence* b = h.add(iota_tokens(4, 10), 8);
  Sequence* c = h.add(iota_tokens(4, 20), 8);
  SchedulerOutput first = h.step();
  ASSERT_EQ(first.scheduled.size(), 2u);
  EXPECT_EQ(h.sched.num_waiting(), 1);
  EXPECT_EQ(c->status, SeqStatus::kWaiting);
  int guard = 0, steps = 1;
  bool c_waited_for_a = true;
  while (!(a->finished() && b->finished() && c->finished()) && guard++ < 200) {
    if (c->status == SeqStatus::kRunning && !a->finished() && !b->finished()) c_waited_for_a = false;
    h.step();
    ++steps;
  }
  EXPECT_TRUE(a->finished() && b->finished() && c->finished());
  EXPECT_TRUE(c_waited_for_a);
  EXPECT_EQ(h.sched.total_preemptions(), 0);
  EXPECT_EQ(h.kv.num_free_blocks(), 6);
  for (Sequence* s : {a, b, c}) EXPECT_EQ(s->num_output(), 8);
  // max_model_len caps what is reserved: a sequence asking for 1000 tokens in a 12-token
  // context needs 3 blocks, not 251.
  Harness capped(6, 4,
                 SchedulerConfig{.max_num_batched_tokens = 100, .max_num_seqs = 8, .max_model_len = 12,
                                 .reserve_whole_length = true},
                 false);
  capped.add(iota_tokens(4, 0), 1000);
  capped.add(iota_tokens(4, 10), 1000);
  EXPECT_EQ(capped.step().scheduled.size(), 2u);
  // A sequence whose whole length exceeds the cache is still admitted into an empty engine
  // rather than waiting forever (the runtime's request checks keep such requests out).
  Harness alone(2, 4,
                SchedulerConfig{.max_num_batched_tokens = 100, .max_num_seqs = 8, .max_model_len = 100,
                                .reserve_whole_length = true},
                false);
  alone.add(iota_tokens(4, 0), 50);
  EXPECT_EQ(alone.step().scheduled.size(), 1u);
}

TEST(Scheduler, PriorityOrdersAdmission) {
  Harness h(1000, 4, SchedulerConfig{.max_num_batched_tokens = 1000, .max_num_seqs = 1, .max_model_len = 100});
  h.add(iota_tokens(3), 2, /*priority=*/5);
  Sequence* urgent = h.add(iota_tokens(3, 9), 2, /*priority=*/-1);
  SchedulerOutput out = h.step();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(out.scheduled[0].seq, urgent);
}

// The Batch API's requests run at kBatchPriority: an interactive request that arrives behind a
// queue of them is admitted first.
TEST(Scheduler, InteractiveRequestIsAdmittedBeforeQueuedBatchRequests) {
  Harness h(1000, 4, SchedulerConfig{.max_num_batched_tokens = 1000, .max_num_seqs = 2, .max_model_len = 100});
  std::vector<Sequence*> batch;
  for (int i = 0; i < 6; ++i) batch.push_back(h.add(iota_tokens(3, i), 30, kBatchPriority));
  h.step();  // two batch requests run
  Sequence* chat = h.add(iota_tokens(3, 40), 2, kInteractivePriority);
  SchedulerOutput out = h.step();
  bool scheduled = false;
  for (auto& s : out.scheduled) scheduled |= s.seq == chat;
  EXPECT_TRUE(scheduled);
  // No batch request that waited was admitted before it.
  for (size_t i = 2; i < batch.size(); ++i) EXPECT_EQ(batch[i]->status, SeqStatus::kWaiting);
}

TEST(Scheduler, InteractiveRequestPreemptsBatchSequenceWhenSlotsAreFull) {
  Harness h(1000, 4, SchedulerConfig{.max_num_batched_tokens = 1000, .max_num_seqs = 2, .max_model_len = 100});
  Sequence* b1 = h.add(iota_tokens(3, 1), 30, kBatchPriority);
  Sequence* b2 = h.add(iota_tokens(3, 2), 30, kBatchPriority);
  h.step();
  h.step();
  Sequence* chat = h.add(iota_tokens(3, 40), 3, kInteractivePriority);
  SchedulerOutput out = h.step();
  EXPECT_EQ(out.num_priority_preempted, 1);
  ASSERT_EQ(out.preempted.size(), 1u);
  EXPECT_EQ(out.preempted[0], b2);  // the newest batch sequence
  EXPECT_EQ(b2->status, SeqStatus::kWaiting);
  EXPECT_EQ(b2->num_computed, 0);
  EXPECT_EQ(chat->num_output(), 1);  // admitted and prefilled in the same step
  EXPECT_EQ(b1->status, SeqStatus::kRunning);
  // Equal priorities never preempt for a waiting sequence.
  Sequence* chat2 = h.add(iota_tokens(3, 41), 3, kInteractivePriority);
  out = h.step();
  EXPECT_EQ(out.num_priority_preempted, 1);  // b1, not chat
  EXPECT_EQ(chat->status, SeqStatus::kRunning);
  EXPECT_EQ(chat2->status, SeqStatus::kRunning);
  int guard = 0;
  while (!h.sched.idle() && guard++ < 1000) h.step();
  EXPECT_TRUE(b1->finished() && b2->finished() && chat->finished() && chat2->finished());
  EXPECT_EQ(h.kv.num_free_blocks(), 1000);
}

TEST(Scheduler, InteractiveRequestPreemptsBatchSequenceWhenBlocksRunOut) {
  // 10 blocks of 4 tokens: the batch sequence holds 8 (30 tokens), the interactive prompt of
  // 12 tokens needs 3.
  Harness h(10, 4, SchedulerConfig{.max_num_batched_tokens = 100, .max_num_seqs = 8, .max_model_len = 100}, false);
  Sequence* b = h.add(iota_tokens(30, 1), 5, kBatchPriority);
  h.step();
  EXPECT_EQ(h.kv.num_free_blocks(), 2);
  Sequence* chat = h.add(iota_tokens(12, 7), 2, kInteractivePriority);
  SchedulerOutput out = h.step();
  EXPECT_EQ(out.num_priority_preempted, 1);
  EXPECT_EQ(b->status, SeqStatus::kWaiting);
  EXPECT_EQ(chat->num_output(), 1);
  int guard = 0;
  while (!h.sched.idle() && guard++ < 1000) h.step();
  EXPECT_TRUE(b->finished() && chat->finished());
  EXPECT_EQ(b->num_output(), 5);
}

// While an interactive prompt computes, batch sequences compute nothing (neither their
// prompt chunks nor their decodes), so the step that makes the interactive first token is the
// interactive work alone; they resume in the next step.
TEST(Scheduler, BatchSequencesWaitWhileInteractivePromptComputes) {
  Harness h(1000, 16, SchedulerConfig{.max_num_batched_tokens = 64, .max_num_seqs = 8, .max_model_len = 4096});
  Sequence* decoding = h.add(iota_tokens(5, 3), 100, kBatchPriority);
  h.step();
  Sequence* longb = h.add(iota_tokens(1000, 1), 2, kBatchPriority);
  h.step();
  ASSERT_GT(longb->num_computed, 0);
  Sequence* chat = h.add(iota_tokens(100, 9), 2, kInteractivePriority);
  int steps = 0;
  while (chat->num_output() == 0 && steps++ < 10) {
    const int64_t before = longb->num_computed, decoded_before = decoding->num_output();
    SchedulerOutput out = h.step();
    EXPECT_EQ(longb->num_computed, before) << "step " << steps;
    EXPECT_EQ(decoding->num_output(), decoded_before) << "step " << steps;
    for (auto& s : out.scheduled) EXPECT_EQ(s.seq, chat) << "step " << steps;
  }
  EXPECT_EQ(steps, 2);  // 100 prompt tokens at 64 a step
  const int64_t before = longb->num_computed, decoded_before = decoding->num_output();
  h.step();  // the interactive decode, the batch decode and the batch prompt together again
  EXPECT_GT(longb->num_computed, before);
  EXPECT_EQ(decoding->num_output(), decoded_before + 1);
}

// low_priority_prefill_tokens caps the prompt tokens of all batch sequences together per step
// (running and newly admitted), never an interactive prompt's.
TEST(Scheduler, LowPriorityPrefillTokensCapBatchPromptsPerStep) {
  Harness h(1000, 16, SchedulerConfig{.max_num_batched_tokens = 256, .max_num_seqs = 8, .max_model_len = 4096,
                                      .low_priority_prefill_tokens = 16});
  Sequence* a = h.add(iota_tokens(40, 1), 4, kBatchPriority);
  Sequence* b = h.add(iota_tokens(40, 2), 4, kBatchPriority);
  SchedulerOutput out = h.step();
  EXPECT_EQ(a->num_computed, 16);
  EXPECT_EQ(b->status, SeqStatus::kWaiting);  // no low-priority tokens left for its first chunk
  EXPECT_EQ(out.num_batched_tokens, 16);
  out = h.step();
  EXPECT_EQ(a->num_computed, 32);
  Sequence* chat = h.add(iota_tokens(100, 9), 2, kInteractivePriority);
  out = h.step();
  EXPECT_EQ(chat->num_computed, 100);  // uncapped
  EXPECT_EQ(a->num_computed, 32);
  int guard = 0;
  while (!h.sched.idle() && guard++ < 1000) {
    out = h.step();
    int64_t low = 0;
    for (auto& s : out.scheduled)
      if (s.seq->priority > kInteractivePriority && s.num_new_tokens > 1) low += s.num_new_tokens;
    EXPECT_LE(low, 16);
  }
  EXPECT_TRUE(a->finished() && b->finished() && chat->finished());
}

TEST(Scheduler, SharedPrefixIsServedFromCache) {
  Harness h(1000, 16, SchedulerConfig{.max_num_batched_tokens = 8192, .max_num_seqs = 8, .max_model_len = 8192});
  std::vector<int32_t> prefix = iota_tokens(2000, 3);
  Sequence* first = h.add(prefix, 1);
  first->tokens.push_back(1);
  first->prompt_len++;
  while (!first->finished()) h.step();
  std::vector<int32_t> p2 = prefix;
  p2.push_back(42);
  p2.push_back(43);
  Sequence* second = h.add(p2, 1);
  SchedulerOutput out = h.step();
  ASSERT_EQ(out.scheduled.size(), 1u);
  EXPECT_EQ(second->num_cached_prompt, 2000);  // 125 full blocks of 16
  EXPECT_EQ(out.scheduled[0].num_new_tokens, 2);
  EXPECT_GE(h.kv.pool().stats().prefix_hits, 125);
}

// vLLM's counting: a repeated 160-token prompt at block size 16 queries 160 tokens each time
// and hits 144 the second time (9 full blocks; the last token is always computed). A request
// that waits for blocks retries its match every step but is counted once, when admitted.
TEST(Scheduler, PrefixCacheCountersAreTokensCountedOncePerAdmission) {
  Harness h(13, 16, SchedulerConfig{.max_num_batched_tokens = 512, .max_num_seqs = 8, .max_model_len = 1024});
  std::vector<int32_t> prompt(160);
  for (int i = 0; i < 160; ++i) prompt[i] = 100 + i;
  Sequence* a = h.add(prompt, 1);
  while (!a->finished()) h.step();
  EXPECT_EQ(h.kv.prefix_query_tokens(), 160);
  EXPECT_EQ(h.kv.prefix_hit_tokens(), 0);
  Sequence* b = h.add(prompt, 1);
  while (!b->finished()) h.step();
  EXPECT_EQ(h.kv.prefix_query_tokens(), 320);
  EXPECT_EQ(h.kv.prefix_hit_tokens(), 144);
  // c shares the prefix and grows until it holds every block (9 shared + 4 of its own = 200
  // tokens); d then waits, retrying its match each step, until c finishes.
  Sequence* c = h.add(prompt, 40);
  while (h.kv.num_free_blocks() > 0) h.step();
  Sequence* d = h.add(prompt, 1);
  int waited = 0;
  for (; d->status == SeqStatus::kWaiting; ++waited) h.step();
  EXPECT_GT(waited, 2) << "d did not have to wait";
  EXPECT_TRUE(c->finished());
  while (!d->finished()) h.step();
  EXPECT_EQ(h.kv.prefix_query_tokens(), 4 * 160);
  EXPECT_EQ(h.kv.prefix_hit_tokens(), 3 * 144);
}

TEST(Scheduler, RandomizedSchedulesDrainAndFreeEverything) {
  for (int seed = 0; seed < 300; ++seed) {
    std::mt19937 rng(seed);
    const int32_t bs = 1 + rng() % 16;
    const int64_t budget = 1 + rng() % 64;
    const int64_t blocks = 40 + rng() % 100;
    // Both capacity policies (guaranteed-no-evict on odd seeds).
    SchedulerConfig cfg{.max_num_batched_tokens = budget,
                        .max_num_seqs = 1 + static_cast<int64_t>(rng() % 8),
                        .max_model_len = 1000};
    cfg.reserve_whole_length = seed % 2 == 1;
    Harness h(blocks, bs, cfg, rng() % 2);
    std::vector<Sequence*> all;
    for (int step = 0; step < 400; ++step) {
      if (all.size() < 30 && rng() % 3 == 0) {
        int len = 1 + rng() % 24;
        all.push_back(h.add(iota_tokens(len, rng() % 3), 1 + rng() % 8, rng() % 3));
      }
      if (!all.empty() && rng() % 10 == 0) {  // abort
        Sequence* s = all[rng() % all.size()];
        if (!s->finished()) {
          h.sched.remove(s);
          s->status = SeqStatus::kFinished;
          s->finish = FinishReason::kAbort;
        }
      }
      SchedulerOutput out = h.step();
      ASSERT_LE(out.num_batched_tokens, budget);
      ASSERT_LE(h.sched.num_running(), h.sched.config().max_num_seqs);
    }
    int guard = 0;
    while (!h.sched.idle() && guard++ < 100000) h.step();
    ASSERT_TRUE(h.sched.idle()) << "seed " << seed;
    ASSERT_EQ(h.kv.num_free_blocks(), blocks) << "seed " << seed;
    std::string why;
    ASSERT_TRUE(h.kv.pool().check_invariants(&why)) << why;
    for (Sequence* s : all) {
      ASSERT_TRUE(s->finished());
      if (s->finish == FinishReason::kLength) ASSERT_EQ(s->num_output(), s->params.max_tokens);
    }
  }
}

}  // namespace
}  // namespace lancet
