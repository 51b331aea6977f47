// Speculative decoding through the engine over fake paged models whose logits depend on the
// context read back through the block tables (so a rollback that left rejected drafts in the
// KV, a wrong num_computed or a stale prefix-cache block changes the output). Greedy and
// seeded outputs must be token-for-token those of non-speculative decoding, with n-gram
// drafts, a different draft model and the target as its own draft, at any token budget, with
// prefix caching on and off, and under preemption; stops inside an accepted run end it at the
// right token; every block comes back.
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <map>
#include <random>

#include "engine/engine_run_util.h"
#include "engine/fake_paged_model.h"

namespace lancet {
namespace {

constexpr int64_t kVocab = 8;

float logit(const std::vector<int32_t>& ctx, int32_t v, uint64_t salt) {
  return testing::looping_logit(ctx, v, salt, 6.0f);
}

class FakeModel : public ModelExecutor {
 public:
  FakeModel(int64_t blocks, int32_t bs, uint64_t salt = 0, int perturb_every = 0)
      : blocks_(blocks), bs_(bs), salt_(salt), perturb_(perturb_every), cache_(blocks, bs) {}
  int64_t vocab_size() const override { return kVocab; }
  int32_t block_size() const override { return bs_; }
  int64_t num_blocks() const override { return blocks_; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    logits->clear();
    for (const SeqStepInput& in : batch) {
      RETURN_IF_ERROR(cache_.write(in));
      const int64_t end = in.start_pos + static_cast<int64_t>(in.tokens.size());
      for (int64_t r = in.logits_rows(); r > 0; --r) {
        const std::vector<int32_t> ctx = cache_.context(in, end - r + 1);
        for (int32_t v = 0; v < kVocab; ++v) {
          float x = logit(ctx, v, 0);
          // A draft that disagrees with the target now and then.
          if (perturb_ && (ctx.size() + static_cast<size_t>(salt_)) % perturb_ == 0) x = logit(ctx, v, salt_);
          logits->push_back(x);
        }
      }
    }
    calls_++;
    return OkStatus();
  }
  int64_t calls() const { return calls_; }

