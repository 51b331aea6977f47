// Structured-output constraints through the engine, over a fake model that prefers the
// successor of the last token: sampled tokens follow the constraint's mask, end tokens are
// allowed only while the document is complete, the sequence ends (stop) when the constraint
// is done, each of n choices has its own state, and constrained rows are sampled on the device
// when the executor samples there, their masks travelling with the rows (DeviceSampleRow).
#include "engine/engine.h"

#include <gtest/gtest.h>

#include <map>

#include "engine/successor_logits.h"
#include "runner/token_constraint.h"

namespace lancet {
namespace {

constexpr int64_t kVocab = 8;
constexpr int32_t kEos = 7;

// Allows exactly script[pos] next; complete once complete_at tokens are in, done at the end.
class ScriptConstraint : public TokenConstraint {
 public:
  ScriptConstraint(std::vector<int32_t> script, size_t complete_at) : script_(std::move(script)), complete_at_(complete_at) {}
  std::unique_ptr<TokenConstraint> clone() const override { return std::make_unique<ScriptConstraint>(*this); }
  void allowed_tokens(int64_t vocab, std::vector<uint32_t>* allowed) const override {
    allowed->assign(static_cast<size_t>((vocab + 31) / 32), 0u);
    if (pos_ < script_.size()) (*allowed)[0] |= 1u << script_[pos_];
  }
  bool accept(int32_t token) override {
    if (pos_ >= script_.size() || token != script_[pos_]) return false;
    ++pos_;
    return true;
  }
  bool complete() const override { return pos_ >= complete_at_; }
  bool done() const override { return pos_ == script_.size(); }

 private:
  std::vector<int32_t> script_;
  size_t complete_at_;
  size_t pos_ = 0;
};

class SuccessorModel : public ModelExecutor {
 public:
  explicit SuccessorModel(bool device) : device_(device) {}
  int64_t vocab_size() const override { return kVocab; }
  int32_t block_size() const override { return 4; }
  int64_t num_blocks() const override { return 64; }
  bool supports_device_sampling() const override { return device_; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    testing::successor_logits(batch, kVocab, logits);
    host_rows += static_cast<int64_t>(logits->size()) / kVocab;
    return OkStatus();
  }
  Status execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                         std::vector<int32_t>* tokens, std::vector<float>* host_logits) override {
    std::vector<float> all;
    testing::successor_logits(batch, kVocab, &all);
    std::vector<uint8_t> on(all.size() / kVocab, 0);
    tokens->clear();
    for (const DeviceSampleRow& d : device) {
      on[static_cast<size_t>(d.row)] = 1;
      // The device sampler's semantics, the row's mask included.
      const std::span<const float> row(all.data() + static_cast<size_t>(d.row) * kVocab, kVocab);
      tokens->push_back(draw_sample_row(row, d));
      masked_rows += d.allowed != nullptr;
    }
    device_rows += static_cast<int64_t>(device.size());
    host_logits->clear();
    for (size_t r = 0; r < on.size(); ++r)
      if (!on[r]) host_logits->insert(host_logits->end(), all.begin() + r * kVocab, all.begin() + (r + 1) * kVocab);
    host_rows += static_cast<int64_t>(host_logits->size()) / kVocab;
    return OkStatus();
  }
  int64_t host_rows = 0, device_rows = 0, masked_rows = 0;

