// AsyncEngine: many concurrent submitters and readers, cancellations from reader threads,
// and drain/abort shutdown; every block comes back.
#include "engine/async_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <random>
#include <thread>

namespace lancet {
namespace {

// Logits: the next token is (last token + 1) mod vocab; slow enough to interleave threads.
class CountingModel : public ModelExecutor {
 public:
  int64_t vocab_size() const override { return 100; }
  int32_t block_size() const override { return 4; }
  int64_t num_blocks() const override { return 400; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    logits->clear();
    if (fail_next.exchange(false)) return Internal("injected failure");
    for (const auto& in : batch) {
      if (!in.need_logits) continue;
      std::vector<float> row(100, 0.0f);
      row[(in.tokens.back() + 1) % 100] = 10.0f;
      logits->insert(logits->end(), row.begin(), row.end());
    }
    std::this_thread::sleep_for(std::chrono::microseconds(200));
    return OkStatus();
  }
  std::atomic<bool> fail_next{false};
};

TEST(AsyncEngine, ConcurrentClientsWithCancellationsLeaveNothingBehind) {
  CountingModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 16, .max_model_len = 256};
  Engine engine(cfg, &model);
  AsyncEngine async(&engine);
  std::atomic<int> completed{0}, cancelled{0}, bad{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([&, c] {
      std::mt19937 rng(c);
      for (int r = 0; r < 5; ++r) {
        GenerationRequest q;
        q.prompt = {static_cast<int32_t>(rng() % 100), 5, 6};
        q.params.temperature = 0;
        q.params.max_tokens = 5 + rng() % 20;
        auto s = async.submit(q);
        if (!s.ok()) { bad++; continue; }
        const bool cancel = rng() % 3 == 0;
        TokenEvent ev;
        int got = 0;
        int32_t expect = 7;
        bool finished = false;
        while ((*s)->next(&ev)) {
          if (ev.token >= 0) {
            if (ev.token != expect % 100) bad++;
            expect++;
            got++;
          }
          if (cancel && got == 2) (*s)->cancel();
          if (ev.finished) {
            finished = true;
            if (ev.finish_reason == FinishReason::kAbort) cancelled++;
            else if (ev.finish_reason == FinishReason::kLength && got == q.params.max_tokens) completed++;
            else bad++;
          }
        }
        if (!finished) bad++;
      }
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(bad.load(), 0);
  EXPECT_EQ(completed.load() + cancelled.load(), 80);
  EXPECT_GT(cancelled.load(), 0);
  EXPECT_EQ(async.num_active_requests(), 0);
  EngineStats st = async.stats();
  EXPECT_EQ(st.num_free_blocks, 400);
  EXPECT_EQ(st.num_running, 0);
}

TEST(AsyncEngine, ModelFailureEndsOnlyThatStepsRequests) {
  CountingModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 16, .max_model_len = 256};
  Engine engine(cfg, &model);
  AsyncEngine async(&engine);
  model.fail_next = true;
  GenerationRequest q;
  q.prompt = {1, 2};
  q.params.temperature = 0;
  q.params.max_tokens = 3;
  auto s1 = async.submit(q);
  ASSERT_TRUE(s1.ok());
  TokenEvent ev;
  FinishReason last = FinishReason::kNone;
  while ((*s1)->next(&ev)) if (ev.finished) last = ev.finish_reason;
  EXPECT_EQ(last, FinishReason::kError);
  auto s2 = async.submit(q);
  ASSERT_TRUE(s2.ok());
  int tokens = 0;
  while ((*s2)->next(&ev)) tokens += ev.token >= 0;
  EXPECT_EQ(tokens, 3);
  EXPECT_EQ(async.stats().num_free_blocks, 400);
}

TEST(AsyncEngine, DrainingShutdownFinishesInFlightAndRefusesNew) {
  CountingModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 16, .max_model_len = 256};
  Engine engine(cfg, &model);
  AsyncEngine async(&engine);
  GenerationRequest q;
  q.prompt = {1, 2};
  q.params.temperature = 0;
  q.params.max_tokens = 50;
  auto s = async.submit(q);
  ASSERT_TRUE(s.ok());
  std::thread reader([&] {
    TokenEvent ev;
    int n = 0;
    while ((*s)->next(&ev)) n += ev.token >= 0;
    EXPECT_EQ(n, 50);
  });
  async.shutdown(/*drain=*/true);
  reader.join();
  EXPECT_FALSE(async.submit(q).ok());
}

TEST(AsyncEngine, EveryChoiceFinishesBeforeTheStreamEnds) {
  CountingModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 16, .max_model_len = 256};
  Engine engine(cfg, &model);
  AsyncEngine async(&engine);
  for (int round = 0; round < 20; ++round) {
    GenerationRequest q;
    q.prompt = {1, 2, 3};
    q.params.temperature = 0;
    q.params.max_tokens = 4;
    q.params.n = 3;  // the choices finish in the same step
    auto s = async.submit(q);
    ASSERT_TRUE(s.ok());
    int finished = 0, tokens = 0;
    TokenEvent ev;
    while ((*s)->next(&ev)) {
      finished += ev.finished;
      tokens += ev.token >= 0;
    }
    ASSERT_EQ(finished, 3);
    ASSERT_EQ(tokens, 12);
  }
}

}  // namespace
}  // namespace lancet

