// ModelRunner: which rows are sampled on the device, which on the host and which come back as
// verification logits, with a fake executor whose logits are known, and the checks on what the
// executor returns.
#include "runner/model_runner.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "runner/sampler.h"

namespace lancet {
namespace {

constexpr int64_t kVocab = 16;

// Row r of the step's logits peaks at token (r + 1) % kVocab; device sampling returns
// 10 + row (the runner must map it back to its sequence) unless `bad_token` says otherwise.
class FakeExecutor : public ModelExecutor {
 public:
  explicit FakeExecutor(bool device) : device_(device) {}
  int64_t vocab_size() const override { return kVocab; }
  int32_t block_size() const override { return 16; }
  int64_t num_blocks() const override { return 8; }
  bool supports_device_sampling() const override { return device_; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    return execute_sampled(batch, {}, &tokens_, logits);
  }
  Status execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                         std::vector<int32_t>* tokens, std::vector<float>* host_logits) override {
    int64_t rows = 0;
    for (const SeqStepInput& in : batch) rows += in.logits_rows();
    std::vector<bool> on_device(rows, false);
    tokens->clear();
    for (const DeviceSampleRow& d : device) {
      on_device[d.row] = true;
      tokens->push_back(bad_token >= 0 ? bad_token : 10 + d.row);
      device_rows.push_back(d.row);
    }
    host_logits->clear();
    for (int64_t r = 0; r < rows; ++r) {
      if (on_device[r]) continue;
      for (int64_t v = 0; v < kVocab; ++v) host_logits->push_back(v == (r + 1) % kVocab ? 5.0f : 0.0f);
    }
    return OkStatus();
  }
  std::vector<int32_t> device_rows;
  int32_t bad_token = -1;

