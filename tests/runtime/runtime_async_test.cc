// Asynchronous scheduling (--async-scheduling) through the whole runtime on the CPU backend,
// against synchronous steps: the HF fixtures' greedy continuations, 64 concurrent requests
// under chunked prefill, prefix caching on and off and preemption; and on the default model
// (SmolLM2 Q4_1): greedy alone and among 64 concurrent requests, seeded sampling with n > 1,
// stop strings and max_tokens ending at the same text, and an abort mid-stream that gives
// every block back.
#include <gtest/gtest.h>

#include <cstdlib>
#include <map>
#include <random>

#include "io/safetensors.h"
#include "runtime/runtime.h"
#include "test_paths.h"

namespace lancet {
namespace {

struct Output {
  std::vector<std::vector<int32_t>> tokens;  // per choice
  std::vector<std::string> text;             // per choice
  std::vector<FinishReason> reasons;         // per choice
  bool operator==(const Output&) const = default;
};

std::vector<Output> run_batch(Runtime& rt, const std::vector<GenerationRequest>& reqs) {
  auto streams = rt.async_engine().submit_all(reqs);
  std::vector<Output> out(reqs.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_TRUE(streams[i].ok()) << streams[i].status().to_string();
    if (!streams[i].ok()) continue;
    const size_t n = static_cast<size_t>(reqs[i].params.n);
    out[i].tokens.resize(n);
    out[i].text.resize(n);
    out[i].reasons.assign(n, FinishReason::kNone);
    TokenEvent ev;
    while ((*streams[i])->next(&ev)) {
      if (ev.token >= 0) out[i].tokens[ev.index].push_back(ev.token);
      out[i].text[ev.index] += ev.text;
      if (ev.finished) out[i].reasons[ev.index] = ev.finish_reason;
    }
  }
  return out;
}

GenerationRequest greedy_request(std::vector<int32_t> prompt, int32_t max_tokens) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = max_tokens;
  r.params.ignore_eos = true;
  return r;
}

// LANCET_ASYNC_TEST_BACKEND=cuda runs these on the GPU (exact activation precision and an f32
// KV cache, so that greedy continuations follow the f32 references there too and the KV budget
// that forces preemption below holds as many tokens as on the CPU).
std::unique_ptr<Runtime> make(RuntimeConfig rc, bool async) {
  rc.async_scheduling = async;
  if (const char* b = std::getenv("LANCET_ASYNC_TEST_BACKEND")) {
    rc.backend = b;
    if (rc.backend == "cuda") {
      rc.activation_precision = "exact";
      rc.kv_cache_dtype = "float32";
    }
  }
  auto rt = Runtime::create(rc);
  EXPECT_TRUE(rt.ok()) << rt.status().to_string();
  return rt.ok() ? std::move(*rt) : nullptr;
}

RuntimeConfig fixture_config(const std::string& fixture) {
  RuntimeConfig rc;
  rc.model = testing::fixture_dir(fixture);
  rc.max_model_len = 4096;
  rc.max_num_seqs = 64;
  return rc;
}

void expect_async_and_clean(Runtime& rt, const std::string& what) {
  const EngineStats st = rt.async_engine().stats();
  EXPECT_GT(st.async_steps, 0) << what;
  EXPECT_EQ(st.async_steps, st.steps) << what;
  EXPECT_EQ(st.num_free_blocks, st.num_blocks) << what;
}

TEST(RuntimeAsync, FixturesGreedyEqualsHfGolden) {
  for (const char* fx : {"tiny-llama3", "tiny-llama32", "tiny-gqa8", "tiny-rope-linear", "tiny-rope-yarn"}) {
    auto f = SafetensorsFile::open(testing::fixture_dir(fx) + "/golden.safetensors");
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    std::vector<GenerationRequest> reqs;
    std::vector<std::vector<int32_t>> golden;
    for (int i = 0; i < 8; ++i) {
      const TensorView* ids = (*f)->find("case" + std::to_string(i) + ".input_ids");
      const TensorView* greedy = (*f)->find("case" + std::to_string(i) + ".greedy");
      if (!ids || !greedy || ids->numel() > 400) continue;
      const int32_t* p = static_cast<const int32_t*>(ids->data);
      const int32_t* g = static_cast<const int32_t*>(greedy->data);
      golden.emplace_back(g, g + greedy->numel());
      reqs.push_back(greedy_request(std::vector<int32_t>(p, p + ids->numel()), static_cast<int32_t>(greedy->numel())));
    }
    ASSERT_GE(reqs.size(), 4u);
    auto rt = make(fixture_config(fx), true);
    ASSERT_TRUE(rt);
    const auto out = run_batch(*rt, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(out[i].tokens[0], golden[i]) << fx << " case " << i;
    expect_async_and_clean(*rt, fx);
    // Every step is on the device timeline; those launched behind a step in flight (all but
    // the first of the batch, at least) have a gap each.
    const DeviceTimelineStats tl = rt->take_device_timeline();
    EXPECT_EQ(tl.steps, rt->async_engine().stats().async_steps) << fx;
    EXPECT_GT(tl.gaps, 0) << fx;
    EXPECT_LT(tl.gaps, tl.steps) << fx;
    EXPECT_EQ(tl.gap_samples.size(), static_cast<size_t>(tl.gaps)) << fx;
    EXPECT_GT(tl.busy_seconds, 0.0) << fx;
    EXPECT_LE(tl.max_gap_seconds, tl.gap_seconds) << fx;
    // Prompts of several tokens and then decodes: both kinds, adding up to the whole.
    EXPECT_GT(tl.prompt.steps, 0) << fx;
    EXPECT_GT(tl.decode.steps, 0) << fx;
    EXPECT_EQ(tl.prompt.steps + tl.decode.steps, tl.steps) << fx;
    EXPECT_EQ(tl.prompt.gaps + tl.decode.gaps, tl.gaps) << fx;
    EXPECT_EQ(rt->take_device_timeline().steps, 0) << fx;  // taken: starts over
  }
}

// 64 concurrent requests on tiny-llama32 (a third share a 48-token prefix): each gives the
// tokens it gives alone in synchronous steps, whatever the chunk budget, prefix caching and
// preemption.
TEST(RuntimeAsync, FixtureBatchInvarianceUnderChunkingCachingAndPreemption) {
  std::mt19937 rng(19);
  std::vector<int32_t> shared(48);
  for (auto& t : shared) t = 3 + static_cast<int32_t>(rng() % 1000);
  std::vector<GenerationRequest> reqs;
  while (reqs.size() < 64) {
    std::vector<int32_t> p = reqs.size() % 3 == 0 ? shared : std::vector<int32_t>{};
    const int len = 1 + static_cast<int>(rng() % 100);
    for (int i = 0; i < len; ++i) p.push_back(3 + static_cast<int32_t>(rng() % 1000));
    reqs.push_back(greedy_request(p, 2 + static_cast<int32_t>(rng() % 14)));
  }
  std::vector<Output> alone;
  {
    auto rt = make(fixture_config("tiny-llama32"), false);
    ASSERT_TRUE(rt);
    for (const auto& r : reqs) alone.push_back(run_batch(*rt, {r})[0]);
  }
  struct Setup {
    int64_t budget;
    bool prefix;
    int64_t kv_bytes;  // 0 = default; small forces preemption
  };
  // tiny-llama32 KV: 1536 B/token; with max_model_len 512, one full sequence and 8 blocks.
  const int64_t small_kv = 1536 * (512 + 16 * 8);
  for (Setup s : {Setup{7, false, 0}, Setup{64, true, 0}, Setup{4096, true, 0}, Setup{64, true, small_kv}}) {
    RuntimeConfig rc = fixture_config("tiny-llama32");
    rc.max_num_batched_tokens = s.budget;
    rc.enable_prefix_caching = s.prefix;
    rc.kv_cache_memory = s.kv_bytes;
    if (s.kv_bytes) rc.max_model_len = 512;
    auto rt = make(rc, true);
    ASSERT_TRUE(rt);
    const auto out = run_batch(*rt, reqs);
    const std::string what = "budget " + std::to_string(s.budget) + " prefix " + std::to_string(s.prefix) + " kv " +
                             std::to_string(s.kv_bytes);
    for (size_t i = 0; i < reqs.size(); ++i) ASSERT_EQ(out[i].tokens, alone[i].tokens) << what << " request " << i;
    expect_async_and_clean(*rt, what);
    if (s.kv_bytes) EXPECT_GT(rt->async_engine().stats().preemptions, 0) << what;
  }
}

class SmolLM2Async : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(testing::default_model().empty()) << "default model missing: run tools/fetch_model.sh";
  }
  static RuntimeConfig config() {
    RuntimeConfig rc;
    rc.model = testing::default_model();
    rc.max_model_len = 512;
    rc.max_num_seqs = 64;
    return rc;
  }
};

