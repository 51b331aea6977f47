// Engine over a fake paged model whose logits depend on the whole context as read back
// through the block tables: any block-table, slot or prefix-cache mistake changes the output.
// Checks batch invariance (alone vs. concurrent, any chunk budget, prefix caching on/off,
// preemption), n > 1, aborts, stop tokens and length limits, and that every block comes back.
#include "engine/context_logits.h"
#include "engine/fake_paged_model.h"
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <random>
#include <thread>

namespace lancet {
namespace {

constexpr int64_t kVocab = 64;

using testing::context_logit;

using testing::FakePagedModel;

// Reference greedy decode straight from the token list (no paging at all).
std::vector<int32_t> reference_greedy(std::vector<int32_t> ctx, int max_tokens, int32_t eos) {
  std::vector<int32_t> out;
  for (int i = 0; i < max_tokens; ++i) {
    int32_t best = 0;
    for (int32_t v = 1; v < kVocab; ++v)
      if (context_logit(ctx, v) > context_logit(ctx, best)) best = v;
    out.push_back(best);
    ctx.push_back(best);
    if (best == eos) break;
  }
  return out;
}

struct RunResult {
  std::map<int64_t, std::map<int32_t, std::vector<int32_t>>> tokens;
  std::map<int64_t, FinishReason> reasons;
};

RunResult run_all(Engine& engine, const std::vector<GenerationRequest>& reqs, std::vector<int64_t>* ids) {
  RunResult r;
  for (const auto& q : reqs) {
    auto id = engine.add_request(q);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    ids->push_back(*id);
  }
  int guard = 0;
  while (engine.has_work() && guard++ < 100000) {
    auto ev = engine.step();
    EXPECT_TRUE(ev.ok());
    for (const auto& e : *ev) {
      if (e.token >= 0) r.tokens[e.request_id][e.index].push_back(e.token);
      if (e.finished) r.reasons[e.request_id] = e.finish_reason;
    }
  }
  return r;
}

std::vector<GenerationRequest> mixed_requests(int count, uint64_t seed, bool shared_prefix) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prefix(40);
  for (auto& t : prefix) t = rng() % kVocab;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < count; ++i) {
    GenerationRequest q;
    if (shared_prefix && i % 2 == 0) q.prompt = prefix;
    int len = 1 + rng() % 70;
    for (int j = 0; j < len; ++j) q.prompt.push_back(rng() % kVocab);
    q.params.temperature = 0;
    q.params.max_tokens = 1 + rng() % 20;
    reqs.push_back(q);
  }
  return reqs;
}

TEST(Engine, GreedyMatchesUnpagedReferenceAlone) {
  FakePagedModel model(256, 4);
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 16, .max_num_seqs = 8, .max_model_len = 512};
  Engine engine(cfg, &model);
  auto reqs = mixed_requests(5, 1, false);
  for (const auto& q : reqs) {
    std::vector<int64_t> ids;
    RunResult r = run_all(engine, {q}, &ids);
    EXPECT_EQ(r.tokens[ids[0]][0], reference_greedy(q.prompt, q.params.max_tokens, -1));
    EXPECT_EQ(r.reasons[ids[0]], FinishReason::kLength);
  }
  EXPECT_EQ(engine.stats().num_free_blocks, 256);
}

// The step timer: model passes are timed apart from the rest of the step. A model that
// takes 3 ms per pass puts at least 3 ms per step into model_seconds, and the engine's own
// share (scheduling, sampling, events) is what is left of step_seconds.
class SlowModel : public ModelExecutor {
 public:
  explicit SlowModel(ModelExecutor* inner) : inner_(inner) {}
  int64_t vocab_size() const override { return inner_->vocab_size(); }
  int32_t block_size() const override { return inner_->block_size(); }
  int64_t num_blocks() const override { return inner_->num_blocks(); }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    std::this_thread::sleep_for(std::chrono::milliseconds(3));
    return inner_->execute(batch, logits);
  }

 private:
  ModelExecutor* inner_;
};

TEST(Engine, StepTimeIsSplitIntoModelAndHostWork) {
  FakePagedModel inner(256, 4);
  SlowModel model(&inner);
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 8, .max_model_len = 512};
  Engine engine(cfg, &model);
  EXPECT_EQ(engine.stats().step_seconds, 0.0);
  std::vector<int64_t> ids;
  run_all(engine, mixed_requests(4, 2, false), &ids);
  const EngineStats st = engine.stats();
  ASSERT_GT(st.steps, 0);
  EXPECT_GE(st.model_seconds, 0.003 * static_cast<double>(st.steps));
  EXPECT_GE(st.step_seconds, st.model_seconds);
}

