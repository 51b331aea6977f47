// Op timing through the executor on the CPU backend (host clock): every op of a step is
// counted once under its kind, prompt and decode steps are kept apart, the device idle time
// between consecutive steps is measured, and taking the profile starts it over.
#include <gtest/gtest.h>

#include <vector>

#include "backend/backend.h"
#include "io/model_source.h"
#include "model/llama_model.h"
#include "runner/llama_executor.h"
#include "test_paths.h"

namespace lancet {
namespace {

int64_t calls(const OpTimes& t, OpKind k) { return t.calls[static_cast<int>(k)]; }

TEST(LlamaExecutorOpTiming, CountsEveryOpOfAStepByKind) {
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  auto src = open_model_source(testing::fixture_dir("tiny-llama3"));
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  auto model = LlamaModel::create(**src, **be);
  ASSERT_TRUE(model.ok()) << model.status().to_string();
  LlamaExecutorOptions opts;
  opts.op_timing = true;
  auto executor = LlamaExecutor::create(**model, KvBlockConfig{64, 16}, DType::kF32, opts);
  ASSERT_TRUE(executor.ok()) << executor.status().to_string();
  LlamaExecutor& exec = **executor;
  const int64_t L = (*src)->config().num_layers;
  ASSERT_GT(L, 0);

  // Two sequences: a 5-token prompt step for both, then two decode steps.
  const std::vector<BlockId> t0 = {0}, t1 = {1};
  const std::vector<int32_t> p0 = {1, 2, 3, 4, 5}, p1 = {6, 7, 8, 9, 10}, d0 = {11}, d1 = {12};
  std::vector<float> logits;
  std::vector<SeqStepInput> prompt = {{p0, 0, t0, true}, {p1, 0, t1, true}};
  ASSERT_TRUE(exec.execute(prompt, &logits).ok());
  for (int64_t pos = 5; pos < 7; ++pos) {
    std::vector<SeqStepInput> decode = {{d0, pos, t0, true}, {d1, pos, t1, true}};
    ASSERT_TRUE(exec.execute(decode, &logits).ok());
  }

  const StepProfile p = exec.take_step_profile();
  EXPECT_EQ(p.prompt.steps, 1);
  EXPECT_EQ(p.decode.steps, 2);
  for (const OpTimes* t : {&p.prompt, &p.decode}) {
    const int64_t s = t->steps;
    EXPECT_EQ(calls(*t, OpKind::kEmbedding), s);
    // Input and post-attention norms per layer, and the final norm.
    EXPECT_EQ(calls(*t, OpKind::kNorm), s * (2 * L + 1));
    // The CPU backend runs q, k, v, o, gate, up and down as separate matmuls, then the lm_head.
    EXPECT_EQ(calls(*t, OpKind::kGemm), s * (7 * L + 1));
    EXPECT_EQ(calls(*t, OpKind::kActivation), s * L);
    EXPECT_EQ(calls(*t, OpKind::kRope), s * L);
    EXPECT_EQ(calls(*t, OpKind::kKvWrite), s * L);
    EXPECT_EQ(calls(*t, OpKind::kAttention), s * L);
    EXPECT_EQ(calls(*t, OpKind::kSampling), 0);  // the host sampled
    EXPECT_GT(t->ms[static_cast<int>(OpKind::kGemm)], 0.0);
    EXPECT_GT(t->busy_ms(), t->ms[static_cast<int>(OpKind::kGemm)]);
  }
  // Consecutive steps: the idle time before each step after the first.
  EXPECT_EQ(p.prompt.gaps, 0);
  EXPECT_EQ(p.decode.gaps, 2);
  EXPECT_GE(p.decode.gap_ms, 0.0);

  const StepProfile again = exec.take_step_profile();
  EXPECT_EQ(again.prompt.steps + again.decode.steps, 0);
  EXPECT_EQ(again.decode.busy_ms(), 0.0);
}

TEST(LlamaExecutorOpTiming, OffByDefault) {
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  EXPECT_FALSE((*be)->op_timing());
  OpTimes t;
  EXPECT_EQ((*be)->take_op_times(&t).code(), StatusCode::kFailedPrecondition);
  ASSERT_TRUE((*be)->set_op_timing(true).ok());
  EXPECT_TRUE((*be)->op_timing());
  ASSERT_TRUE((*be)->set_op_timing(false).ok());
  EXPECT_FALSE((*be)->op_timing());
}

}  // namespace
}  // namespace lancet