// Greedy: 64 concurrent short prompts (raw text, so that they stay short on two cores), async
// equal to synchronous, and one of them alone equal to itself in the batch.
TEST_F(SmolLM2Async, GreedyAloneAndSixtyFourConcurrentEqualSynchronous) {
  auto sync = make(config(), false);
  auto async = make(config(), true);
  ASSERT_TRUE(sync && async);
  const char* words[] = {"The sea", "A small cat", "Numbers:", "Once upon a time", "Paris is", "Water boils",
                         "My friend", "In 1990"};
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 64; ++i) {
    auto ids = sync->encode_prompt(std::string(words[i % 8]) + " " + std::to_string(i));
    ASSERT_TRUE(ids.ok());
    GenerationRequest r = greedy_request(*ids, 6 + i % 5);
    r.params.ignore_eos = false;
    reqs.push_back(r);
  }
  const auto want = run_batch(*sync, reqs);
  const auto got = run_batch(*async, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i;
  expect_async_and_clean(*async, "64 concurrent");
  EXPECT_EQ(run_batch(*async, {reqs[5]})[0], want[5]);
  EXPECT_FALSE(want[5].text[0].empty());
}

// Seeded sampling with n = 2, a stop string and max_tokens: the same text, tokens and finish
// reasons; the stop string ends the sequence one step after its token was drawn, at the same
// text.
TEST_F(SmolLM2Async, SeededChoicesStopStringsAndMaxTokensEqualSynchronous) {
  auto sync = make(config(), false);
  auto async = make(config(), true);
  ASSERT_TRUE(sync && async);
  auto chat = [&](const std::string& q, uint64_t seed) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", q}});
    auto ids = sync->encode_chat(messages, ChatTemplateOptions{});
    EXPECT_TRUE(ids.ok());
    GenerationRequest r;
    r.prompt = *ids;
    r.params.temperature = 0.8f;
    r.params.top_p = 0.95f;
    r.params.seed = seed;
    r.params.max_tokens = 20;
    return r;
  };
  std::vector<GenerationRequest> reqs = {chat("Name three fruits.", 3), chat("Count to ten.", 4),
                                         chat("Write a short poem about rain.", 5), chat("Say hello.", 6)};
  reqs[0].params.n = 2;
  reqs[1].params.temperature = 0.0f;
  reqs[1].params.stop = {"e"};  // met within a few tokens of any English answer
  reqs[2].params.stop = {"\n"};
  reqs[3].params.max_tokens = 5;
  const auto want = run_batch(*sync, reqs);
  const auto got = run_batch(*async, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(got[i], want[i]) << "request " << i;
  EXPECT_EQ(want[1].reasons[0], FinishReason::kStop) << want[1].text[0];  // the stop string was exercised
  EXPECT_EQ(want[3].reasons[0], FinishReason::kLength);
  EXPECT_EQ(want[3].tokens[0].size(), 5u);
  expect_async_and_clean(*async, "seeded, stops");
}

// A stream cancelled mid-way ends with abort, and its blocks are free when its end is seen.
TEST_F(SmolLM2Async, AbortMidStreamFreesEveryBlock) {
  auto async = make(config(), true);
  ASSERT_TRUE(async);
  auto ids = async->encode_prompt("Tell me a long story about the mountains");
  ASSERT_TRUE(ids.ok());
  GenerationRequest r = greedy_request(*ids, 400);
  auto stream = async->async_engine().submit(r);
  ASSERT_TRUE(stream.ok());
  TokenEvent ev;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*stream)->next(&ev));
  EXPECT_GT(async->async_engine().stats().kv_usage, 0.0);
  (*stream)->cancel();
  FinishReason last = FinishReason::kNone;
  while ((*stream)->next(&ev))
    if (ev.finished) last = ev.finish_reason;
  EXPECT_EQ(last, FinishReason::kAbort);
  const EngineStats st = async->async_engine().stats();
  EXPECT_EQ(st.kv_usage, 0.0);
  EXPECT_EQ(st.num_free_blocks, st.num_blocks);
  EXPECT_GT(st.async_steps, 0);
}

}  // namespace
}  // namespace lancet
