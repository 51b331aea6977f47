// Asynchronous scheduling (engine/engine_async.cc) against synchronous steps, over the fake
// paged model (whose logits depend on the context read back through the block tables, so a
// token fed to the wrong place, a placeholder left in, or a block keyed before its tokens are
// known changes the output). The executor runs ModelExecutor's default asynchronous steps:
// the same ordering as a device's (tokens appended one step late) without overlap.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/engine.h"
#include "engine/fake_paged_model.h"

namespace lancet {
namespace {

using testing::FakePagedModel;
constexpr int64_t kVocab = FakePagedModel::kVocab;

struct Outcome {
  std::map<int64_t, std::map<int32_t, std::vector<int32_t>>> tokens;  // by request index, choice
  std::map<int64_t, FinishReason> reasons;
  EngineStats stats;
};

Outcome run(const std::vector<GenerationRequest>& reqs, bool async, int64_t budget, bool prefix, int64_t blocks,
        std::vector<int32_t> eos = {}) {
  FakePagedModel model(blocks, 4);
  EngineConfig cfg;
  cfg.enable_prefix_caching = prefix;
  cfg.async_scheduling = async;
  cfg.eos_token_ids = std::move(eos);
  cfg.scheduler = {.max_num_batched_tokens = budget, .max_num_seqs = 64, .max_model_len = 512};
  Engine engine(cfg, &model);
  std::map<int64_t, int64_t> index;
  for (const auto& q : reqs) {
    auto id = engine.add_request(q);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    if (id.ok()) index[*id] = static_cast<int64_t>(index.size());
  }
  Outcome r;
  for (int guard = 0; engine.has_work() && guard < 100000; ++guard) {
    auto ev = engine.step();
    EXPECT_TRUE(ev.ok() && engine.last_error().ok()) << engine.last_error().to_string();
    if (!ev.ok()) break;
    for (const auto& e : *ev) {
      const int64_t i = index.at(e.request_id);
      EXPECT_FALSE(r.reasons.count(i) && e.index == 0 && reqs[i].params.n == 1) << "event after the final one";
      if (e.token >= 0) r.tokens[i][e.index].push_back(e.token);
      if (e.finished) r.reasons[i] = e.finish_reason;
    }
  }
  r.stats = engine.stats();
  return r;
}

std::vector<GenerationRequest> requests(int count, uint64_t seed, bool sampled) {
  std::mt19937 rng(static_cast<uint32_t>(seed));
  std::vector<int32_t> prefix(40);
  for (auto& t : prefix) t = static_cast<int32_t>(rng() % kVocab);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < count; ++i) {
    GenerationRequest q;
    if (i % 2 == 0) q.prompt = prefix;
    const int len = 1 + static_cast<int>(rng() % 70);
    for (int j = 0; j < len; ++j) q.prompt.push_back(static_cast<int32_t>(rng() % kVocab));
    q.params.temperature = sampled ? 1.0f : 0.0f;
    if (sampled && i % 3 == 1) q.params.top_p = 0.8f;
    if (sampled && i % 3 == 2) q.params.top_k = 5;
    q.params.seed = 900 + i;
    q.params.max_tokens = 1 + static_cast<int32_t>(rng() % 24);
    reqs.push_back(q);
  }
  return reqs;
}

void expect_same(const Outcome& got, const Outcome& want, const std::string& what) {
  ASSERT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.reasons, want.reasons) << what;
  EXPECT_EQ(got.stats.num_free_blocks, got.stats.num_blocks) << what;
  EXPECT_EQ(got.stats.num_running + got.stats.num_waiting, 0) << what;
  EXPECT_EQ(got.stats.async_steps, got.stats.steps) << what;
  EXPECT_GT(got.stats.async_steps, 0) << what;
}

