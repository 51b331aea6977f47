// A model executor for host-work benchmarks: it builds and copies each step's metadata as the
// CUDA executor does (into host memory here) and returns device-sampled tokens at once (a fixed
// walk over ordinary text tokens), so a step's wall time is the engine's host work alone.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "runner/model_executor.h"
#include "runner/step_builder.h"
#include "runner/step_upload.h"

namespace lancet::bench {

class InstantExecutor : public ModelExecutor {
 public:
  InstantExecutor(Backend& be, int64_t vocab, int64_t num_blocks, int32_t block_size)
      : vocab_(vocab), num_blocks_(num_blocks), bs_(block_size), uploader_(be) {}
  int64_t vocab_size() const override { return vocab_; }
  int32_t block_size() const override { return bs_; }
  int64_t num_blocks() const override { return num_blocks_; }
  bool supports_device_sampling() const override { return true; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    RETURN_IF_ERROR(prepare(batch));
    int64_t rows = 0;
    for (const SeqStepInput& in : batch) rows += in.logits_rows();
    logits->assign(static_cast<size_t>(rows * vocab_), 0.0f);
    return OkStatus();
  }
  Status execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                         std::vector<int32_t>* tokens, std::vector<float>* host_logits) override {
    RETURN_IF_ERROR(prepare(batch));
    tokens->resize(device.size());
    // Ordinary text tokens: a fixed walk over the lower vocabulary (no special tokens).
    for (size_t i = 0; i < device.size(); ++i)
      (*tokens)[i] = static_cast<int32_t>(1000 + (device[i].counter * 7919 + device[i].seed) % 20000);
    host_logits->clear();
    return OkStatus();
  }

 private:
  Status prepare(std::span<const SeqStepInput> batch) {
    ASSIGN_OR_RETURN(StepMetadata st, build_step(bs_, num_blocks_, batch));
    TpRankLayout one;
    one.vocab = vocab_;
    ASSIGN_OR_RETURN(StepView v, uploader_.upload(st, one));
    (void)v;
    return OkStatus();
  }
  int64_t vocab_, num_blocks_;
  int32_t bs_;
  StepUploader uploader_;
};

}  // namespace lancet::bench
