// ModelExecutor over the Llama model: turns the engine's batch (new tokens, start positions,
// block tables from the engine's block manager) into the model's step metadata and runs the
// forward pass on the model's paged KV cache, whose block ids are the engine's. On backends
// with device sampling it also samples the rows the engine asks for where the logits are.
#pragma once

#include <memory>

#include "engine/model_executor.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"

namespace lancet {

class LlamaExecutor : public ModelExecutor {
 public:
  LlamaExecutor(Backend& backend, LlamaModel& model, PagedKvCache& cache)
      : backend_(backend), model_(model), cache_(cache) {}
  int64_t vocab_size() const override { return model_.config().vocab_size; }
  int32_t block_size() const override { return static_cast<int32_t>(cache_.block_size()); }
  int64_t num_blocks() const override { return cache_.config().num_blocks; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override;
  bool supports_device_sampling() const override { return backend_.supports_device_sampling(); }
  Status execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                         std::vector<int32_t>* tokens, std::vector<float>* host_logits) override;

 private:
  StatusOr<StepMetadata> make_step(std::span<const SeqStepInput> batch);

  Backend& backend_;
  LlamaModel& model_;
  PagedKvCache& cache_;
};

}  // namespace lancet
