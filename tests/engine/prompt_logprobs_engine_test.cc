// Prompt logprobs through the Engine, over a fake paged model whose logits depend on the whole
// context read back through the block tables: every prompt token's score equals the reference
// (score_prompt_token on the logits of the context before it), at any chunk budget, with the
// prompt already in the prefix cache (it is computed again: no hits), for choice 0 only with
// n > 1, and the sampled tokens do not change.
#include <gtest/gtest.h>

#include <map>

#include "engine/context_logits.h"
#include "engine/engine.h"
#include "engine/fake_paged_model.h"
#include "runner/prompt_logprobs.h"

namespace lancet {
namespace {

constexpr int64_t kVocab = 48;

using testing::context_logit;

std::vector<float> reference_row(const std::vector<int32_t>& ctx) {
  std::vector<float> row(kVocab);
  for (int32_t v = 0; v < kVocab; ++v) row[v] = context_logit(ctx, v);
  return row;
}

// Logits rows as the executor contract says: logits_offsets when given, else the last token.
class FakePagedModel : public ModelExecutor {
 public:
  FakePagedModel(int64_t blocks, int32_t bs) : blocks_(blocks), bs_(bs), cache_(blocks, bs) {}
  int64_t vocab_size() const override { return kVocab; }
  int32_t block_size() const override { return bs_; }
  int64_t num_blocks() const override { return blocks_; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    logits->clear();
    for (const SeqStepInput& in : batch) {
      RETURN_IF_ERROR(cache_.write(in));
      std::vector<int32_t> rows(in.logits_offsets.begin(), in.logits_offsets.end());
      if (rows.empty() && in.logits_rows() > 0) rows.push_back(static_cast<int32_t>(in.tokens.size()) - 1);
      for (int32_t off : rows) {
        const std::vector<float> row = reference_row(cache_.context(in, in.start_pos + off + 1));
        logits->insert(logits->end(), row.begin(), row.end());
      }
    }
    return OkStatus();
  }

 private:
  int64_t blocks_;
  int32_t bs_;
  testing::PagedTokenCache cache_;
};

struct Result {
  std::map<int32_t, std::vector<int32_t>> tokens;           // by choice
  std::map<int32_t, std::vector<PromptLogprob>> prompt_lp;  // by choice
  int32_t cached = 0;  // choice 0's
};

Result run(Engine& engine, const GenerationRequest& req) {
  auto id = engine.add_request(req);
  EXPECT_TRUE(id.ok()) << id.status().to_string();
  Result r;
  while (engine.has_work()) {
    auto events = engine.step();
    EXPECT_TRUE(events.ok());
    for (TokenEvent& ev : *events) {
      if (ev.token >= 0) r.tokens[ev.index].push_back(ev.token);
      if (!ev.prompt_logprobs.empty()) r.prompt_lp[ev.index] = ev.prompt_logprobs;
      if (ev.index == 0) r.cached = std::max(r.cached, ev.cached_prompt_tokens);
    }
  }
  return r;
}

TEST(PromptLogprobsEngine, EveryPromptTokenScoredAsTheReferenceAtAnyChunkSize) {
  std::vector<int32_t> prompt;
  for (int i = 0; i < 41; ++i) prompt.push_back((i * 7 + 3) % kVocab);
  GenerationRequest plain;
  plain.prompt = prompt;
  plain.params.temperature = 0;
  plain.params.max_tokens = 4;
  plain.params.n = 2;
  GenerationRequest scored = plain;
  scored.params.prompt_logprobs = 3;
  for (int64_t budget : {3, 8, 16, 64}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    FakePagedModel model(64, 4);
    EngineConfig cfg;
    cfg.scheduler = {.max_num_batched_tokens = budget, .max_num_seqs = 8, .max_model_len = 256};
    Engine engine(cfg, &model);
    const Result base = run(engine, plain);  // fills the prefix cache
    const Result again = run(engine, plain);
    EXPECT_GT(again.cached, 0) << "the plain prompt is served from the cache";
    const Result r = run(engine, scored);
    EXPECT_EQ(r.cached, 0) << "a scored prompt is computed again (choice 1 may take it from the cache)";
    EXPECT_EQ(r.tokens, base.tokens);
    ASSERT_EQ(r.prompt_lp.size(), 1u) << "only choice 0 carries the prompt logprobs";
    const std::vector<PromptLogprob>& lp = r.prompt_lp.at(0);
    ASSERT_EQ(lp.size(), prompt.size() - 1);
    for (size_t i = 0; i + 1 < prompt.size(); ++i) {
      const std::vector<int32_t> ctx(prompt.begin(), prompt.begin() + static_cast<std::ptrdiff_t>(i) + 1);
      const PromptLogprob want = score_prompt_token(reference_row(ctx), prompt[i + 1], 3);
      EXPECT_EQ(lp[i].token, prompt[i + 1]);
      EXPECT_FLOAT_EQ(lp[i].logprob, want.logprob) << "position " << i;
      EXPECT_EQ(lp[i].rank, want.rank);
      ASSERT_EQ(lp[i].top.size(), 3u);
      for (size_t k = 0; k < 3; ++k) EXPECT_EQ(lp[i].top[k].token, want.top[k].token);
    }
    EXPECT_EQ(engine.stats().num_free_blocks, engine.stats().num_blocks);
  }
}

// A one-token prompt has nothing to score; the request runs as usual.
TEST(PromptLogprobsEngine, OneTokenPromptHasNoEntries) {
  FakePagedModel model(16, 4);
  EngineConfig cfg;
  Engine engine(cfg, &model);
  GenerationRequest req;
  req.prompt = {5};
  req.params.temperature = 0;
  req.params.max_tokens = 3;
  req.params.prompt_logprobs = 0;
  const Result r = run(engine, req);
  EXPECT_EQ(r.tokens.at(0).size(), 3u);
  EXPECT_TRUE(r.prompt_lp.empty());
  req.params.prompt_logprobs = 21;
  EXPECT_FALSE(engine.add_request(req).ok()) << "prompt_logprobs past max_logprobs";
}

// Score functions: rank counts strictly higher logits; top ties go to the lower id.
TEST(PromptLogprobsEngine, ScoreOfOneRow) {
  const std::vector<float> row = {1.0f, 3.0f, 3.0f, 0.0f};
  const PromptLogprob p = score_prompt_token(row, 3, 2);
  const double z = std::log(std::exp(1.0) + 2 * std::exp(3.0) + 1.0);
  EXPECT_NEAR(p.logprob, -z, 1e-6);
  EXPECT_EQ(p.rank, 4);
  ASSERT_EQ(p.top.size(), 2u);
  EXPECT_EQ(p.top[0].token, 1);
  EXPECT_EQ(p.top[1].token, 2);
  EXPECT_EQ(score_prompt_token(row, 2, 0).rank, 1);
}

}  // namespace
}  // namespace lancet
