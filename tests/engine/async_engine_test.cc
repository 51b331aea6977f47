// AsyncEngine: many concurrent submitters and readers, cancellations from reader threads,
// drain/abort shutdown (every block comes back), submits not starved by a long prefill, and
// every event delivered once, no later than one step after the step that made it; one reader
// for many streams through a StreamGroup.
#include "engine/async_engine.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <tuple>
#include <random>
#include <thread>

#include "engine/successor_logits.h"

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
    testing::successor_logits(batch, 100, logits);
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
    testing::successor_logits(batch, 100, logits);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return OkStatus();
  }
};

TEST(AsyncEngine, SubmitIsNotStarvedByALongPrefill) {
  // 1600 prompt tokens in chunks of 8: about 200 back-to-back steps. Requests submitted while
  // they run must get in (and finish, with budget left beside the chunk) long before the long
  // prompt's first token. Submits are queued and the loop takes them between steps; when
  // callers instead took an engine lock that the loop retook right after each step, submits
  // could wait until the prefill ended (seen on a 16-core host under a 128K-token prompt).
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
  EXPECT_EQ((*long_stream)->next_until(&ev, RequestStream::Clock::now()), RequestStream::Wait::kTimedOut)
      << "the long prompt finished first";
  while ((*long_stream)->next(&ev)) {
  }
  async.shutdown(/*drain=*/true);
}

}  // namespace
}  // namespace lancet

namespace lancet {
namespace {

// Counts its passes and keeps at most one pass ahead of the test's reader: pass p starts only
// once the reader has received what pass p - 2 made (or after 2 s, counted in `stalls`). An
// event delivered more than a step late therefore stalls the model and shows up as a lag;
// delivered on time, nothing here ever waits.
class LockstepModel : public ModelExecutor {
 public:
  int64_t vocab_size() const override { return 100; }
  int32_t block_size() const override { return 4; }
  int64_t num_blocks() const override { return 400; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    const int64_t pass = passes_.load() + 1;  // passes run one at a time, on the loop thread
    {
      std::unique_lock<std::mutex> lock(mu_);
      if (!cv_.wait_for(lock, std::chrono::seconds(2), [&] { return received_ >= pass - 2; })) ++stalls;
    }
    passes_.store(pass);  // counted once past the gate: passes() is the pass that runs now
    testing::successor_logits(batch, 100, logits);
    return OkStatus();
  }
  int64_t passes() const { return passes_.load(); }
  // The reader holds every event of passes <= pass.
  void received(int64_t pass) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      received_ = std::max(received_, pass);
    }
    cv_.notify_all();
  }
  std::atomic<int> stalls{0};

 private:
  std::atomic<int64_t> passes_{0};
  std::mutex mu_;
  std::condition_variable cv_;
  int64_t received_ = 0;
};

struct Receipt {
  int32_t token;
  bool finished;
  FinishReason reason;
  int64_t pass_at_receipt;
};

// Reads a lone request's stream; its prompt fits one step, so its output token i is made by
// pass base + i (base: the passes before its first).
std::vector<Receipt> read_in_lockstep(RequestStream& s, LockstepModel& model, int64_t base) {
  std::vector<Receipt> got;
  TokenEvent ev;
  int64_t made_by = base;
  while (s.next(&ev)) {
    got.push_back({ev.token, ev.finished, ev.finish_reason, model.passes()});
    if (ev.token >= 0) model.received(++made_by);
  }
  return got;
}

TEST(AsyncEngine, EveryEventArrivesOnceWithinOneStepOfItsToken) {
  LockstepModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_model_len = 256};
  cfg.eos_token_ids = {40};
  Engine engine(cfg, &model);
  AsyncEngine async(&engine);
  // Ends by length after 12 tokens (4..15), then by the end token 40 after 7 (34..40).
  for (const auto& [first, max_tokens, expect_reason, expect_tokens] :
       {std::tuple<int32_t, int32_t, FinishReason, int>{3, 12, FinishReason::kLength, 12},
        {33, 30, FinishReason::kStop, 7}}) {
    GenerationRequest q;
    q.prompt = {first - 2, first - 1, first};
    q.params.temperature = 0;
    q.params.max_tokens = max_tokens;
    const int64_t base = model.passes();  // nothing runs between requests
    auto s = async.submit(q);
    ASSERT_TRUE(s.ok()) << s.status().to_string();
    const std::vector<Receipt> got = read_in_lockstep(**s, model, base);
    ASSERT_EQ(static_cast<int>(got.size()), expect_tokens);
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_EQ(got[i].token, (first + 1 + static_cast<int32_t>(i)) % 100) << i;  // each token once, in order
      EXPECT_EQ(got[i].finished, i + 1 == got.size()) << i;
      // Made by pass base + i + 1; received before pass base + i + 3 began.
      EXPECT_LE(got[i].pass_at_receipt - (base + static_cast<int64_t>(i) + 1), 1) << "token " << i << " was late";
    }
    EXPECT_EQ(got.back().reason, expect_reason);
    EXPECT_TRUE((*s)->done());
    // Statistics are published before the final event: the blocks are already back.
    EXPECT_EQ(async.stats().num_free_blocks, 400);
    EXPECT_EQ(async.num_active_requests(), 0);
  }
  EXPECT_EQ(model.stalls.load(), 0);
}

