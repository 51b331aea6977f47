// Speculative decoding on real models through the Runtime (--speculative-config JSON):
// greedy output equals HF's golden continuations on a fixture with n-gram drafts, the model
// as its own draft and a different fixture model as the draft; on SmolLM2 (Q4_1) greedy text
// is identical with and without speculation (self-draft: nearly every draft accepted), and a
// stop string inside an accepted run ends the text where non-speculative decoding ends it.
#include <gtest/gtest.h>

#include "runtime/draft_model.h"
#include "runtime/runtime.h"
#include "io/safetensors.h"
#include "test_paths.h"

namespace lancet {
namespace {

struct Output {
  std::vector<int32_t> tokens;
  std::string text;
  FinishReason reason = FinishReason::kNone;
};

std::vector<Output> run_batch(Runtime& rt, const std::vector<GenerationRequest>& reqs) {
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (const auto& r : reqs) {
    auto s = rt.async_engine().submit(r);
    EXPECT_TRUE(s.ok()) << s.status().to_string();
    streams.push_back(*s);
  }
  std::vector<Output> out(reqs.size());
  for (size_t i = 0; i < streams.size(); ++i) {
    TokenEvent ev;
    while (streams[i]->next(&ev)) {
      if (ev.token >= 0) out[i].tokens.push_back(ev.token);
      out[i].text += ev.text;
      if (ev.finished) out[i].reason = ev.finish_reason;
    }
  }
  return out;
}

TEST(SpeculativeRuntime, FixtureGreedyEqualsHfGoldenWithEveryDraftKind) {
  const std::string fx = testing::fixture_dir("tiny-llama32");
  auto f = SafetensorsFile::open(fx + "/golden.safetensors");
  ASSERT_TRUE(f.ok());
  std::vector<GenerationRequest> reqs;
  std::vector<std::vector<int32_t>> golden;
  for (int i = 0; i < 8; ++i) {
    const TensorView* ids = (*f)->find("case" + std::to_string(i) + ".input_ids");
    const TensorView* g = (*f)->find("case" + std::to_string(i) + ".greedy");
    if (!ids || !g || ids->numel() > 400) continue;
    GenerationRequest r;
    r.prompt.assign(static_cast<const int32_t*>(ids->data), static_cast<const int32_t*>(ids->data) + ids->numel());
    golden.emplace_back(static_cast<const int32_t*>(g->data), static_cast<const int32_t*>(g->data) + g->numel());
    r.params.temperature = 0;
    r.params.ignore_eos = true;
    r.params.max_tokens = static_cast<int32_t>(golden.back().size());
    reqs.push_back(r);
  }
  ASSERT_GE(reqs.size(), 4u);
  const std::string gqa8 = testing::fixture_dir("tiny-gqa8");
  for (const std::string& spec :
       {std::string(R"({"method": "ngram", "num_speculative_tokens": 3, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "adaptive": false})"),
        R"({"method": "draft", "model": ")" + fx + R"(", "num_speculative_tokens": 3, "adaptive": false})",
        R"({"method": "draft", "model": ")" + gqa8 + R"(", "num_speculative_tokens": 2, "adaptive": false})"}) {
    RuntimeConfig rc;
    rc.model = fx;
    rc.max_model_len = 1024;
    rc.speculative_config = spec;
    auto rt = Runtime::create(rc);
    ASSERT_TRUE(rt.ok()) << rt.status().to_string();
    auto out = run_batch(**rt, reqs);
    for (size_t i = 0; i < reqs.size(); ++i) EXPECT_EQ(out[i].tokens, golden[i]) << spec << " case " << i;
    const EngineStats st = (*rt)->async_engine().stats();
    EXPECT_TRUE(st.spec_enabled);
    EXPECT_GT(st.spec_draft_tokens, 0) << spec;
    if (spec.find("\"draft\"") != std::string::npos && spec.find(fx + "\"") != std::string::npos)
      EXPECT_GE(st.spec_accepted_tokens, st.spec_draft_tokens * 95 / 100) << "self-draft acceptance";
    EXPECT_EQ(st.num_free_blocks, st.num_blocks);
  }
}

TEST(SpeculativeRuntime, DraftMustShareTheVocabulary) {
  ModelConfig a, b;
  a.vocab_size = 1024;
  b.vocab_size = 1000;
  EXPECT_NE(check_draft_compatible(a, nullptr, b, nullptr).message().find("vocabulary size"), std::string::npos);
  b.vocab_size = 1024;
  b.eos_token_ids = {5};
  EXPECT_FALSE(check_draft_compatible(a, nullptr, b, nullptr).ok());
  b.eos_token_ids = a.eos_token_ids;
  EXPECT_TRUE(check_draft_compatible(a, nullptr, b, nullptr).ok());
  RuntimeConfig rc;
  rc.model = testing::fixture_dir("tiny-llama32");
  rc.max_model_len = 256;
  rc.speculative_config = R"({"method": "draft", "model": "/nonexistent/draft", "num_speculative_tokens": 2})";
  EXPECT_FALSE(Runtime::create(rc).ok());
  rc.speculative_config = R"({"method": "ngram", "num_speculative_tokens": 0})";
  EXPECT_FALSE(Runtime::create(rc).ok());
}

// A forced acceptance rate (engine/speculative_config.h) changes the output: serving refuses
// it, benchmarks opt in.
TEST(SpeculativeRuntime, ForcedAcceptanceIsForBenchmarksOnly) {
  RuntimeConfig rc;
  rc.model = "unused";
  rc.speculative_config = R"({"method": "ngram", "num_speculative_tokens": 2, "force_acceptance_rate": 0.5})";
  EXPECT_NE(rc.validate().message().find("bench"), std::string::npos);
  rc.allow_forced_acceptance = true;
  EXPECT_TRUE(rc.validate().ok()) << rc.validate().to_string();
}

// The draft's KV cache comes out of the same budget as the target's (on a GPU, out of the
// memory both models' weights leave), so a draft never pushes the process past the budget.
TEST(SpeculativeRuntime, DraftKvCacheSharesTheTargetsBudget) {
  RuntimeConfig rc;
  rc.model = testing::fixture_dir("tiny-llama32");
  rc.max_model_len = 256;
  rc.max_num_seqs = 4;
  rc.kv_cache_memory = int64_t{8} << 20;
  auto plain = Runtime::create(rc);
  ASSERT_TRUE(plain.ok()) << plain.status().to_string();
  const Runtime::MemoryReport alone = (*plain)->memory_report();
  EXPECT_EQ(alone.draft_kv_bytes, 0);
  EXPECT_EQ(alone.draft_weight_bytes, 0);

  rc.speculative_config = R"({"method": "draft", "model": ")" + testing::fixture_dir("tiny-gqa8") +
                          R"(", "num_speculative_tokens": 3})";
  auto spec = Runtime::create(rc);
  ASSERT_TRUE(spec.ok()) << spec.status().to_string();
  const Runtime::MemoryReport m = (*spec)->memory_report();
  EXPECT_GT(m.draft_weight_bytes, 0);
  EXPECT_GT(m.draft_kv_bytes, 0);
  const int64_t target_bytes = m.kv_num_blocks * m.kv_block_bytes;
  EXPECT_LT(m.kv_num_blocks, alone.kv_num_blocks);
  EXPECT_LE(target_bytes + m.draft_kv_bytes, rc.kv_cache_memory);
  // Nearly all of it: less than one target block plus one draft block is left over.
  const int64_t draft_blocks = m.kv_num_blocks + rc.max_num_seqs * (3 / m.kv_block_size + 2);
  ASSERT_EQ(m.draft_kv_bytes % draft_blocks, 0);
  EXPECT_GT(target_bytes + m.draft_kv_bytes + m.kv_block_bytes + m.draft_kv_bytes / draft_blocks, rc.kv_cache_memory);
  EXPECT_EQ((*spec)->async_engine().stats().num_blocks, m.kv_num_blocks);

  // A budget that holds one sequence of the target alone but not with the draft's cache.
  const int64_t one_seq = (256 / m.kv_block_size) * m.kv_block_bytes;
  rc.kv_cache_memory = one_seq + one_seq / 4;
  auto tight = Runtime::create(rc);
  ASSERT_FALSE(tight.ok());
  EXPECT_NE(tight.status().message().find("draft"), std::string::npos) << tight.status().to_string();
  rc.speculative_config.clear();
  EXPECT_TRUE(Runtime::create(rc).ok());
}

