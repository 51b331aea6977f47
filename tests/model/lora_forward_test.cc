// LoRA adapters computed unmerged, per sequence, on tiny-llama3 against Hugging Face peft
// (tests/data/lora-tiny-llama3: two adapters made with peft, one fp32 r8 on q/k/v/o, one bf16
// rsLoRA r4 on q/v/gate/up/down, with peft's logits): each adapter in its slot gives peft's
// logits within eval-logits' 1e-4, whole prompt or chunked; the base and both adapters in one
// batch give each sequence what it gets alone; and `lancet merge-lora`'s checkpoint gives the
// adapter's logits.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "eval/golden_eval.h"
#include "io/lora_adapter.h"
#include "io/model_source.h"
#include "io/safetensors.h"
#include "model/llama_model.h"
#include "runner/llama_executor.h"
#include "lora_test_data.h"
#include "test_paths.h"

namespace lancet {
namespace {

std::string adapter_dir(const std::string& name) { return testing::lora_adapter_dir(name); }

struct Loaded {
  std::unique_ptr<ModelSource> src;
  std::unique_ptr<Backend> be;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<LoraAdapter> sql, chat;
};

// tiny-llama3 with two adapter slots: sql in slot 0, chat in slot 1.
void load(const std::string& model_dir, bool with_lora, Loaded* l) {
  auto src = open_model_source(model_dir);
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  l->src = std::move(*src);
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  l->be = std::move(*be);
  l->be->set_activation_precision(ActivationPrecision::kExact);
  LlamaModelOptions mo;
  mo.max_model_len = 128;
  auto m = LlamaModel::create(*l->src, *l->be, mo);
  ASSERT_TRUE(m.ok()) << m.status().to_string();
  l->model = std::move(*m);
  if (!with_lora) return;
  for (auto [name, dst] : {std::pair{"sql", &l->sql}, std::pair{"chat", &l->chat}}) {
    auto a = LoraAdapter::open(adapter_dir(name));
    ASSERT_TRUE(a.ok()) << a.status().to_string();
    *dst = std::move(*a);
  }
  ASSERT_TRUE(l->model->enable_lora(LoraSlotsConfig{2, 8}).ok());
  ASSERT_TRUE(l->model->set_lora_slot(0, l->sql.get()).ok());
  ASSERT_TRUE(l->model->set_lora_slot(1, l->chat.get()).ok());
}

TEST(LoraForward, EachSlotGivesPeftLogits) {
  Loaded l;
  ASSERT_NO_FATAL_FAILURE(load(testing::fixture_dir("tiny-llama3"), true, &l));
  for (auto [name, slot] : {std::pair{"sql", 0}, std::pair{"chat", 1}}) {
    const std::string golden_path = adapter_dir(name) + "/golden.safetensors";
    auto cases = read_golden_cases(golden_path);
    ASSERT_TRUE(cases.ok()) << cases.status().to_string();
    auto golden = SafetensorsFile::open(golden_path);
    ASSERT_TRUE(golden.ok());
    ASSERT_EQ(cases->size(), 2u);
    for (int64_t chunk : {int64_t{0}, int64_t{5}}) {
      for (const GoldenCase& c : *cases) {
        GoldenEvalOptions eo;
        eo.lora_slot = slot;
        eo.prefill_chunk = chunk;
        auto r = eval_golden_case(*l.model, *l.be, **golden, c, eo);
        ASSERT_TRUE(r.ok()) << r.status().to_string();
        EXPECT_LE(r->rel_err, 1e-4) << name << " " << c.name << " chunk " << chunk;
        EXPECT_EQ(r->top1_agree, r->num_positions) << name << " " << c.name;
        EXPECT_EQ(r->greedy_match, r->greedy_total) << name << " " << c.name;
        // The same case on the base model is far from peft's adapted logits: the check above
        // would fail with the adapter dropped.
        GoldenEvalOptions base = eo;
        base.lora_slot = -1;
        auto rb = eval_golden_case(*l.model, *l.be, **golden, c, base);
        ASSERT_TRUE(rb.ok());
        EXPECT_GT(rb->rel_err, 1e-2) << name << " " << c.name;
      }
    }
  }
}

// Last-position logits of each prompt, computed together in one step (table i: blocks from
// 8 * i) or, with `alone`, one step per prompt.
std::vector<std::vector<float>> last_logits(LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                            const std::vector<int32_t>& slots, bool alone) {
  auto exec = LlamaExecutor::create(model, KvBlockConfig{64, 16}, DType::kF32, LlamaExecutorOptions{});
  EXPECT_TRUE(exec.ok()) << exec.status().to_string();
  std::vector<std::vector<int32_t>> tables(prompts.size());
  std::vector<SeqStepInput> in(prompts.size());
  for (size_t i = 0; i < prompts.size(); ++i) {
    for (int32_t b = 0; b < 8; ++b) tables[i].push_back(static_cast<int32_t>(8 * i) + b);
    in[i].tokens = prompts[i];
    in[i].block_table = tables[i];
    in[i].need_logits = true;
    in[i].lora_slot = slots[i];
  }
  const int64_t V = model.config().vocab_size;
  std::vector<std::vector<float>> out(prompts.size());
  if (alone) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      EXPECT_TRUE((*exec)->execute(std::span<const SeqStepInput>(&in[i], 1), &out[i]).ok());
    }
    return out;
  }
  std::vector<float> all;
  EXPECT_TRUE((*exec)->execute(in, &all).ok());
  for (size_t i = 0; i < prompts.size(); ++i) out[i].assign(all.begin() + i * V, all.begin() + (i + 1) * V);
  return out;
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  double m = a.size() == b.size() ? 0.0 : 1e30;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) m = std::max(m, std::fabs(double{a[i]} - b[i]));
  return m;
}