// 64 concurrent greedy requests (half share a 40-token prefix): the same tokens as synchronous
// steps under chunked prefill at budgets 1, 7, 64 and 4096, prefix caching on and off, and
// with a pool small enough to preempt.
TEST(AsyncScheduling, GreedyEqualsSynchronousUnderChunkingCachingAndPreemption) {
  const auto reqs = requests(64, 7, /*sampled=*/false);
  for (int64_t budget : {1, 7, 64, 4096}) {
    for (bool prefix : {true, false}) {
      for (int64_t blocks : {2000, 90}) {
        const std::string what = "budget " + std::to_string(budget) + " prefix " + std::to_string(prefix) +
                                 " blocks " + std::to_string(blocks);
        const Outcome want = run(reqs, false, budget, prefix, blocks);
        const Outcome got = run(reqs, true, budget, prefix, blocks);
        expect_same(got, want, what);
        if (blocks == 90 && budget >= 64) EXPECT_GT(got.stats.preemptions, 0) << what;
      }
    }
  }
  // Alone: each request by itself gives the tokens it gave among the others.
  const Outcome all = run(reqs, true, 64, true, 2000);
  for (size_t i = 0; i < reqs.size(); i += 9) {
    const Outcome one = run({reqs[i]}, true, 64, true, 2000);
    EXPECT_EQ(one.tokens.at(0), all.tokens.at(static_cast<int64_t>(i))) << i;
  }
}

TEST(AsyncScheduling, SeededSamplingAndNChoicesEqualSynchronous) {
  auto reqs = requests(24, 3, /*sampled=*/true);
  reqs[5].params.n = 3;
  reqs[11].params.n = 2;
  reqs[11].params.temperature = 2.0f;
  for (int64_t budget : {7, 256}) {
    const Outcome want = run(reqs, false, budget, true, 2000);
    const Outcome got = run(reqs, true, budget, true, 2000);
    expect_same(got, want, "budget " + std::to_string(budget));
    EXPECT_EQ(got.tokens.at(5).size(), 3u);
  }
}

// Stops seen one step late end at the same token: end tokens (the token itself is the last),
// stop token ids, max_tokens; min_tokens (host masking) makes those steps synchronous.
TEST(AsyncScheduling, StopsEndAtTheSameTokenAndFreeTheirBlocks) {
  auto reqs = requests(32, 11, /*sampled=*/true);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].params.max_tokens = 40;
    if (i % 4 == 1) reqs[i].params.stop_token_ids = {static_cast<int32_t>(i % kVocab), 3};
    if (i % 4 == 2) reqs[i].params.ignore_eos = true;
  }
  const std::vector<int32_t> eos = {9, 17};
  const Outcome want = run(reqs, false, 64, true, 2000, eos);
  const Outcome got = run(reqs, true, 64, true, 2000, eos);
  expect_same(got, want, "stops");
  int stopped = 0;
  for (const auto& [i, r] : got.reasons) stopped += r == FinishReason::kStop;
  EXPECT_GT(stopped, 4);  // the stops were exercised, not only lengths

  reqs[0].params.min_tokens = 3;
  const Outcome want_min = run(reqs, false, 64, true, 2000, eos);
  const Outcome got_min = run(reqs, true, 64, true, 2000, eos);
  EXPECT_EQ(got_min.tokens, want_min.tokens);
  EXPECT_EQ(got_min.reasons, want_min.reasons);
  EXPECT_GT(got_min.stats.async_steps, 0);
  EXPECT_LT(got_min.stats.async_steps, got_min.stats.steps);  // synchronous while it ran
  EXPECT_EQ(got_min.stats.num_free_blocks, got_min.stats.num_blocks);
}

