// Asynchronous steps at the runner: ModelRunner::launch / collect over ModelExecutor's default
// asynchronous steps (each step run at launch, its tokens held for collect_step). An executor
// that echoes each sequence's last input token as its logits' argmax shows which token each
// step really read: the fed ones must be the previous step's draws, in launch order, and bad
// feeds or rows that need host logits are refused without disturbing what is in flight.
#include <gtest/gtest.h>

#include <vector>

#include "runner/model_runner.h"

namespace lancet {
namespace {

constexpr int64_t kVocab = 32;

// The logits row of each sequence peaks at (its last input token + 1) % kVocab.
class EchoExecutor : public ModelExecutor {
 public:
  int64_t vocab_size() const override { return kVocab; }
  int32_t block_size() const override { return 16; }
  int64_t num_blocks() const override { return 8; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    logits->clear();
    ++steps;
    for (const SeqStepInput& in : batch) {
      if (!in.need_logits) continue;
      const int32_t next = (in.tokens.back() + 1) % kVocab;
      for (int64_t v = 0; v < kVocab; ++v) logits->push_back(v == next ? 1.0f : 0.0f);
    }
    return OkStatus();
  }
  int steps = 0;
};

struct Seqs {
  std::vector<std::vector<int32_t>> tokens;
  std::vector<BlockId> table = {0, 1};
  SamplingParams greedy;
  std::vector<RunnerSeq> batch;
  explicit Seqs(std::vector<std::vector<int32_t>> t) : tokens(std::move(t)) {
    greedy.temperature = 0.0f;
    for (const auto& tk : tokens) {
      RunnerSeq r;
      r.input.tokens = tk;
      r.input.block_table = table;
      r.input.need_logits = true;
      r.params = &greedy;
      batch.push_back(r);
    }
  }
};

std::vector<int32_t> tokens_of(const RunnerOutput& out) {
  std::vector<int32_t> t;
  for (const SampleResult& s : out.samples) t.push_back(s.token);
  return t;
}

TEST(AsyncSteps, FedTokensAreThePreviousStepsDrawsInLaunchOrder) {
  EchoExecutor exec;
  ModelRunner runner(exec);
  std::vector<int32_t> idx;
  // Step 1: two prompts, draws 4 and 8.
  Seqs s1({{1, 2, 3}, {7}});
  ASSERT_TRUE(runner.launch(s1.batch, {}, &idx).ok());
  EXPECT_EQ(idx, (std::vector<int32_t>{0, 1}));
  // Step 2: both decode from step 1's draws (placeholders 0 on the host), in swapped order,
  // plus a prompt chunk that does not sample.
  Seqs s2({{0}, {0}, {5, 6}});
  s2.batch[2].input.need_logits = false;
  const std::vector<TokenFeed> feeds2 = {{0, 1}, {1, 0}};
  ASSERT_TRUE(runner.launch(s2.batch, feeds2, &idx).ok());
  EXPECT_EQ(idx, (std::vector<int32_t>{0, 1, -1}));
  // Two launched: a third waits for a collect.
  EXPECT_EQ(runner.launch(s2.batch, {}, &idx).code(), StatusCode::kFailedPrecondition);
  RunnerOutput out;
  ASSERT_TRUE(runner.collect(&out).ok());
  EXPECT_EQ(tokens_of(out), (std::vector<int32_t>{4, 8}));
  // Step 3 feeds from step 2 (draws 9 and 5) even though step 2 is not collected yet.
  Seqs s3({{0}, {0}});
  const std::vector<TokenFeed> feeds3 = {{0, 0}, {1, 1}};
  ASSERT_TRUE(runner.launch(s3.batch, feeds3, &idx).ok());
  ASSERT_TRUE(runner.collect(&out).ok());
  EXPECT_EQ(tokens_of(out), (std::vector<int32_t>{9, 5, -1}));
  ASSERT_TRUE(runner.collect(&out).ok());
  EXPECT_EQ(tokens_of(out), (std::vector<int32_t>{10, 6}));
  EXPECT_EQ(runner.collect(&out).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(exec.steps, 3);
}

TEST(AsyncSteps, BadFeedsAndHostRowsAreRefusedAndNothingInFlightIsLost) {
  EchoExecutor exec;
  ModelRunner runner(exec);
  std::vector<int32_t> idx;
  Seqs s1({{1}, {2}});
  ASSERT_TRUE(runner.launch(s1.batch, {}, &idx).ok());
  Seqs s2({{0}, {0}});
  // A sample index past the previous step's two draws, a token index past the step's tokens,
  // and one token fed twice.
  for (const std::vector<TokenFeed>& bad : {std::vector<TokenFeed>{{0, 2}}, std::vector<TokenFeed>{{2, 0}},
                                            std::vector<TokenFeed>{{0, 0}, {0, 1}}}) {
    const Status st = runner.launch(s2.batch, bad, &idx);
    EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.to_string();
  }
  // Logprobs need the host's logits: not an asynchronous step.
  SamplingParams lp;
  lp.temperature = 0.0f;
  lp.logprobs = 1;
  s2.batch[1].params = &lp;
  EXPECT_EQ(runner.launch(s2.batch, {}, &idx).code(), StatusCode::kFailedPrecondition);
  RunnerOutput out;
  ASSERT_TRUE(runner.collect(&out).ok());
  EXPECT_EQ(tokens_of(out), (std::vector<int32_t>{2, 3}));
  EXPECT_EQ(exec.steps, 1);
}

// A draw's output position counts the tokens still in flight (SampleContext::pending_outputs).
TEST(AsyncSteps, InFlightTokensCountInTheDrawPosition) {
  class Recorder : public EchoExecutor {
   public:
    bool supports_device_sampling() const override { return true; }
    Status execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                           std::vector<int32_t>* tokens, std::vector<float>* host_logits) override {
      host_logits->clear();
      tokens->assign(device.size(), 1);
      for (const DeviceSampleRow& d : device) counters.push_back(d.counter);
      (void)batch;
      return OkStatus();
    }
    std::vector<uint64_t> counters;
  } exec;
  ModelRunner runner(exec);
  Seqs s(std::vector<std::vector<int32_t>>{{1}});
  const std::vector<int32_t> out_tokens = {5, 6, 7};
  s.batch[0].ctx.output_tokens = out_tokens;
  s.batch[0].ctx.pending_outputs = 1;
  std::vector<int32_t> idx;
  ASSERT_TRUE(runner.launch(s.batch, {}, &idx).ok());
  EXPECT_EQ(exec.counters, (std::vector<uint64_t>{4}));
}

}  // namespace
}  // namespace lancet
