// Embedding requests through the Engine, over a fake paged model whose logits and hidden states
// depend on the whole context read back through the block tables: an embedding is the pooled
// hidden state of the prompt's last position at any chunk budget, also in steps shared with
// generating requests (whose tokens do not change), and its blocks come back.
#include <gtest/gtest.h>

#include <cmath>
#include <map>

#include "engine/engine.h"
#include "runner/pooling.h"

namespace lancet {
namespace {

constexpr int64_t kVocab = 32;
constexpr int64_t kHidden = 6;

std::vector<float> hidden_of(const std::vector<int32_t>& ctx) {
  std::vector<float> h(kHidden);
  for (size_t p = 0; p < ctx.size(); ++p)
    for (int64_t d = 0; d < kHidden; ++d) h[d] += std::sin(static_cast<float>((ctx[p] + 1) * (d + 1) + p));
  return h;
}

float logit_of(const std::vector<int32_t>& ctx, int32_t v) {
  const std::vector<float> h = hidden_of(ctx);
  return h[v % kHidden] * static_cast<float>(v % 5 + 1);
}

class FakeHiddenModel : public ModelExecutor {
 public:
  FakeHiddenModel() : cache_(64 * 4, -1) {}
  int64_t vocab_size() const override { return kVocab; }
  int32_t block_size() const override { return 4; }
  int64_t num_blocks() const override { return 64; }
  int64_t hidden_size() const override { return kHidden; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    std::vector<float> unused;
    return run(batch, logits, &unused);
  }
  Status execute_hidden(std::span<const SeqStepInput> batch, std::vector<float>* logits,
                        std::vector<float>* hidden) override {
    ++hidden_steps;
    return run(batch, logits, hidden);
  }
  int hidden_steps = 0;

 private:
  Status run(std::span<const SeqStepInput> batch, std::vector<float>* logits, std::vector<float>* hidden) {
    logits->clear();
    hidden->clear();
    for (const SeqStepInput& in : batch) {
      for (size_t j = 0; j < in.tokens.size(); ++j) {
        const int64_t p = in.start_pos + static_cast<int64_t>(j);
        cache_[in.block_table[p / 4] * 4 + p % 4] = in.tokens[j];
      }
      if (in.logits_rows() == 0) continue;
      std::vector<int32_t> ctx(static_cast<size_t>(in.start_pos) + in.tokens.size());
      for (int64_t p = 0; p < static_cast<int64_t>(ctx.size()); ++p) ctx[p] = cache_[in.block_table[p / 4] * 4 + p % 4];
      for (int32_t v = 0; v < kVocab; ++v) logits->push_back(logit_of(ctx, v));
      if (in.want_hidden) {
        const std::vector<float> h = hidden_of(ctx);
        hidden->insert(hidden->end(), h.begin(), h.end());
      }
    }
    return OkStatus();
  }
  std::vector<int32_t> cache_;
};

std::vector<int32_t> prompt_of(int seed, int len) {
  std::vector<int32_t> p;
  for (int i = 0; i < len; ++i) p.push_back((seed * 13 + i * 7) % kVocab);
  return p;
}

TEST(EmbeddingEngine, PooledLastHiddenStateInMixedStepsAtAnyBudget) {
  for (int64_t budget : {3, 7, 64}) {
    SCOPED_TRACE("budget " + std::to_string(budget));
    FakeHiddenModel model;
    EngineConfig cfg;
    cfg.scheduler = {.max_num_batched_tokens = budget, .max_num_seqs = 8, .max_model_len = 64};
    Engine engine(cfg, &model);
    GenerationRequest gen;
    gen.prompt = prompt_of(1, 9);
    gen.params.temperature = 0;
    gen.params.max_tokens = 6;
    gen.params.ignore_eos = true;
    std::map<int64_t, int> which;  // request id -> input (-1: the generation)
    auto gid = engine.add_request(gen);
    ASSERT_TRUE(gid.ok());
    which[*gid] = -1;
    std::vector<std::vector<int32_t>> inputs = {prompt_of(2, 11), prompt_of(3, 1), prompt_of(4, 17)};
    for (size_t i = 0; i < inputs.size(); ++i) {
      GenerationRequest e;
      e.prompt = inputs[i];
      e.embed = true;
      auto id = engine.add_request(e);
      ASSERT_TRUE(id.ok()) << id.status().to_string();
      which[*id] = static_cast<int>(i);
    }
    std::vector<int32_t> tokens;
    std::map<int, std::vector<float>> embeddings;
    while (engine.has_work()) {
      auto events = engine.step();
      ASSERT_TRUE(events.ok());
      for (TokenEvent& ev : *events) {
        const int w = which.at(ev.request_id);
        if (w < 0) {
          if (ev.token >= 0) tokens.push_back(ev.token);
          continue;
        }
        EXPECT_EQ(ev.token, -1) << "an embedding request generates nothing";
        EXPECT_TRUE(ev.finished);
        EXPECT_EQ(ev.finish_reason, FinishReason::kStop);
        EXPECT_EQ(ev.prompt_tokens, static_cast<int32_t>(inputs[w].size()));
        embeddings[w] = ev.embedding;
      }
    }
    ASSERT_EQ(embeddings.size(), inputs.size());
    for (size_t i = 0; i < inputs.size(); ++i) EXPECT_EQ(embeddings[static_cast<int>(i)], pool_last_token(hidden_of(inputs[i])));
    // The generation, alone in a fresh engine, gives the same tokens.
    FakeHiddenModel alone_model;
    Engine alone(cfg, &alone_model);
    ASSERT_TRUE(alone.add_request(gen).ok());
    std::vector<int32_t> alone_tokens;
    while (alone.has_work()) {
      auto events = alone.step();
      ASSERT_TRUE(events.ok());
      for (const TokenEvent& ev : *events)
        if (ev.token >= 0) alone_tokens.push_back(ev.token);
    }
    EXPECT_EQ(tokens, alone_tokens);
    EXPECT_EQ(alone_model.hidden_steps, 0) << "steps without embeddings use the plain output kind";
    EXPECT_GT(model.hidden_steps, 0);
    EXPECT_EQ(engine.stats().num_free_blocks, engine.stats().num_blocks);
  }
}

TEST(EmbeddingEngine, BadEmbeddingRequestsAreRefused) {
  FakeHiddenModel model;
  EngineConfig cfg;
  cfg.scheduler.max_model_len = 16;
  Engine engine(cfg, &model);
  GenerationRequest e;
  e.embed = true;
  e.prompt = prompt_of(1, 16);  // the whole context: nothing is generated
  EXPECT_TRUE(engine.add_request(e).ok());
  e.prompt = prompt_of(1, 17);
  EXPECT_EQ(engine.add_request(e).status().code(), StatusCode::kOutOfRange);
  e.prompt = prompt_of(1, 4);
  e.params.n = 2;
  EXPECT_EQ(engine.add_request(e).status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace lancet