namespace lancet {
namespace {

// Every step takes a millisecond: a long prompt keeps the loop busy for a few hundred steps.
class SlowStepModel : public ModelExecutor {
 public:
  int64_t vocab_size() const override { return 100; }
  int32_t block_size() const override { return 16; }
  int64_t num_blocks() const override { return 200; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    logits->clear();
    for (const auto& in : batch) {
      if (!in.need_logits) continue;
      std::vector<float> row(100, 0.0f);
      row[(in.tokens.back() + 1) % 100] = 10.0f;
      logits->insert(logits->end(), row.begin(), row.end());
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return OkStatus();
  }
};

TEST(AsyncEngine, SubmitIsNotStarvedByALongPrefill) {
  // 1600 prompt tokens in chunks of 8: about 200 back-to-back steps. Requests submitted while
  // they run must get in (and finish, with budget left beside the chunk) long before the long
  // prompt's first token. The loop takes its lock again right after each step; before callers
  // were let in ahead of it, submits could wait for the lock until the prefill ended (seen on a
  // 16-core host under a 128K-token prompt).
  SlowStepModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 16, .max_num_seqs = 32, .max_model_len = 2048,
                   .long_prefill_token_threshold = 8};
  Engine engine(cfg, &model);
  AsyncEngine async(&engine);
  GenerationRequest longq;
  for (int i = 0; i < 1600; ++i) longq.prompt.push_back(i % 100);
  longq.params.temperature = 0;
  longq.params.max_tokens = 1;
  auto long_stream = async.submit(longq);
  ASSERT_TRUE(long_stream.ok());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));  // the prefill is under way
  // Sixteen clients (an HTTP server's worth) submit at once and read their streams to the end.
  std::atomic<int> finished{0}, bad{0};
  std::vector<std::thread> clients;
  for (int c = 0; c < 16; ++c) {
    clients.emplace_back([&, c] {
      GenerationRequest shortq;
      shortq.prompt = {c, c + 1, c + 2};
      shortq.params.temperature = 0;
      shortq.params.max_tokens = 3;
      auto s = async.submit(shortq);
      if (!s.ok()) {
        bad++;
        return;
      }
      TokenEvent e;
      int tokens = 0;
      while ((*s)->next(&e))
        if (e.token >= 0) ++tokens;
      if (tokens == 3) finished++; else bad++;
    });
  }
  for (auto& t : clients) t.join();
  EXPECT_EQ(finished.load(), 16);
  EXPECT_EQ(bad.load(), 0);
  TokenEvent ev;
  bool timed_out = false;
  EXPECT_FALSE((*long_stream)->next_for(&ev, 0, &timed_out)) << "the long prompt finished first";
  EXPECT_TRUE(timed_out);
  while ((*long_stream)->next(&ev)) {
  }
  async.shutdown(/*drain=*/true);
}

}  // namespace
}  // namespace lancet
