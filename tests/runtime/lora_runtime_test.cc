// LoRA adapters through the runtime on tiny-llama3 (--lora-modules): each adapter's greedy
// continuation is peft's (tests/data/lora-tiny-llama3) while a base request in the same batch
// keeps Hugging Face's; the prefix cache never hands one adapter's (or the base model's) KV to
// another; run-time loading and unloading refuse what they must, and a slot whose adapter was
// unloaded is reused only once no request holds it; the adapters split over tensor-parallel
// ranks give the same tokens.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "io/safetensors.h"
#include "runtime/runtime.h"
#include "lora_test_data.h"
#include "test_paths.h"

namespace lancet {
namespace {

using testing::golden_ids;
std::string adapter_dir(const std::string& name) { return testing::lora_adapter_dir(name); }

RuntimeConfig lora_config() {
  RuntimeConfig rc;
  rc.model = testing::fixture_dir("tiny-llama3");
  rc.max_model_len = 256;
  rc.max_num_seqs = 8;
  rc.lora_modules = {{"sql", adapter_dir("sql")}, {"chat", adapter_dir("chat")}};
  rc.max_loras = 3;
  rc.max_lora_rank = 8;
  return rc;
}

GenerationRequest greedy(std::vector<int32_t> prompt, int32_t n, std::shared_ptr<const LoraRef> lora) {
  GenerationRequest r;
  r.prompt = std::move(prompt);
  r.params.temperature = 0.0f;
  r.params.max_tokens = n;
  r.params.ignore_eos = true;
  r.lora = std::move(lora);
  return r;
}

struct Result {
  std::vector<int32_t> tokens;
  int32_t cached = -1;
};

std::vector<Result> run(Runtime& rt, const std::vector<GenerationRequest>& reqs) {
  auto streams = rt.async_engine().submit_all(reqs);
  std::vector<Result> out(reqs.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    EXPECT_TRUE(streams[i].ok()) << streams[i].status().to_string();
    if (!streams[i].ok()) continue;
    TokenEvent ev;
    while ((*streams[i])->next(&ev)) {
      if (out[i].cached < 0) out[i].cached = ev.cached_prompt_tokens;
      if (ev.token >= 0) out[i].tokens.push_back(ev.token);
    }
  }
  return out;
}

TEST(LoraRuntime, AdaptersAndBaseInOneBatchGivePeftAndHfGreedy) {
  auto rt = Runtime::create(lora_config());
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  ASSERT_TRUE((*rt)->lora_enabled());
  auto sql = (*rt)->find_lora("sql");
  auto chat = (*rt)->find_lora("chat");
  ASSERT_TRUE(sql && chat);
  EXPECT_NE(sql->slot, chat->slot);
  EXPECT_EQ((*rt)->find_lora("tiny-llama3"), nullptr);
  const std::string base_golden = testing::fixture_dir("tiny-llama3") + "/golden.safetensors";
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  for (const char* c : {"case0", "case1"}) {
    for (auto [name, ref] : {std::pair{"sql", sql}, std::pair{"chat", chat}}) {
      const std::string g = adapter_dir(name) + "/golden.safetensors";
      want.push_back(golden_ids(g, std::string(c) + ".greedy"));
      reqs.push_back(greedy(golden_ids(g, std::string(c) + ".input_ids"), static_cast<int32_t>(want.back().size()), ref));
    }
  }
  for (const char* c : {"case1", "case2"}) {
    want.push_back(golden_ids(base_golden, std::string(c) + ".greedy"));
    reqs.push_back(greedy(golden_ids(base_golden, std::string(c) + ".input_ids"), static_cast<int32_t>(want.back().size()),
                          nullptr));
  }
  const auto out = run(**rt, reqs);
  for (size_t i = 0; i < reqs.size(); ++i)
    EXPECT_EQ(out[i].tokens, want[i]) << "request " << i << " (" << (reqs[i].lora ? reqs[i].lora->name : "base") << ")";
  EXPECT_EQ((*rt)->async_engine().stats().kv_usage, 0.0);
}

// Two tensor-parallel ranks (simulated on the CPU; one KV head, so both hold it): each rank
// adapts its share of q/gate/up rows and of o/down columns, and the all-reduce sums the
// low-rank terms; the tokens are peft's.
TEST(LoraRuntime, TensorParallelRanksGivePeftGreedy) {
  RuntimeConfig rc = lora_config();
  rc.tensor_parallel_size = 2;
  auto rt = Runtime::create(rc);
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> want;
  for (const char* name : {"sql", "chat"}) {
    const std::string g = adapter_dir(name) + "/golden.safetensors";
    want.push_back(golden_ids(g, "case1.greedy"));
    reqs.push_back(greedy(golden_ids(g, "case1.input_ids"), static_cast<int32_t>(want.back().size()), (*rt)->find_lora(name)));
  }
  const auto out = run(**rt, reqs);
  for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(out[i].tokens, want[i]) << reqs[i].lora->name;
}

TEST(LoraRuntime, PrefixCacheIsPerAdapter) {
  auto rt = Runtime::create(lora_config());
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  auto sql = (*rt)->find_lora("sql");
  auto chat = (*rt)->find_lora("chat");
  const std::vector<int32_t> p = golden_ids(adapter_dir("sql") + "/golden.safetensors", "case1.input_ids");  // 64 tokens
  ASSERT_EQ(p.size(), 64u);
  const auto first = run(**rt, {greedy(p, 4, sql)});
  EXPECT_EQ(first[0].cached, 0);
  const auto again = run(**rt, {greedy(p, 4, sql)});
  EXPECT_EQ(again[0].cached, 48) << "the same adapter reuses its full blocks (the last is computed)";
  EXPECT_EQ(again[0].tokens, first[0].tokens);
  const auto base = run(**rt, {greedy(p, 4, nullptr)});
  EXPECT_EQ(base[0].cached, 0) << "the base model must not read the adapter's KV";
  const auto other = run(**rt, {greedy(p, 4, chat)});
  EXPECT_EQ(other[0].cached, 0) << "another adapter must not read it either";
  EXPECT_NE(base[0].tokens, first[0].tokens);
  EXPECT_EQ(run(**rt, {greedy(p, 4, nullptr)})[0].cached, 48);
}

TEST(LoraRuntime, LoadAndUnloadAtRunTime) {
  auto rt = Runtime::create(lora_config());
  ASSERT_TRUE(rt.ok()) << rt.status().to_string();
  Runtime& r = **rt;
  EXPECT_EQ(r.load_lora("sql", adapter_dir("chat")).code(), StatusCode::kInvalidArgument) << "a name in use";
  EXPECT_EQ(r.load_lora("tiny-llama3", adapter_dir("chat")).code(), StatusCode::kInvalidArgument) << "the base name";
  EXPECT_FALSE(r.load_lora("missing", adapter_dir("no-such-adapter")).ok());
  ASSERT_TRUE(r.load_lora("sql2", adapter_dir("sql")).ok());
  EXPECT_EQ(r.lora_adapters().size(), 3u);
  EXPECT_EQ(r.load_lora("fourth", adapter_dir("sql")).code(), StatusCode::kResourceExhausted) << "--max-loras 3";
  // sql2 gives sql's tokens (same factors, another slot).
  const std::vector<int32_t> p = golden_ids(adapter_dir("sql") + "/golden.safetensors", "case0.input_ids");
  const auto out = run(r, {greedy(p, 8, r.find_lora("sql")), greedy(p, 8, r.find_lora("sql2"))});
  EXPECT_EQ(out[0].tokens, golden_ids(adapter_dir("sql") + "/golden.safetensors", "case0.greedy"));
  EXPECT_EQ(out[1].tokens, out[0].tokens);

  ASSERT_TRUE(r.unload_lora("sql2").ok());
  EXPECT_EQ(r.unload_lora("sql2").code(), StatusCode::kNotFound);
  EXPECT_EQ(r.find_lora("sql2"), nullptr);
  ASSERT_TRUE(r.load_lora("fourth", adapter_dir("chat")).ok()) << "sql2's slot is free once unloaded";

  // An adapter still held by a request keeps its slot after the unload.
  std::shared_ptr<const LoraRef> held = r.find_lora("chat");
  ASSERT_TRUE(r.unload_lora("chat").ok());
  EXPECT_EQ(r.find_lora("chat"), nullptr);
  EXPECT_EQ(r.load_lora("fifth", adapter_dir("sql")).code(), StatusCode::kResourceExhausted);
  held.reset();
  EXPECT_TRUE(r.load_lora("fifth", adapter_dir("sql")).ok());
  // The reloaded slot serves the new adapter (sql's factors), not the one it held before.
  const auto fifth = run(r, {greedy(p, 8, r.find_lora("fifth"))});
  EXPECT_EQ(fifth[0].tokens, golden_ids(adapter_dir("sql") + "/golden.safetensors", "case0.greedy"));
}

TEST(LoraRuntime, ConfigIsChecked) {
  RuntimeConfig rc = lora_config();
  rc.max_lora_rank = 4;  // sql has rank 8
  auto rt = Runtime::create(rc);
  ASSERT_FALSE(rt.ok());
  EXPECT_NE(rt.status().message().find("max-lora-rank"), std::string::npos) << rt.status().to_string();
  rc = lora_config();
  rc.max_loras = 1;
  EXPECT_FALSE(Runtime::create(rc).ok());
  rc = lora_config();
  rc.lora_modules.push_back({"sql", adapter_dir("chat")});
  EXPECT_FALSE(Runtime::create(rc).ok());
  rc = lora_config();
  rc.lora_modules.clear();
  auto plain = Runtime::create(rc);
  ASSERT_TRUE(plain.ok());
  EXPECT_FALSE((*plain)->lora_enabled());
  EXPECT_EQ((*plain)->load_lora("sql", adapter_dir("sql")).code(), StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace lancet
