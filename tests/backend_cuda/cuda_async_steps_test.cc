// Asynchronous steps on the GPU (runner/device_token_ring.h over CudaBackend's
// sample_rows_async, scatter_tokens and copy_to_host_async): the engine with async scheduling
// gives exactly the tokens of synchronous steps with device sampling (the batches are the same
// steps, so the same kernels run on the same inputs), with decode graphs (the fed tokens
// written into the graph's arena before each replay) and eagerly, under chunked prefill that
// mixes prompt chunks with fed decodes; and the scatter and the asynchronous copy themselves
// against their definitions.
#include <random>

#include "cuda_fixture_model.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "engine/engine_run_util.h"
#include "runner/llama_executor.h"

namespace lancet {
namespace {

using namespace lancet::testing;

TEST(CudaAsyncSteps, ScatterAndAsyncCopy) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const std::vector<int32_t> ids = {5, 6, 7, 8, 9}, samples = {100, 200, 300};
  const std::vector<int32_t> pairs = {4, 0, 0, 2, 2, 1};
  auto d_ids = g->alloc(ids.size() * 4), d_samples = g->alloc(samples.size() * 4), d_pairs = g->alloc(pairs.size() * 4);
  ASSERT_TRUE(d_ids.ok() && d_samples.ok() && d_pairs.ok());
  ASSERT_TRUE(g->copy_to_device(d_ids->data(), ids.data(), ids.size() * 4).ok());
  ASSERT_TRUE(g->copy_to_device(d_samples->data(), samples.data(), samples.size() * 4).ok());
  ASSERT_TRUE(g->copy_to_device(d_pairs->data(), pairs.data(), pairs.size() * 4).ok());
  ASSERT_TRUE(g->scatter_tokens(d_ids->as<int32_t>(), d_samples->as<int32_t>(), d_pairs->as<int32_t>(), 3).ok());
  auto host = g->alloc_host(ids.size() * 4);
  ASSERT_TRUE(host.ok());
  auto copy = g->copy_to_host_async(host->data(), d_ids->data(), ids.size() * 4);
  ASSERT_TRUE(copy.ok()) << copy.status().to_string();
  ASSERT_TRUE((*copy)->wait().ok());
  const int32_t* h = host->as<int32_t>();
  EXPECT_EQ(std::vector<int32_t>(h, h + ids.size()), (std::vector<int32_t>{300, 6, 200, 8, 100}));
}

std::vector<GenerationRequest> requests(int64_t vocab) {
  std::mt19937 r(31);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 40; ++i) {
    GenerationRequest q;
    const int len = 3 + static_cast<int>(r() % 90);
    for (int j = 0; j < len; ++j) q.prompt.push_back(static_cast<int32_t>(r() % vocab));
    q.params.max_tokens = 4 + static_cast<int32_t>(r() % 28);
    q.params.seed = 700 + i;
    q.params.temperature = i % 3 == 0 ? 0.0f : 0.9f;
    if (i % 3 == 2) q.params.top_p = 0.8f;
    reqs.push_back(q);
  }
  return reqs;
}

TEST(CudaAsyncSteps, EngineGivesTheSynchronousTokensWithGraphsAndEagerly) {
  auto fixture = gpu_fixture_model("tiny-llama3");
  ASSERT_TRUE(fixture.ok()) << fixture.status().to_string();
  LlamaModel& model = *fixture->model;
  for (bool graphs : {true, false}) {
    LlamaExecutorOptions opts;
    opts.decode_graphs = graphs;
    auto executor = LlamaExecutor::create(model, KvBlockConfig{1024, 16}, DType::kF32, opts);
    ASSERT_TRUE(executor.ok()) << executor.status().to_string();
    LlamaExecutor& exec = **executor;
    const auto reqs = requests(exec.vocab_size());
    for (int64_t budget : {48, 2048}) {
      const SchedulerConfig sc{.max_num_batched_tokens = budget, .max_num_seqs = 64, .max_model_len = 1024};
      const auto want = run_engine_to_end(exec, reqs, sc);
      EngineStats st;
      const auto got = run_engine_to_end(exec, reqs, sc, /*async_scheduling=*/true, &st);
      for (size_t i = 0; i < reqs.size(); ++i)
        EXPECT_EQ(got[i], want[i]) << "graphs " << graphs << " budget " << budget << " request " << i;
      EXPECT_EQ(st.async_steps, st.steps);
      EXPECT_EQ(st.num_free_blocks, st.num_blocks);
    }
    if (graphs) EXPECT_GT(exec.num_decode_graphs(), 0);
  }
}

}  // namespace
}  // namespace lancet
