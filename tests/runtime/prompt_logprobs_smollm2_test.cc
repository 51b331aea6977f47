// Prompt logprobs on the real default model (SmolLM2 Q4_1): the logprob the engine reports for
// a prompt token equals the one it reported when it generated that token (decode path, one
// token a step), within 1e-4, whatever the prefill chunk size and whether or not the prompt's
// blocks are already in the prefix cache (the prompt is then computed again).
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/runtime.h"
#include "test_paths.h"

namespace lancet {
namespace {

struct Outcome {
  std::vector<int32_t> tokens;
  std::vector<float> logprobs;
  std::vector<PromptLogprob> prompt;
  int32_t cached = 0;
};

Outcome run_one(Runtime& rt, const GenerationRequest& req) {
  auto s = rt.async_engine().submit(req);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  Outcome out;
  if (!s.ok()) return out;
  TokenEvent ev;
  while ((*s)->next(&ev)) {
    if (!ev.prompt_logprobs.empty()) out.prompt = ev.prompt_logprobs;
    out.cached = std::max(out.cached, ev.cached_prompt_tokens);
    if (ev.token < 0) continue;
    out.tokens.push_back(ev.token);
    out.logprobs.push_back(ev.logprob);
  }
  return out;
}

std::unique_ptr<Runtime> make(int64_t chunk) {
  RuntimeConfig rc;
  rc.model = testing::default_model();
  rc.max_model_len = 512;
  rc.enable_prefix_caching = true;
  rc.long_prefill_token_threshold = chunk;
  rc.num_threads = 2;
  auto rt = Runtime::create(rc);
  EXPECT_TRUE(rt.ok()) << rt.status().to_string();
  return rt.ok() ? std::move(*rt) : nullptr;
}

TEST(PromptLogprobsSmolLM2, EqualTheLogprobsOfGeneratingTheSameTokens) {
  ASSERT_FALSE(testing::default_model().empty()) << "default model missing: run tools/fetch_model.sh";
  for (int64_t chunk : {0, 5}) {
    SCOPED_TRACE("prefill chunk " + std::to_string(chunk));
    auto rt = make(chunk);
    ASSERT_NE(rt, nullptr);
    auto ids = rt->encode_prompt("The history of the city of Paris begins");
    ASSERT_TRUE(ids.ok());
    GenerationRequest gen;
    gen.prompt = *ids;
    gen.params.temperature = 0;
    gen.params.max_tokens = 20;
    gen.params.ignore_eos = true;
    gen.params.logprobs = 0;
    const Outcome g = run_one(*rt, gen);
    ASSERT_EQ(g.tokens.size(), 20u);

    GenerationRequest scored;
    scored.prompt = *ids;
    scored.prompt.insert(scored.prompt.end(), g.tokens.begin(), g.tokens.end());
    scored.params.temperature = 0;
    scored.params.max_tokens = 1;
    scored.params.prompt_logprobs = 3;
    // Twice: the second time the prompt's blocks are in the prefix cache, and are not used.
    for (int pass = 0; pass < 2; ++pass) {
      const Outcome s = run_one(*rt, scored);
      ASSERT_EQ(s.prompt.size(), scored.prompt.size() - 1);
      EXPECT_EQ(s.cached, 0);
      const size_t base = ids->size() - 1;  // entry of the first generated token
      for (size_t j = 0; j < g.tokens.size(); ++j) {
        const PromptLogprob& p = s.prompt[base + j];
        EXPECT_EQ(p.token, g.tokens[j]);
        EXPECT_NEAR(p.logprob, g.logprobs[j], 1e-4) << "token " << j;
        EXPECT_EQ(p.rank, 1) << "greedy tokens are the most likely";
        ASSERT_EQ(p.top.size(), 3u);
        EXPECT_EQ(p.top[0].token, g.tokens[j]);
        EXPECT_GE(p.top[0].logprob, p.top[1].logprob);
      }
      for (size_t i = 0; i < s.prompt.size(); ++i) {
        EXPECT_EQ(s.prompt[i].token, scored.prompt[i + 1]);
        EXPECT_LE(s.prompt[i].logprob, 0.0f);
        EXPECT_GE(s.prompt[i].rank, 1);
        if (s.prompt[i].rank == 1) EXPECT_EQ(s.prompt[i].top[0].token, s.prompt[i].token);
        else EXPECT_LE(s.prompt[i].logprob, s.prompt[i].top[0].logprob);
      }
      // The sampled token after the prompt is what greedy decoding of the same context gives.
      EXPECT_EQ(s.tokens.size(), 1u);
    }
  }
}

}  // namespace
}  // namespace lancet
