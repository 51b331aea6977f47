// ModelExecutor over a tensor-parallel group (model/tp_forward.h): the engine's batch and
// block tables go to every rank unchanged (each rank's KV cache holds its KV heads of the same
// blocks), and the gathered logits come back.
#pragma once

#include "engine/model_executor.h"
#include "model/tp_forward.h"

namespace lancet {

class TpExecutor : public ModelExecutor {
 public:
  explicit TpExecutor(TpGroup& group) : group_(group) {}
  int64_t vocab_size() const override { return group_.config().vocab_size; }
  int32_t block_size() const override { return static_cast<int32_t>(group_.cache(0).block_size()); }
  int64_t num_blocks() const override { return group_.cache(0).config().num_blocks; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override;

 private:
  TpGroup& group_;
};

}  // namespace lancet
