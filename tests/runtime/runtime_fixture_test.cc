// The engine on a real (tiny) model, tiny-llama32 from the HF fixtures: greedy output equals
// HF's golden continuations, and every request gives the same tokens alone or among 32
// concurrent requests of mixed lengths, with chunked prefill at budgets 1, 7, 64 and 4096,
// with prefix caching on and off, and after preemption. A shared 2000-token prefix is served
// from the prefix cache (asserted through the stats) with identical output.
#include <gtest/gtest.h>

#include <map>
#include <random>

#include "runtime/runtime.h"
#include "io/safetensors.h"
#include "test_paths.h"

namespace lancet {
namespace {

struct GoldenCase {
  std::vector<int32_t> prompt;
  std::vector<int32_t> greedy;
};

std::vector<GoldenCase> golden_cases(const std::string& fixture, int max_prompt) {
  auto f = SafetensorsFile::open(testing::fixture_dir(fixture) + "/golden.safetensors");
  EXPECT_TRUE(f.ok()) << f.status().to_string();
  std::vector<GoldenCase> out;
  for (int i = 0; i < 8; ++i) {
    const std::string c = "case" + std::to_string(i);
    const TensorView* ids = (*f)->find(c + ".input_ids");
    const TensorView* greedy = (*f)->find(c + ".greedy");
    if (!ids || !greedy || ids->numel() > max_prompt) continue;
    GoldenCase g;
    const int32_t* p = static_cast<const int32_t*>(ids->data);
    g.prompt.assign(p, p + ids->numel());
    const int32_t* q = static_cast<const int32_t*>(greedy->data);
    g.greedy.assign(q, q + greedy->numel());
    out.push_back(std::move(g));
  }
  return out;
}

RuntimeConfig fixture_config(const std::string& fixture) {
  RuntimeConfig rc;
  rc.model = testing::fixture_dir(fixture);
  rc.max_model_len = 4096;
  rc.max_num_seqs = 32;
  return rc;
}

// Runs all requests concurrently; returns each one's tokens.
std::vector<std::vector<int32_t>> run_batch(Runtime& rt, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) {
    auto s = rt.async_engine().submit(r);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  std::vector<std::vector<int32_t>> out(reqs.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    TokenEvent ev;
    while (streams[i]->next(&ev))
      if (ev.token >= 0) out[i].push_back(ev.token);
  }
  return out;
}

GenerationRequest greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;  // the goldens run a fixed number of steps
  return r;
}

TEST(RuntimeFixture, GreedyEqualsHfGoldenThroughTheEngine) {
  for (const char* fx : {"tiny-llama3", "tiny-llama32", "tiny-gqa8", "tiny-rope-linear", "tiny-rope-yarn"}) {
    auto rt = Runtime::create(fixture_config(fx));
    ASSERT_TRUE(rt.ok()) << rt.status().to_string();
    auto cases = golden_cases(fx, 400);
    ASSERT_GE(cases.size(), 4u);
    std::vector<GenerationRequest> reqs;
    for (const auto& c : cases) reqs.push_back(greedy_request(c.prompt, static_cast<int32_t>(c.greedy.size())));
    auto out = run_batch(**rt, reqs);
    for (size_t i = 0; i < cases.size(); ++i) EXPECT_EQ(out[i], cases[i].greedy) << fx << " case " << i;
  }
}

TEST(RuntimeFixture, BatchInvarianceAcrossBudgetsPrefixCachingAndPreemption) {
  const auto cases = golden_cases("tiny-llama32", 400);
  std::mt19937 rng(7);
  std::vector<int32_t> shared(48);
  for (auto& t : shared) t = 3 + rng() % 1000;
  std::vector<GenerationRequest> reqs;
  for (const auto& c : cases) reqs.push_back(greedy_request(c.prompt, static_cast<int32_t>(c.greedy.size())));
  while (reqs.size() < 32) {
    std::vector<int32_t> p = (reqs.size() % 3 == 0) ? shared : std::vector<int32_t>{};
    const int len = 1 + rng() % 120;
    for (int i = 0; i < len; ++i) p.push_back(3 + rng() % 1000);
    reqs.push_back(greedy_request(p, 4 + rng() % 12));
  }
  // Reference: each request alone.
  std::vector<std::vector<int32_t>> alone;
  {
    auto rt = Runtime::create(fixture_config("tiny-llama32"));
    ASSERT_TRUE(rt.ok());
    for (const auto& r : reqs) alone.push_back(run_batch(**rt, {r})[0]);
  }
  for (size_t i = 0; i < cases.size(); ++i) ASSERT_EQ(alone[i], cases[i].greedy);

  struct Setup {
    int64_t budget;
    bool prefix;
    int64_t kv_bytes;  // 0 = default; small forces preemption
  };
  // tiny-llama32 KV: 3 layers x 1 kv head x 64 dims x 2 (K,V) x 4 bytes = 1536 B/token.
  // With max_model_len 512: one full-length sequence and 8 blocks, far below the ~3000 tokens the
  // 32 requests hold at once.
  const int64_t small_kv = 1536 * (512 + 16 * 8);
  for (Setup s : {Setup{1, true, 0}, Setup{7, false, 0}, Setup{64, true, 0}, Setup{4096, false, 0},
                  Setup{4096, true, 0}, Setup{64, true, small_kv}}) {
    RuntimeConfig rc = fixture_config("tiny-llama32");
    rc.max_num_batched_tokens = s.budget;
    rc.enable_prefix_caching = s.prefix;
    rc.kv_cache_memory = s.kv_bytes;
    if (s.kv_bytes) rc.max_model_len = 512;
    auto rt = Runtime::create(rc);
    ASSERT_TRUE(rt.ok()) << rt.status().to_string();
    auto out = run_batch(**rt, reqs);
    for (size_t i = 0; i < reqs.size(); ++i)
      ASSERT_EQ(out[i], alone[i]) << "budget " << s.budget << " prefix " << s.prefix << " kv " << s.kv_bytes
                                  << " request " << i;
    EngineStats st = (*rt)->async_engine().stats();
    EXPECT_EQ(st.num_free_blocks, st.num_blocks);
    if (s.kv_bytes) EXPECT_GT(st.preemptions, 0) << "the small cache should have forced preemption";
    if (s.prefix && s.budget <= 64) EXPECT_GT(st.prefix_hits, 0);
  }
}

TEST(RuntimeFixture, SharedPrefixIsComputedOnceAndGivesIdenticalOutput) {
  auto rt = Runtime::create(fixture_config("tiny-llama32"));
  ASSERT_TRUE(rt.ok());
  std::mt19937 rng(3);
  std::vector<int32_t> prefix(2000);
  for (auto& t : prefix) t = 3 + rng() % 1000;
  std::vector<int32_t> a = prefix, b = prefix;
  for (int i = 0; i < 5; ++i) {
    a.push_back(3 + rng() % 1000);
    b.push_back(3 + rng() % 1000);
  }
  AsyncEngine& engine = (*rt)->async_engine();
  auto out_a = run_batch(**rt, {greedy_request(a, 8)})[0];
  const EngineStats before = engine.stats();
  auto out_b = run_batch(**rt, {greedy_request(b, 8)})[0];
  const EngineStats after = engine.stats();
  // 2000 shared tokens = 125 full blocks of 16; only b's 5 new tokens are computed.
  EXPECT_EQ(after.prompt_tokens_computed - before.prompt_tokens_computed, 5);
  EXPECT_EQ(after.prefix_hits - before.prefix_hits, 2000);  // tokens, as vLLM counts them
  EXPECT_EQ(after.prefix_queries - before.prefix_queries, 2005);
  // Same output as a cache-less engine.
  RuntimeConfig rc = fixture_config("tiny-llama32");
  rc.enable_prefix_caching = false;
  auto cold = Runtime::create(rc);
  ASSERT_TRUE(cold.ok());
  EXPECT_EQ(run_batch(**cold, {greedy_request(b, 8)})[0], out_b);
  EXPECT_EQ(out_a.size(), 8u);
}

TEST(RuntimeFixture, BadRequestsAreErrorsAndTheEngineKeepsServing) {
  auto rt = Runtime::create(fixture_config("tiny-llama32"));
  ASSERT_TRUE(rt.ok());
  auto too_long = greedy_request(std::vector<int32_t>(4000, 5), 200);
  auto s = (*rt)->async_engine().submit(too_long);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.status().message().find("maximum context length is 4096"), std::string::npos);
  auto bad_id = greedy_request({1, 5000}, 4);
  EXPECT_FALSE((*rt)->async_engine().submit(bad_id).ok());
  auto ok = run_batch(**rt, {greedy_request({1, 2, 3}, 4)});
  EXPECT_EQ(ok[0].size(), 4u);
}

}  // namespace
}  // namespace lancet