std::vector<int32_t> golden_prompt(const std::string& adapter, const std::string& c) {
  return testing::golden_ids(adapter_dir(adapter) + "/golden.safetensors", c + ".input_ids");
}

TEST(LoraForward, BaseAndTwoAdaptersInOneBatchMatchEachAlone) {
  Loaded l;
  ASSERT_NO_FATAL_FAILURE(load(testing::fixture_dir("tiny-llama3"), true, &l));
  const std::vector<int32_t> p = golden_prompt("sql", "case1"), q = golden_prompt("chat", "case0");
  // base, sql, chat, sql again (another prompt), base again: two runs of one slot in a batch.
  const std::vector<std::vector<int32_t>> prompts = {p, p, p, q, q};
  const std::vector<int32_t> slots = {-1, 0, 1, 0, -1};
  const auto alone = last_logits(*l.model, prompts, slots, true);
  const auto together = last_logits(*l.model, prompts, slots, false);
  for (size_t i = 0; i < prompts.size(); ++i) {
    double ref = 0;
    for (float v : alone[i]) ref = std::max(ref, std::fabs(double{v}));
    EXPECT_LE(max_abs_diff(alone[i], together[i]), 1e-5 * ref) << "sequence " << i << " (slot " << slots[i] << ")";
  }
  // The three sequences of prompt p differ: each got its own adapter (or none).
  EXPECT_GT(max_abs_diff(alone[0], alone[1]), 1e-2);
  EXPECT_GT(max_abs_diff(alone[0], alone[2]), 1e-2);
  EXPECT_GT(max_abs_diff(alone[1], alone[2]), 1e-2);
}

TEST(LoraForward, MergedCheckpointGivesTheAdaptersLogits) {
  Loaded adapted;
  ASSERT_NO_FATAL_FAILURE(load(testing::fixture_dir("tiny-llama3"), true, &adapted));
  for (auto [name, slot] : {std::pair{"sql", 0}, std::pair{"chat", 1}}) {
    const std::string out_dir = testing::make_temp_dir() + "/merged";
    std::string log;
    ASSERT_EQ(testing::run_command(testing::lancet_binary() + " merge-lora " + testing::fixture_dir("tiny-llama3") +
                                       " " + adapter_dir(name) + " " + out_dir + " --dtype float32 2>&1",
                                   &log),
              0)
        << log;
    Loaded merged;
    ASSERT_NO_FATAL_FAILURE(load(out_dir, false, &merged));
    const std::vector<std::vector<int32_t>> prompts = {golden_prompt(name, "case0"), golden_prompt(name, "case1")};
    const auto want = last_logits(*adapted.model, prompts, {slot, slot}, false);
    const auto got = last_logits(*merged.model, prompts, {-1, -1}, false);
    const auto base = last_logits(*adapted.model, prompts, {-1, -1}, false);
    for (size_t i = 0; i < prompts.size(); ++i) {
      double ref = 0;
      for (float v : want[i]) ref = std::max(ref, std::fabs(double{v}));
      EXPECT_LE(max_abs_diff(want[i], got[i]), 1e-4 * ref) << name << " prompt " << i;
      EXPECT_GT(max_abs_diff(want[i], base[i]), 1e-2 * ref) << name << " prompt " << i;
    }
  }
}

}  // namespace
}  // namespace lancet