 private:
  bool device_;
  std::vector<int32_t> tokens_;
};

struct Batch {
  std::vector<int32_t> tokens = {1, 2, 3, 4};
  std::vector<BlockId> table = {0};
  SamplingParams plain, with_logprobs;
  std::vector<RunnerSeq> seqs;
  Batch() {
    plain.temperature = 0.0f;
    with_logprobs.temperature = 0.0f;
    with_logprobs.logprobs = 1;
    // 0: prefill chunk without logits; 1: decode, plain; 2: decode with logprobs; 3: a
    // verification of 3 rows; 4: decode, plain.
    for (int i = 0; i < 5; ++i) {
      RunnerSeq s;
      s.input.block_table = table;
      s.input.tokens = std::span<const int32_t>(tokens).first(i == 3 ? 3 : i == 0 ? 4 : 1);
      s.input.need_logits = i != 0;
      s.input.num_logits = i == 3 ? 3 : 0;
      s.verify = i == 3;
      s.params = i == 2 ? &with_logprobs : &plain;
      seqs.push_back(s);
    }
  }
};

TEST(ModelRunner, PlainRowsOnTheDeviceOthersOnTheHost) {
  FakeExecutor exec(/*device=*/true);
  ModelRunner runner(exec);
  Batch b;
  RunnerOutput out;
  const Status st = runner.execute(b.seqs, &out);
  ASSERT_TRUE(st.ok()) << st.to_string();
  // Rows of the step: seq 1 -> 0, seq 2 -> 1, seq 3 -> 2..4, seq 4 -> 5.
  EXPECT_EQ(exec.device_rows, (std::vector<int32_t>{0, 5}));
  ASSERT_EQ(out.samples.size(), 5u);
  EXPECT_EQ(out.samples[0].token, -1);
  EXPECT_EQ(out.samples[1].token, 10);
  EXPECT_EQ(out.samples[4].token, 15);
  // Seq 2 is host row 0 of the host logits (step row 1): its peak is at (1 + 1) % 16.
  EXPECT_EQ(out.samples[2].token, 2);
  EXPECT_EQ(out.samples[2].top_logprobs.size(), 1u);
  // The verification rows: host rows 1..3 (step rows 2..4), returned untouched.
  EXPECT_EQ(out.verify_row, (std::vector<int64_t>{-1, -1, -1, 1, -1}));
  ASSERT_GE(out.verify_logits.size(), static_cast<size_t>(4 * kVocab));
  for (int64_t j = 0; j < 3; ++j) EXPECT_EQ(out.verify_logits[(1 + j) * kVocab + (3 + j) % kVocab], 5.0f);
}

TEST(ModelRunner, WithoutDeviceSamplingEveryRowIsSampledOnTheHost) {
  FakeExecutor exec(/*device=*/false);
  ModelRunner runner(exec);
  Batch b;
  RunnerOutput out;
  const Status st = runner.execute(b.seqs, &out);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_TRUE(exec.device_rows.empty());
  EXPECT_EQ(out.samples[1].token, 1);  // step row 0
  EXPECT_EQ(out.samples[2].token, 2);  // step row 1
  EXPECT_EQ(out.samples[4].token, 6);  // step row 5
  EXPECT_EQ(out.verify_row[3], 2);
}

TEST(ModelRunner, DeviceTokenOutsideTheVocabularyIsAnError) {
  FakeExecutor exec(/*device=*/true);
  exec.bad_token = static_cast<int32_t>(kVocab);
  ModelRunner runner(exec);
  Batch b;
  RunnerOutput out;
  const Status s = runner.execute(b.seqs, &out);
  EXPECT_EQ(s.code(), StatusCode::kInternal);
  EXPECT_NE(s.to_string().find("outside the vocabulary"), std::string::npos) << s.to_string();
}

// Prompt logprobs: a chunk's scored rows come to the host and are scored at their targets; a
// chunk that does not end the prompt samples nothing, the one that does samples its last row.
TEST(ModelRunner, PromptRowsAreScoredAndOnlyTheLastRowIsSampled) {
  FakeExecutor exec(/*device=*/true);
  ModelRunner runner(exec);
  SamplingParams p;
  p.temperature = 0.0f;
  const std::vector<int32_t> tokens = {1, 2, 3, 4};
  const std::vector<BlockId> table = {0};
  const std::vector<int32_t> mid_offsets = {0, 1, 2, 3}, last_offsets = {0, 1, 2};
  const std::vector<int32_t> mid_targets = {5, 2, 9, 1}, last_targets = {4, 4};
  std::vector<RunnerSeq> seqs(3);
  for (RunnerSeq& s : seqs) {
    s.input.tokens = tokens;
    s.input.block_table = table;
    s.params = &p;
  }
  seqs[0].input.logits_offsets = mid_offsets;  // a middle chunk: 4 scored rows, no sample
  seqs[0].prompt_targets = mid_targets;
  seqs[0].prompt_top = 2;
  seqs[1].input.need_logits = true;  // a plain decode on the device
  seqs[1].input.tokens = std::span<const int32_t>(tokens).first(1);
  seqs[2].input.need_logits = true;  // the last chunk: 2 scored rows and the sample row
  seqs[2].input.logits_offsets = last_offsets;
  seqs[2].prompt_targets = last_targets;
  RunnerOutput out;
  const Status st = runner.execute(seqs, &out);
  ASSERT_TRUE(st.ok()) << st.to_string();
  EXPECT_FALSE(seqs[0].samples());
  EXPECT_TRUE(seqs[2].samples());
  EXPECT_EQ(exec.device_rows, (std::vector<int32_t>{4}));  // step rows: seq 0 -> 0..3, seq 1 -> 4, seq 2 -> 5..7
  EXPECT_EQ(out.samples[0].token, -1);
  EXPECT_EQ(out.samples[1].token, 14);
  // Host rows: seq 0 -> 0..3, seq 2 -> 4..6 (step rows 5..7). Step row r peaks at (r + 1) % 16
  // with logit 5.
  EXPECT_EQ(out.samples[2].token, 8);
  ASSERT_EQ(out.prompt_logprobs[0].size(), 4u);
  ASSERT_EQ(out.prompt_logprobs[2].size(), 2u);
  EXPECT_TRUE(out.prompt_logprobs[1].empty());
  const double peak = 5.0 - std::log(std::exp(5.0) + 15.0), flat = -std::log(std::exp(5.0) + 15.0);
  const PromptLogprob& hit = out.prompt_logprobs[0][1];  // step row 1 peaks at 2 = its target
  EXPECT_EQ(hit.token, 2);
  EXPECT_NEAR(hit.logprob, peak, 1e-6);
  EXPECT_EQ(hit.rank, 1);
  ASSERT_EQ(hit.top.size(), 2u);
  EXPECT_EQ(hit.top[0].token, 2);
  EXPECT_EQ(hit.top[1].token, 0);  // ties go to the lower id
  const PromptLogprob& miss = out.prompt_logprobs[0][0];  // step row 0 peaks at 1, target 5
  EXPECT_NEAR(miss.logprob, flat, 1e-6);
  EXPECT_EQ(miss.rank, 2);
  EXPECT_EQ(out.prompt_logprobs[2][0].token, 4);
  EXPECT_EQ(out.prompt_logprobs[2][0].rank, 2);        // step row 5 peaks at 6
  EXPECT_EQ(out.prompt_logprobs[2][1].rank, 2);        // step row 6 peaks at 7
  EXPECT_TRUE(out.prompt_logprobs[2][1].top.empty());  // prompt_top 0
}

// A device row's structured-output mask (DeviceSampleRow::allowed) draws what the host sampler
// draws with the same mask in SampleContext::allowed_tokens: greedy and seeded rows, and a mask
// shorter than the vocabulary's words (the tokens past it refused).
TEST(ModelRunner, DeviceRowMaskDrawsAsTheHostSampler) {
  const int64_t V = 70;
  std::vector<float> x(V);
  for (int64_t t = 0; t < V; ++t) x[t] = std::sin(0.7f * static_cast<float>(t)) * 3.0f;
  const std::vector<uint32_t> mask = {1u << 3 | 1u << 9, 1u << (40 - 32), 1u << (66 - 64) | 1u << (69 - 64)};
  auto allowed = [&](int32_t t, size_t words) {
    return static_cast<size_t>(t >> 5) < words && (mask[t >> 5] >> (t & 31) & 1);
  };
  for (size_t words : {size_t{3}, size_t{1}}) {
    for (float temp : {0.0f, 1.0f, 3.0f}) {
      for (uint64_t counter = 0; counter < 40; ++counter) {
        DeviceSampleRow d;
        d.temperature = temp;
        d.seed = 1234;
        d.counter = counter;
        d.allowed = mask.data();
        d.allowed_words = static_cast<int32_t>(words);
        SamplingParams p;
        p.temperature = temp;
        SampleContext ctx;
        ctx.seed = 1234;
        const std::vector<int32_t> outputs(counter, 0);  // the draw's position (no penalties)
        ctx.output_tokens = outputs;
        ctx.allowed_tokens = std::span<const uint32_t>(mask).first(words);
        const int32_t got = draw_sample_row(x, d);
        EXPECT_EQ(got, sample_token(x, p, ctx).token) << "words " << words << " T " << temp << " counter " << counter;
        EXPECT_TRUE(allowed(got, words)) << got;
      }
    }
  }
  // Without the mask the row's best token is one the mask refuses.
  DeviceSampleRow free;
  free.temperature = 0.0f;
  EXPECT_FALSE(allowed(draw_sample_row(x, free), 3));
}

// Rows that need processed logits stay on the host even with device sampling.
TEST(ModelRunner, HostLogitsRule) {
  SamplingParams p;
  SampleContext ctx;
  EXPECT_FALSE(needs_host_logits(p, ctx));
  p.logprobs = 0;
  EXPECT_TRUE(needs_host_logits(p, ctx));
  p = {};
  p.repetition_penalty = 1.1f;
  EXPECT_TRUE(needs_host_logits(p, ctx));
  p = {};
  p.min_tokens = 2;
  const std::vector<int32_t> eos = {7};
  ctx.eos_token_ids = eos;
  EXPECT_TRUE(needs_host_logits(p, ctx));
  const std::vector<int32_t> out = {1, 2};
  ctx.output_tokens = out;
  EXPECT_FALSE(needs_host_logits(p, ctx));
  // A structured-output mask travels with the row to the device sampler.
  const std::vector<uint32_t> mask = {0x5u};
  ctx.allowed_tokens = mask;
  EXPECT_FALSE(needs_host_logits(p, ctx));
}

}  // namespace
}  // namespace lancet
