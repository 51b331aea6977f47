// Decode graphs at large batches (runner/decode_graphs.h on CudaBackend): with --max-num-seqs
// 1024 the engine's decode steps of hundreds of sequences replay graphs of buckets above 256,
// and give exactly the tokens of the same engine run eagerly; every block comes back.
#include <random>

#include "cuda_fixture_model.h"
#include "cuda_test_util.h"
#include "engine/engine.h"
#include "engine/engine_run_util.h"
#include "runner/llama_executor.h"

namespace lancet {
namespace {

using namespace lancet::testing;

TEST(CudaDecodeGraphs, LargeBatchesReplayGraphsWithTheEagerTokens) {
  auto fixture = gpu_fixture_model("tiny-llama3");
  ASSERT_TRUE(fixture.ok()) << fixture.status().to_string();
  LlamaModel& model = *fixture->model;
  std::mt19937 r(5);
  std::vector<GenerationRequest> reqs;
  for (int i = 0; i < 900; ++i) {  // 900 decoding together, finishing over many steps
    GenerationRequest q;
    const int len = 2 + static_cast<int>(r() % 40);
    for (int j = 0; j < len; ++j) q.prompt.push_back(static_cast<int32_t>(1 + r() % 200));
    q.params.max_tokens = 3 + static_cast<int32_t>(r() % 24);
    q.params.temperature = 0.0f;
    q.params.ignore_eos = true;
    reqs.push_back(q);
  }
  const SchedulerConfig sc{.max_num_batched_tokens = 16384, .max_num_seqs = 1024, .max_model_len = 256};
  std::vector<std::vector<int32_t>> tokens[2];
  for (bool graphs : {false, true}) {
    LlamaExecutorOptions opts;
    opts.decode_graphs = graphs;
    opts.max_graph_batch = 1024;
    auto executor = LlamaExecutor::create(model, KvBlockConfig{4096, 16}, DType::kF32, opts);
    ASSERT_TRUE(executor.ok()) << executor.status().to_string();
    EngineStats st;
    tokens[graphs] = run_engine_to_end(**executor, reqs, sc, /*async_scheduling=*/false, &st);
    EXPECT_EQ(st.num_free_blocks, st.num_blocks);
    // Buckets of 1, 2, 4, ... up to 1024 (900 sequences decode at once in the first steps).
    if (graphs) EXPECT_GE((*executor)->num_decode_graphs(), 20);
  }
  for (size_t i = 0; i < reqs.size(); ++i) {
    ASSERT_EQ(tokens[1][i].size(), static_cast<size_t>(reqs[i].params.max_tokens)) << i;
    EXPECT_EQ(tokens[1][i], tokens[0][i]) << "request " << i;
  }
}

}  // namespace
}  // namespace lancet