 private:
  int64_t blocks_;
  int32_t bs_;
  uint64_t salt_;
  int perturb_;
  testing::PagedTokenCache cache_;
  int64_t calls_ = 0;
};

struct RunResult {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<FinishReason> reasons;
  EngineStats stats;
};

RunResult run_all(Engine& engine, const std::vector<GenerationRequest>& reqs) {
  RunResult r;
  std::map<int64_t, size_t> index;
  for (const auto& q : reqs) {
    auto id = engine.add_request(q);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    index[*id] = index.size();
  }
  r.tokens.resize(reqs.size());
  r.reasons.resize(reqs.size(), FinishReason::kNone);
  int guard = 0;
  while (engine.has_work() && guard++ < 100000) {
    auto ev = engine.step();
    EXPECT_TRUE(ev.ok());
    for (const auto& e : *ev) {
      const size_t i = index.at(e.request_id);
      if (e.token >= 0) r.tokens[i].push_back(e.token);
      if (e.finished) r.reasons[i] = e.finish_reason;
    }
  }
  r.stats = engine.stats();
  return r;
}

std::vector<GenerationRequest> requests(int count, uint64_t seed, float temperature) {
  std::mt19937 rng(seed);
  std::vector<int32_t> prefix(24);
  for (auto& t : prefix) t = rng() % kVocab;
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < count; ++i) {
    GenerationRequest q;
    if (i % 3 == 0) q.prompt = prefix;
    const int len = 1 + rng() % 40;
    for (int j = 0; j < len; ++j) q.prompt.push_back(rng() % kVocab);
    q.params.temperature = temperature;
    q.params.seed = 100 + i;
    q.params.max_tokens = 10 + rng() % 50;
    reqs.push_back(q);
  }
  return reqs;
}

SpeculativeConfig ngram(int k) {
  SpeculativeConfig c;
  c.method = SpecMethod::kNgram;
  c.num_speculative_tokens = k;
  c.prompt_lookup_min = 1;
  c.prompt_lookup_max = 3;
  c.adaptive = false;  // fake timings mean nothing: always speculate
  return c;
}

SpeculativeConfig draft(int k) {
  SpeculativeConfig c;
  c.method = SpecMethod::kDraft;
  c.model = "fake";
  c.num_speculative_tokens = k;
  c.adaptive = false;
  return c;
}

RunResult run(const std::vector<GenerationRequest>& reqs, int64_t budget, bool prefix, int64_t blocks,
              const SpeculativeConfig& spec, int draft_kind) {
  FakeModel target(blocks, 4);
  // draft_kind 1: a different model (disagrees at every 3rd position); 2: the target itself.
  FakeModel other(blocks + 64, 4, /*salt=*/7, /*perturb_every=*/3);
  FakeModel self(blocks + 64, 4);
  EngineConfig cfg;
  cfg.enable_prefix_caching = prefix;
  cfg.scheduler = {.max_num_batched_tokens = budget, .max_num_seqs = 32, .max_model_len = 512};
  cfg.speculative = spec;
  Engine engine(cfg, &target, draft_kind == 1 ? &other : draft_kind == 2 ? &self : nullptr);
  RunResult r = run_all(engine, reqs);
  EXPECT_EQ(r.stats.num_free_blocks, blocks);
  EXPECT_EQ(r.stats.num_running + r.stats.num_waiting, 0);
  return r;
}

TEST(SpeculativeEngine, GreedyOutputIsIdenticalToNonSpeculative) {
  const auto reqs = requests(24, 5, 0.0f);
  const RunResult ref = run(reqs, 4096, true, 1000, SpeculativeConfig{}, 0);
  struct Setup {
    int64_t budget;
    bool prefix;
    int64_t blocks;  // 70 blocks of 4 forces preemption
  };
  for (Setup s : {Setup{4096, true, 1000}, Setup{9, false, 1000}, Setup{64, true, 70}}) {
    for (int kind : {0, 1, 2}) {
      const SpeculativeConfig spec = kind == 0 ? ngram(4) : draft(3);
      const RunResult r = run(reqs, s.budget, s.prefix, s.blocks, spec, kind);
      const std::string what = "budget " + std::to_string(s.budget) + " prefix " + std::to_string(s.prefix) +
                               " blocks " + std::to_string(s.blocks) + " drafts " + std::to_string(kind);
      for (size_t i = 0; i < reqs.size(); ++i) {
        ASSERT_EQ(r.tokens[i], ref.tokens[i]) << what << " request " << i;
        EXPECT_EQ(r.reasons[i], FinishReason::kLength);
      }
      EXPECT_GT(r.stats.spec_draft_tokens, 0) << what;
      EXPECT_GT(r.stats.spec_accepted_tokens, 0) << what;
      if (kind == 2) EXPECT_EQ(r.stats.spec_accepted_tokens, r.stats.spec_draft_tokens) << what;
      if (kind == 1) EXPECT_LT(r.stats.spec_accepted_tokens, r.stats.spec_draft_tokens) << what;
      if (s.blocks == 70) EXPECT_GT(r.stats.preemptions, 0) << what;
      // Fewer target passes than tokens: speculation did something.
      if (kind == 2 && s.budget == 4096) EXPECT_LT(r.stats.steps, ref.stats.steps) << what;
    }
  }
}

TEST(SpeculativeEngine, SeededSamplingWithNgramDraftsIsIdentical) {
  const auto reqs = requests(12, 9, 1.0f);
  const RunResult ref = run(reqs, 4096, true, 1000, SpeculativeConfig{}, 0);
  const RunResult r = run(reqs, 4096, true, 1000, ngram(4), 0);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(r.tokens[i], ref.tokens[i]) << i;
  EXPECT_GT(r.stats.spec_accepted_tokens, 0);
}

TEST(SpeculativeEngine, SampledDraftModelRunsToLengthAndCountsAcceptance) {
  auto reqs = requests(8, 11, 0.8f);
  const RunResult r = run(reqs, 4096, true, 1000, draft(3), 1);
  for (size_t i = 0; i < reqs.size(); ++i) {
    EXPECT_EQ(static_cast<int32_t>(r.tokens[i].size()), reqs[i].params.max_tokens);
    EXPECT_EQ(r.reasons[i], FinishReason::kLength);
  }
  EXPECT_GT(r.stats.spec_accepted_tokens, 0);
  EXPECT_LT(r.stats.spec_accepted_tokens, r.stats.spec_draft_tokens);
  int64_t per_pos = 0;
  for (int64_t c : r.stats.spec_accepted_per_pos) per_pos += c;
  EXPECT_EQ(per_pos, r.stats.spec_accepted_tokens);
}

TEST(SpeculativeEngine, StopsInsideAnAcceptedRunEndAtTheRightToken) {
  // With the target as its own draft every draft is accepted: each step yields k + 1 = 5
  // tokens (output 0 from the prompt pass, then 1-5, 6-10, ...), so stops at outputs 3 and 7
  // fall inside runs.
  GenerationRequest base;
  base.prompt = {1, 2, 3, 4, 5, 6, 7};
  base.params.temperature = 0;
  base.params.max_tokens = 40;
  const RunResult full = run({base}, 4096, true, 200, SpeculativeConfig{}, 0);
  const std::vector<int32_t>& out = full.tokens[0];
  ASSERT_EQ(out.size(), 40u);
  const auto first_of = [&](int32_t t) { return std::find(out.begin(), out.end(), t) - out.begin(); };

  std::vector<GenerationRequest> reqs;
  GenerationRequest stop_id = base;
  stop_id.params.stop_token_ids = {out[7]};
  reqs.push_back(stop_id);
  GenerationRequest max_tokens = base;
  max_tokens.params.max_tokens = 8;
  reqs.push_back(max_tokens);
  GenerationRequest min_tokens = base;  // the stop id is ignored before min_tokens outputs
  min_tokens.params.stop_token_ids = {out[3]};
  min_tokens.params.min_tokens = static_cast<int32_t>(first_of(out[3])) + 2;
  reqs.push_back(min_tokens);
  for (const SpeculativeConfig& spec : {draft(4), ngram(4)}) {
    const RunResult ref = run(reqs, 4096, true, 200, SpeculativeConfig{}, 0);
    const RunResult r = run(reqs, 4096, true, 200, spec, spec.method == SpecMethod::kDraft ? 2 : 0);
    for (size_t i = 0; i < reqs.size(); ++i) {
      EXPECT_EQ(r.tokens[i], ref.tokens[i]) << i;
      EXPECT_EQ(r.reasons[i], ref.reasons[i]) << i;
    }
    EXPECT_EQ(r.tokens[0].size(), static_cast<size_t>(first_of(out[7]) + 1));
    EXPECT_EQ(r.reasons[0], FinishReason::kStop);
    EXPECT_EQ(r.tokens[1].size(), 8u);
    EXPECT_EQ(r.reasons[1], FinishReason::kLength);
    EXPECT_GT(r.tokens[2].size(), static_cast<size_t>(min_tokens.params.min_tokens) - 1);
  }
  // EOS (the model's end token) inside a run.
  FakeModel target(200, 4), self(264, 4);
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 4096, .max_num_seqs = 8, .max_model_len = 512};
  cfg.eos_token_ids = {out[7]};
  cfg.speculative = draft(4);
  Engine engine(cfg, &target, &self);
  const RunResult r = run_all(engine, {base});
  EXPECT_EQ(r.tokens[0], std::vector<int32_t>(out.begin(), out.begin() + first_of(out[7]) + 1));
  EXPECT_EQ(r.reasons[0], FinishReason::kStop);
  EXPECT_EQ(r.stats.num_free_blocks, 200);
}