 private:
  bool device_;
};

struct Finished {
  std::vector<int32_t> tokens;
  FinishReason reason = FinishReason::kNone;
  bool keeps_token = false;
};

// Runs the requests to the end; per (request, choice): tokens and finish reason.
std::map<std::pair<int64_t, int32_t>, Finished> run(ModelExecutor& model, const std::vector<GenerationRequest>& reqs) {
  EngineConfig cfg;
  cfg.scheduler.max_model_len = 64;
  cfg.eos_token_ids = {kEos};
  Engine engine(cfg, &model);
  for (const auto& r : reqs) EXPECT_TRUE(engine.add_request(r).ok());
  std::map<std::pair<int64_t, int32_t>, Finished> out;
  for (int guard = 0; engine.has_work() && guard < 1000; ++guard) {
    auto ev = engine.step();
    EXPECT_TRUE(ev.ok());
    for (const TokenEvent& e : *ev) {
      Finished& f = out[{e.request_id, e.index}];
      if (e.token >= 0) f.tokens.push_back(e.token);
      if (e.finished) f.reason = e.finish_reason;
      if (e.finished) f.keeps_token = e.stop_keeps_token;
    }
  }
  return out;
}

GenerationRequest request(std::shared_ptr<const TokenConstraint> c, int32_t n = 1) {
  GenerationRequest r;
  r.prompt = {1, 2};
  r.params.temperature = 0;
  r.params.max_tokens = 10;
  r.params.n = n;
  r.params.constraint = std::move(c);
  return r;
}

TEST(ConstrainedEngine, FollowsTheMaskAndStopsWhenDone) {
  SuccessorModel model(false);
  auto out = run(model, {request(std::make_shared<ScriptConstraint>(std::vector<int32_t>{5, 1, 4}, 3))});
  ASSERT_EQ(out.size(), 1u);
  EXPECT_EQ(out.begin()->second.tokens, (std::vector<int32_t>{5, 1, 4}));  // the model alone says 3, 4, 5
  EXPECT_EQ(out.begin()->second.reason, FinishReason::kStop);
  EXPECT_TRUE(out.begin()->second.keeps_token);  // the last token is text, not an end token
}

TEST(ConstrainedEngine, EndTokenOnlyWhileComplete) {
  // After [6] the document is complete: the successor of 6 is the end token, now allowed.
  SuccessorModel model(false);
  auto out = run(model, {request(std::make_shared<ScriptConstraint>(std::vector<int32_t>{6, 2, 3}, 1))});
  EXPECT_EQ(out.begin()->second.tokens, (std::vector<int32_t>{6, kEos}));
  EXPECT_EQ(out.begin()->second.reason, FinishReason::kStop);
  EXPECT_FALSE(out.begin()->second.keeps_token);
  // Not complete after [6]: the end token stays masked.
  auto strict = run(model, {request(std::make_shared<ScriptConstraint>(std::vector<int32_t>{6, 2, 3}, 3))});
  EXPECT_EQ(strict.begin()->second.tokens, (std::vector<int32_t>{6, 2, 3}));
}

TEST(ConstrainedEngine, ChoicesHaveTheirOwnStateAndOthersAreFree) {
  SuccessorModel model(false);
  auto c = std::make_shared<ScriptConstraint>(std::vector<int32_t>{4, 4}, 2);
  GenerationRequest free = request(nullptr);
  free.params.max_tokens = 3;
  auto out = run(model, {request(c, 2), free});
  ASSERT_EQ(out.size(), 3u);
  for (const auto& [key, f] : out) {
    if (key.first == 1) EXPECT_EQ(f.tokens, (std::vector<int32_t>{4, 4})) << key.second;
    else EXPECT_EQ(f.tokens, (std::vector<int32_t>{3, 4, 5}));
  }
}

TEST(ConstrainedEngine, ConstrainedRowsAreSampledOnTheDevice) {
  SuccessorModel model(true);
  GenerationRequest free = request(nullptr);
  free.params.max_tokens = 3;
  auto out = run(model, {request(std::make_shared<ScriptConstraint>(std::vector<int32_t>{5, 5, 5}, 3)), free});
  EXPECT_EQ(out.at({1, 0}).tokens, (std::vector<int32_t>{5, 5, 5}));
  EXPECT_EQ(out.at({2, 0}).tokens, (std::vector<int32_t>{3, 4, 5}));
  EXPECT_EQ(model.host_rows, 0);
  EXPECT_EQ(model.device_rows, 6);  // both requests' rows
  EXPECT_EQ(model.masked_rows, 3);  // the constrained request's, with its mask (the model alone says 3, 4, 5)
}

}  // namespace
}  // namespace lancet