// An abort mid-stream: the next step ends the request and frees its blocks (KV usage 0 with
// nothing else running), and its token still in flight is dropped.
TEST(AsyncScheduling, AbortMidStreamFreesBlocksWithinOneStep) {
  FakePagedModel model(200, 4);
  EngineConfig cfg;
  cfg.async_scheduling = true;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 8, .max_model_len = 512};
  Engine engine(cfg, &model);
  GenerationRequest q;
  q.prompt = {3, 1, 4, 1, 5, 9, 2, 6};
  q.params.temperature = 0;
  q.params.max_tokens = 100;
  auto id = engine.add_request(q);
  ASSERT_TRUE(id.ok());
  int tokens = 0;
  for (int i = 0; i < 6; ++i) {
    auto ev = engine.step();
    ASSERT_TRUE(ev.ok());
    tokens += static_cast<int>(ev->size());
  }
  EXPECT_EQ(tokens, 5);  // one step behind: 6 steps launched, 5 collected
  EXPECT_GT(engine.stats().kv_usage, 0.0);
  engine.abort(*id);
  auto ev = engine.step();
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].finish_reason, FinishReason::kAbort);
  EXPECT_EQ(engine.stats().kv_usage, 0.0);
  EXPECT_EQ(engine.stats().num_free_blocks, 200);
  // The step launched before the abort is still collected; it emits nothing.
  while (engine.has_work()) {
    auto more = engine.step();
    ASSERT_TRUE(more.ok());
    EXPECT_TRUE(more->empty());
  }
  EXPECT_EQ(engine.stats().num_free_blocks, 200);
}

// The blocks of generated tokens are keyed for the prefix cache as they become known: a request
// whose prompt continues a finished one (a chat's next turn) takes every full block of the
// first one's computed tokens from the cache, asynchronous as synchronous.
TEST(AsyncScheduling, GeneratedTokensBlocksAreKeyedForTheNextTurn) {
  for (const bool async : {false, true}) {
    SCOPED_TRACE(async ? "async" : "sync");
    FakePagedModel model(200, 4);
    EngineConfig cfg;
    cfg.enable_prefix_caching = true;
    cfg.async_scheduling = async;
    cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 8, .max_model_len = 512};
    Engine engine(cfg, &model);
    GenerationRequest first;
    first.prompt = {3, 1, 4, 1, 5, 9, 2, 6, 5, 3};
    first.params.temperature = 0;
    first.params.ignore_eos = true;
    first.params.max_tokens = 30;
    ASSERT_TRUE(engine.add_request(first).ok());
    std::vector<int32_t> out;
    while (engine.has_work()) {
      auto ev = engine.step();
      ASSERT_TRUE(ev.ok());
      for (const auto& e : *ev)
        if (e.token >= 0) out.push_back(e.token);
    }
    ASSERT_EQ(out.size(), 30u);
    EXPECT_EQ(engine.stats().async_steps > 0, async);
    const int64_t hits_before = engine.stats().prefix_hits;
    GenerationRequest next = first;
    next.prompt.insert(next.prompt.end(), out.begin(), out.end());
    next.prompt.insert(next.prompt.end(), {7, 7, 2, 8, 1});
    next.params.max_tokens = 2;
    ASSERT_TRUE(engine.add_request(next).ok());
    while (engine.has_work()) ASSERT_TRUE(engine.step().ok());
    // 10 + 30 tokens, the last never fed: 39 computed, 9 full blocks of 4.
    EXPECT_EQ(engine.stats().prefix_hits - hits_before, 36);
  }
}

// Requests that need host logits (logprobs, penalties) switch the engine to synchronous steps
// while they run; everything gives the synchronous tokens and logprobs come back.
TEST(AsyncScheduling, HostSampledRequestsRunSynchronousSteps) {
  auto reqs = requests(16, 5, /*sampled=*/true);
  reqs[3].params.logprobs = 2;
  reqs[8].params.repetition_penalty = 1.3f;
  const Outcome want = run(reqs, false, 64, true, 2000);
  const Outcome got = run(reqs, true, 64, true, 2000);
  EXPECT_EQ(got.tokens, want.tokens);
  EXPECT_EQ(got.reasons, want.reasons);
  EXPECT_LT(got.stats.async_steps, got.stats.steps);
  EXPECT_EQ(got.stats.num_free_blocks, got.stats.num_blocks);
}

}  // namespace
}  // namespace lancet
