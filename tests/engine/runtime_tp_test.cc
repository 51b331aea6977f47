// Tensor parallelism through the whole engine: a Runtime with --tensor-parallel-size 2 (CPU
// ranks here; LANCET_TP_BACKEND=cuda runs rank r on GPU r with NCCL) gives HF's golden greedy
// continuations on the fixtures, with requests batched and prefills chunked, and refuses the
// combinations it does not support with messages that say so.
#include <gtest/gtest.h>

#include <cstdlib>

#include "engine/runtime.h"
#include "io/safetensors.h"
#include "test_paths.h"

namespace lancet {
namespace {

std::string tp_backend() {
  const char* env = std::getenv("LANCET_TP_BACKEND");
  return env && *env ? env : "cpu";
}

RuntimeConfig tp_config(const std::string& fixture, int tp) {
  RuntimeConfig rc;
  rc.model = testing::fixture_dir(fixture);
  rc.backend = tp_backend();
  rc.max_model_len = 1024;
  rc.max_num_seqs = 8;
  rc.max_num_batched_tokens = 96;  // prompts of up to ~400 ids prefill in several chunks
  rc.tensor_parallel_size = tp;
  rc.kv_cache_memory = 64 << 20;
  rc.activation_precision = "exact";
  return rc;
}

TEST(RuntimeTensorParallel, GreedyEqualsHfGoldenAtTp2) {
  for (const char* fx : {"tiny-llama3", "tiny-llama32", "tiny-gqa8", "tiny-rope-linear"}) {
    SCOPED_TRACE(fx);
    auto rt = Runtime::create(tp_config(fx, 2));
    ASSERT_TRUE(rt.ok()) << rt.status().to_string();
    EXPECT_GT((*rt)->memory_report().kv_num_blocks, 0);
    auto f = SafetensorsFile::open(testing::fixture_dir(fx) + "/golden.safetensors");
    ASSERT_TRUE(f.ok()) << f.status().to_string();
    std::vector<std::shared_ptr<RequestStream>> streams;
    std::vector<std::vector<int32_t>> want;
    for (int i = 0; i < 8; ++i) {
      const TensorView* ids = (*f)->find("case" + std::to_string(i) + ".input_ids");
      const TensorView* greedy = (*f)->find("case" + std::to_string(i) + ".greedy");
      if (!ids || !greedy || ids->numel() > 400) continue;
      GenerationRequest r;
      const int32_t* p = static_cast<const int32_t*>(ids->data);
      r.prompt.assign(p, p + ids->numel());
      r.params.temperature = 0.0f;
      r.params.max_tokens = static_cast<int32_t>(greedy->numel());
      r.params.ignore_eos = true;
      const int32_t* q = static_cast<const int32_t*>(greedy->data);
      want.emplace_back(q, q + greedy->numel());
      auto s = (*rt)->async_engine().submit(r);
      ASSERT_TRUE(s.ok()) << s.status().to_string();
      streams.push_back(*s);
    }
    ASSERT_GE(streams.size(), 4u);
    for (size_t i = 0; i < streams.size(); ++i) {
      std::vector<int32_t> got;
      TokenEvent ev;
      while (streams[i]->next(&ev))
        if (ev.token >= 0) got.push_back(ev.token);
      EXPECT_EQ(got, want[i]) << "case " << i;
    }
  }
}

TEST(RuntimeTensorParallel, RefusesWhatItCannotSplit) {
  // tiny-llama3 has 4 query heads: 3 ranks cannot split them.
  auto rt = Runtime::create(tp_config("tiny-llama3", 3));
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().to_string().find("num_heads"), std::string::npos) << rt.status().to_string();
  EXPECT_NE(rt.status().to_string().find("--tensor-parallel-size 3"), std::string::npos) << rt.status().to_string();

  RuntimeConfig c = tp_config("tiny-llama3", 2);
  c.kv_cache_dtype = "fp8";
  Status s = c.validate();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.to_string().find("kv-cache-dtype fp8"), std::string::npos) << s.to_string();
  c = tp_config("tiny-llama3", 2);
  c.quantization = "fp8";
  EXPECT_FALSE(c.validate().ok());
  c = tp_config("tiny-llama3", 2);
  c.speculative_config = R"({"method": "ngram", "num_speculative_tokens": 3})";
  EXPECT_FALSE(c.validate().ok());
  c = tp_config("tiny-llama3", 0);
  EXPECT_FALSE(c.validate().ok());
}

}  // namespace
}  // namespace lancet