TEST(AsyncEngine, CancelEndsTheStreamWithinOneStep) {
  LockstepModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 64, .max_num_seqs = 4, .max_model_len = 256};
  Engine engine(cfg, &model);
  AsyncEngine async(&engine);
  GenerationRequest q;
  q.prompt = {1, 2, 3};
  q.params.temperature = 0;
  q.params.max_tokens = 60;
  auto s = async.submit(q);
  ASSERT_TRUE(s.ok());
  TokenEvent ev;
  int tokens = 0, after_cancel = 0, finals = 0;
  FinishReason reason = FinishReason::kNone;
  while ((*s)->next(&ev)) {
    if (ev.token >= 0) {
      if (++tokens > 5) ++after_cancel;
      if (tokens == 5) (*s)->cancel();  // before the reader lets pass 7 start
      model.received(tokens);
    }
    if (ev.finished) {
      ++finals;
      reason = ev.finish_reason;
    }
  }
  EXPECT_EQ(finals, 1);
  EXPECT_EQ(reason, FinishReason::kAbort);
  // Pass 6 may have been under way, and pass 7 could start once token 5 was received (after the
  // cancel); the step after it applies the abort.
  EXPECT_LE(after_cancel, 2);
  EXPECT_EQ(async.stats().num_free_blocks, 400);
  EXPECT_EQ(async.stats().num_running, 0);
  EXPECT_EQ(model.stalls.load(), 0);
}

}  // namespace
}  // namespace lancet

namespace lancet {
namespace {

// Records the number of sequences in each pass.
class BatchSizeModel : public ModelExecutor {
 public:
  int64_t vocab_size() const override { return 100; }
  int32_t block_size() const override { return 4; }
  int64_t num_blocks() const override { return 400; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    testing::successor_logits(batch, 100, logits);
    std::lock_guard<std::mutex> lock(mu);
    sizes.push_back(static_cast<int>(batch.size()));
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
    return OkStatus();
  }
  std::mutex mu;
  std::vector<int> sizes;
};

TEST(AsyncEngine, SubmitAllPutsEveryRequestInTheFirstStep) {
  BatchSizeModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 256, .max_num_seqs = 32, .max_model_len = 256};
  Engine engine(cfg, &model);
  AsyncEngine async(&engine);
  std::vector<GenerationRequest> reqs(20);
  for (int i = 0; i < 20; ++i) {
    reqs[i].prompt = {i, i + 1, i + 2};
    reqs[i].params.temperature = 0;
    reqs[i].params.max_tokens = 4;
  }
  reqs[7].prompt = {100};  // outside the vocabulary: only this one is refused
  auto streams = async.submit_all(reqs);
  ASSERT_EQ(streams.size(), 20u);
  for (int i = 0; i < 20; ++i) {
    if (i == 7) {
      EXPECT_EQ(streams[i].status().code(), StatusCode::kInvalidArgument);
      continue;
    }
    ASSERT_TRUE(streams[i].ok()) << i << ": " << streams[i].status().to_string();
    TokenEvent ev;
    std::vector<int32_t> got;
    while ((*streams[i])->next(&ev))
      if (ev.token >= 0) got.push_back(ev.token);
    EXPECT_EQ(got, (std::vector<int32_t>{i + 3, i + 4, i + 5, i + 6})) << i;
  }
  std::lock_guard<std::mutex> lock(model.mu);
  ASSERT_GE(model.sizes.size(), 4u);
  // The 19 accepted prompts (57 tokens, within the step budget) are all in the first pass,
  // then decode together: 4 passes in all.
  EXPECT_EQ(model.sizes.front(), 19);
  EXPECT_EQ(model.sizes.size(), 4u);
  EXPECT_EQ(async.num_active_requests(), 0);
}

TEST(AsyncEngine, OneStreamGroupReaderGetsEveryEventOfEveryStreamInOrder) {
  CountingModel model;
  EngineConfig cfg;
  cfg.scheduler = {.max_num_batched_tokens = 256, .max_num_seqs = 16, .max_model_len = 256};
  Engine engine(cfg, &model);
  AsyncEngine async(&engine);
  // More requests than sequences at once, different lengths, three of them with two choices.
  std::vector<GenerationRequest> reqs(40);
  for (int i = 0; i < 40; ++i) {
    reqs[i].prompt = {i, i + 1};
    reqs[i].params.temperature = 0;
    reqs[i].params.max_tokens = 3 + i % 7;
    if (i % 13 == 0) reqs[i].params.n = 2;
  }
  auto group = std::make_shared<StreamGroup>();
  auto submitted = async.submit_all(reqs, group);
  std::map<const RequestStream*, int> index;
  for (int i = 0; i < 40; ++i) {
    ASSERT_TRUE(submitted[i].ok()) << submitted[i].status().to_string();
    index[submitted[i]->get()] = i;
  }
  std::vector<std::vector<std::vector<int32_t>>> got(40);
  std::vector<int> ends(40, 0);
  int open = 40, waits = 0;
  std::vector<std::shared_ptr<RequestStream>> ready;
  TokenEvent ev;
  while (open > 0) {
    group->wait(&ready);
    ++waits;
    ASSERT_FALSE(ready.empty());
    for (const auto& s : ready) {
      const int i = index.at(s.get());
      got[i].resize(reqs[i].params.n);
      RequestStream::Wait w;
      while ((w = s->next_until(&ev, RequestStream::Clock::time_point{})) == RequestStream::Wait::kEvent)
        if (ev.token >= 0) got[i][ev.index].push_back(ev.token);
      if (w == RequestStream::Wait::kEnded && ends[i]++ == 0) --open;
    }
  }
  for (int i = 0; i < 40; ++i) {
    std::vector<int32_t> want;
    for (int k = 0; k < reqs[i].params.max_tokens; ++k) want.push_back(i + 2 + k);
    for (int c = 0; c < reqs[i].params.n; ++c) EXPECT_EQ(got[i][c], want) << "request " << i << " choice " << c;
  }
  // One reader thread woke far fewer times than the events it read (more than 250).
  EXPECT_LT(waits, 200);
  EXPECT_EQ(async.num_active_requests(), 0);
}

}  // namespace
}  // namespace lancet