TEST(SpeculativeEngine, RejectedDraftsLeaveNoPrefixCacheEntries) {
  // After a speculative run, a request whose prompt is the first one's prompt plus output is
  // served from the prefix cache and continues exactly as a cold engine does: the cached
  // blocks hold the accepted tokens' KV only.
  GenerationRequest a;
  a.prompt = {3, 1, 4, 1, 5, 2, 6};
  a.params.temperature = 0;
  a.params.max_tokens = 37;
  FakeModel target(300, 4), other(364, 4, 7, 3);
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 4096, .max_num_seqs = 8, .max_model_len = 512};
  cfg.speculative = draft(4);
  Engine engine(cfg, &target, &other);
  const RunResult ra = run_all(engine, {a});
  GenerationRequest b = a;
  b.prompt.insert(b.prompt.end(), ra.tokens[0].begin(), ra.tokens[0].end());
  b.params.max_tokens = 12;
  const EngineStats before = engine.stats();
  const RunResult rb = run_all(engine, {b});
  EXPECT_GT(rb.stats.prefix_hits - before.prefix_hits, 8);
  const RunResult cold = run({b}, 4096, false, 300, SpeculativeConfig{}, 0);
  EXPECT_EQ(rb.tokens[0], cold.tokens[0]);
}

}  // namespace
}  // namespace lancet