// vllm:iteration_tokens_total: one observation per step that ran the model, whose sum is
// every token computed (without prefix hits or preemption: prompt + max_tokens - 1 each). A
// sequence's first-scheduled time is set once, carried on all its events, and a request that
// had to wait for a free slot is scheduled later than one that did not.
TEST(Engine, IterationTokensAndFirstScheduledTime) {
  FakePagedModel model(256, 4);
  EngineConfig cfg;
  cfg.enable_prefix_caching = false;
  cfg.scheduler = {.max_num_batched_tokens = 16, .max_num_seqs = 1, .max_model_len = 512};
  Engine engine(cfg, &model);
  auto reqs = mixed_requests(4, 3, false);
  int64_t computed = 0;
  for (const auto& q : reqs) computed += static_cast<int64_t>(q.prompt.size()) + q.params.max_tokens - 1;
  const auto before = std::chrono::steady_clock::now();
  std::vector<int64_t> ids;
  for (const auto& q : reqs) ids.push_back(*engine.add_request(q));
  std::map<int64_t, std::chrono::steady_clock::time_point> scheduled;
  int guard = 0;
  while (engine.has_work() && guard++ < 100000) {
    auto ev = engine.step();
    ASSERT_TRUE(ev.ok());
    for (const TokenEvent& e : *ev) {
      ASSERT_NE(e.first_scheduled, std::chrono::steady_clock::time_point{});
      auto [it, fresh] = scheduled.emplace(e.request_id, e.first_scheduled);
      if (!fresh) EXPECT_EQ(it->second, e.first_scheduled);
    }
  }
  const EngineStats st = engine.stats();
  EXPECT_EQ(st.iteration_tokens.count(), static_cast<uint64_t>(st.steps));
  EXPECT_EQ(st.iteration_tokens.sum(), static_cast<double>(computed));
  EXPECT_EQ(st.iteration_tokens.bounds(), kIterationTokenBuckets);
  ASSERT_EQ(scheduled.size(), reqs.size());
  EXPECT_GE(scheduled[ids[0]], before);
  // One running sequence at a time: each request starts after the one before it.
  for (size_t i = 1; i < ids.size(); ++i) EXPECT_GT(scheduled[ids[i]], scheduled[ids[i - 1]]);
  EXPECT_EQ(st.block_size, 4);
  EXPECT_FALSE(st.enable_prefix_caching);
  EXPECT_EQ(st.kv_dtype, "f32");
}

TEST(Engine, BatchInvarianceAcrossBudgetsPrefixCachingAndPreemption) {
  auto reqs = mixed_requests(32, 7, true);
  std::vector<std::vector<int32_t>> expect;
  for (const auto& q : reqs) expect.push_back(reference_greedy(q.prompt, q.params.max_tokens, -1));
  for (int64_t budget : {1, 7, 64, 4096}) {
    for (bool prefix : {true, false}) {
      for (int64_t blocks : {1000, 60}) {  // 60 blocks of 4 forces preemption with 32 requests
        FakePagedModel model(blocks, 4);
        EngineConfig cfg;
        cfg.enable_prefix_caching = prefix;
        cfg.scheduler = {.max_num_batched_tokens = budget, .max_num_seqs = 32, .max_model_len = 512};
        Engine engine(cfg, &model);
        std::vector<int64_t> ids;
        RunResult r = run_all(engine, reqs, &ids);
        for (size_t i = 0; i < reqs.size(); ++i)
          ASSERT_EQ(r.tokens[ids[i]][0], expect[i])
              << "budget " << budget << " prefix " << prefix << " blocks " << blocks << " req " << i;
        EngineStats st = engine.stats();
        EXPECT_EQ(st.num_free_blocks, blocks);
        EXPECT_EQ(st.num_running + st.num_waiting, 0);
        if (blocks == 60 && budget >= 64) EXPECT_GT(st.preemptions, 0);
        // With a small budget later requests arrive after the shared prefix is computed.
        if (prefix && blocks == 1000 && budget <= 64) EXPECT_GT(st.prefix_hits, 0);
      }
    }
  }
}