TEST(SpeculativeRuntime, SmolLM2GreedyTextIsIdenticalWithSpeculation) {
  const std::string model = testing::default_model();
  ASSERT_FALSE(model.empty()) << "default model missing: run tools/fetch_model.sh";
  auto make = [&](const std::string& spec) {
    RuntimeConfig rc;
    rc.model = model;
    rc.max_model_len = 512;
    rc.max_num_seqs = 4;
    rc.speculative_config = spec;
    auto rt = Runtime::create(rc);
    EXPECT_TRUE(rt.ok()) << rt.status().to_string();
    return std::move(*rt);
  };
  auto plain = make("");
  std::vector<GenerationRequest> reqs;
  for (const char* q : {"List the days of the week, separated by commas."}) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", q}});
    auto ids = plain->encode_chat(messages, ChatTemplateOptions{});
    ASSERT_TRUE(ids.ok());
    GenerationRequest r;
    r.prompt = *ids;
    r.params.temperature = 0;
    r.params.max_tokens = 32;
    reqs.push_back(r);
  }
  const auto ref = run_batch(*plain, reqs);
  ASSERT_FALSE(ref[0].text.empty());
  // A stop string from the middle of the first answer.
  GenerationRequest stopped = reqs[0];
  const std::string mid = ref[0].text.substr(ref[0].text.size() / 2, 4);
  stopped.params.stop = {mid};
  const auto ref_stop = run_batch(*plain, {stopped});
  ASSERT_EQ(ref_stop[0].reason, FinishReason::kStop);
  std::vector<GenerationRequest> both = reqs;
  both.push_back(stopped);

  for (const std::string& spec :
       {R"({"method": "draft", "model": ")" + model + R"(", "num_speculative_tokens": 4, "adaptive": false})",
        std::string(R"({"method": "ngram", "num_speculative_tokens": 4, "prompt_lookup_min": 1, "prompt_lookup_max": 3, "adaptive": false})")}) {
    auto rt = make(spec);
    const auto out = run_batch(*rt, both);
    EXPECT_EQ(out[0].tokens, ref[0].tokens) << spec;
    EXPECT_EQ(out[0].text, ref[0].text);
    EXPECT_EQ(out[1].text, ref_stop[0].text) << spec;
    EXPECT_EQ(out[1].reason, FinishReason::kStop);
    const EngineStats st = rt->async_engine().stats();
    EXPECT_GT(st.spec_accepted_tokens, 0) << spec;
    if (spec.find("draft") != std::string::npos)
      EXPECT_GE(st.spec_accepted_tokens, st.spec_draft_tokens * 95 / 100) << "self-draft acceptance";
  }
}

}  // namespace
}  // namespace lancet
