// Test doubles for the server's tests that need no weights: a model executor whose next token
// is (last + 1) mod 100, one millisecond a step, and a ServingModel over an AsyncEngine that
// takes token-id prompts only (no tokenizer, no chat template: chat requests fail with 400,
// as they would on such a model).
#pragma once

#include <chrono>
#include <cstdlib>
#include <string>
#include <thread>

#include "engine/async_engine.h"
#include "engine/successor_logits.h"
#include "server/serving_model.h"

namespace lancet::testing {

class MillisecondSuccessorModel : public ModelExecutor {
 public:
  int64_t vocab_size() const override { return 100; }
  int32_t block_size() const override { return 16; }
  int64_t num_blocks() const override { return 400; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    successor_logits(batch, 100, logits);
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
    return OkStatus();
  }
};

class TokenIdServingModel : public server::ServingModel {
 public:
  // engine: null for tests that never reach the engine (engine() then aborts).
  explicit TokenIdServingModel(AsyncEngine* engine, std::string name = "fake", int64_t max_model_len = 4096,
                               int64_t vocab = 100)
      : engine_(engine), name_(std::move(name)), max_model_len_(max_model_len), vocab_(vocab) {}
  std::string name() const override { return name_; }
  int64_t max_model_len() const override { return max_model_len_; }
  int64_t vocab_size() const override { return vocab_; }
  bool has_tokenizer() const override { return false; }
  bool has_chat_template() const override { return false; }
  StatusOr<std::vector<int32_t>> encode(const std::string&, bool) const override {
    return InvalidArgument("no tokenizer");
  }
  StatusOr<std::vector<int32_t>> encode_chat(const nlohmann::ordered_json&, const server::ChatEnding&) const override {
    return InvalidArgument("this model has no chat template");
  }
  std::string decode(std::span<const int32_t>) const override { return ""; }
  std::string token_text(int32_t) const override { return ""; }
  AsyncEngine& engine() override {
    if (!engine_) std::abort();
    return *engine_;
  }

 private:
  AsyncEngine* engine_;
  std::string name_;
  int64_t max_model_len_, vocab_;
};

}  // namespace lancet::testing