TEST(Engine, SeededSamplingIsIdenticalAloneAndInBatch) {
  auto reqs = mixed_requests(8, 3, false);
  for (size_t i = 0; i < reqs.size(); ++i) {
    reqs[i].params.temperature = 1.0f;
    reqs[i].params.top_p = 0.9f;
    reqs[i].params.seed = 1000 + i;
  }
  FakePagedModel m1(500, 4), m2(500, 4);
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 32, .max_num_seqs = 16, .max_model_len = 512};
  Engine alone(cfg, &m1), batch(cfg, &m2);
  std::vector<int64_t> batch_ids;
  RunResult rb = run_all(batch, reqs, &batch_ids);
  for (size_t i = 0; i < reqs.size(); ++i) {
    std::vector<int64_t> ids;
    RunResult ra = run_all(alone, {reqs[i]}, &ids);
    EXPECT_EQ(ra.tokens[ids[0]][0], rb.tokens[batch_ids[i]][0]) << i;
  }
}

TEST(Engine, NGreaterThanOneGivesDistinctSeededChoices) {
  FakePagedModel model(500, 4);
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 16, .max_model_len = 512};
  Engine engine(cfg, &model);
  GenerationRequest q;
  q.prompt = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  q.params.n = 4;
  q.params.temperature = 2.0f;
  q.params.max_tokens = 12;
  q.params.seed = 5;
  std::vector<int64_t> ids;
  RunResult r = run_all(engine, {q}, &ids);
  ASSERT_EQ(r.tokens[ids[0]].size(), 4u);
  int distinct = 0;
  for (int i = 1; i < 4; ++i) distinct += r.tokens[ids[0]][i] != r.tokens[ids[0]][0];
  EXPECT_GT(distinct, 0);
  // Choices 1..3 wait for choice 0's prompt and take its two full blocks from the prefix
  // cache: 9 prompt tokens computed once, then 1 (the last, whose logits are needed) per choice.
  EXPECT_EQ(engine.stats().prompt_tokens_computed, 9 + 3);
  EXPECT_EQ(engine.stats().prefix_hits, 3 * 8);  // in tokens
  EXPECT_EQ(engine.stats().prefix_queries, 4 * 9);
  EXPECT_EQ(engine.stats().num_free_blocks, 500);
}

TEST(Engine, StopsOnEosAndStopIdsAndAbortFreesBlocks) {
  FakePagedModel model(100, 4);
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 16, .max_model_len = 512};
  GenerationRequest q;
  q.prompt = {3, 1, 4, 1, 5};
  q.params.temperature = 0;
  q.params.max_tokens = 30;
  auto full = reference_greedy(q.prompt, 30, -1);
  cfg.eos_token_ids = {full[4]};
  Engine engine(cfg, &model);
  std::vector<int64_t> ids;
  RunResult r = run_all(engine, {q}, &ids);
  // Stops at the first occurrence of the eos token, which is included in the output.
  auto first = std::find(full.begin(), full.end(), full[4]) - full.begin();
  EXPECT_EQ(r.tokens[ids[0]][0], std::vector<int32_t>(full.begin(), full.begin() + first + 1));
  EXPECT_EQ(r.reasons[ids[0]], FinishReason::kStop);

  auto id = engine.add_request(q);
  ASSERT_TRUE(id.ok());
  ASSERT_TRUE(engine.step().ok());
  EXPECT_LT(engine.stats().num_free_blocks, 100);
  engine.abort(*id);
  auto ev = engine.step();
  ASSERT_TRUE(ev.ok());
  ASSERT_EQ(ev->size(), 1u);
  EXPECT_EQ((*ev)[0].finish_reason, FinishReason::kAbort);
  EXPECT_EQ(engine.stats().num_free_blocks, 100);
  EXPECT_FALSE(engine.has_work());
}

TEST(Engine, RejectsBadRequestsWithClearErrors) {
  FakePagedModel model(10, 4);
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 16, .max_model_len = 100};
  Engine engine(cfg, &model);
  GenerationRequest q;
  EXPECT_EQ(engine.add_request(q).status().code(), StatusCode::kInvalidArgument);
  q.prompt = {1, 999};
  EXPECT_NE(engine.add_request(q).status().message().find("outside the vocabulary"), std::string::npos);
  q.prompt = std::vector<int32_t>(95, 1);
  q.params.max_tokens = 10;
  EXPECT_NE(engine.add_request(q).status().message().find("maximum context length is 100"), std::string::npos);
  q.prompt = std::vector<int32_t>(50, 1);
  EXPECT_NE(engine.add_request(q).status().message().find("KV cache"), std::string::npos);  // 40 slots
  EXPECT_FALSE(engine.has_work());
}

}  // namespace
}  // namespace lancet
