// One sequence at a time through a ModelExecutor, its blocks taken from a src/kv block manager
// over the executor's blocks: the prefill-and-decode loop of the evaluations, the FP8 KV
// calibration and the tests, with the step built by the same code as the engine's steps.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/status.h"
#include "kv/kv_cache_manager.h"
#include "runner/model_executor.h"

namespace lancet {

class SequenceRunner {
 public:
  explicit SequenceRunner(ModelExecutor& executor);

  // Computes `tokens` at positions [position(), position() + size) and returns the logits
  // ([rows, vocab]) of the new tokens at logits_offsets (increasing offsets into `tokens`).
  // Out of blocks is ResourceExhausted, with nothing computed.
  Status step(std::span<const int32_t> tokens, std::span<const int32_t> logits_offsets, std::vector<float>* logits);
  // The same with the logits of the last new token only (or none).
  Status step_last(std::span<const int32_t> tokens, std::vector<float>* logits, bool want_logits = true);
  int64_t position() const { return pos_; }
  // The LoRA adapter slot its steps are computed with (-1, the default: the base model).
  void set_lora_slot(int32_t slot) { lora_slot_ = slot; }
  const std::vector<BlockId>& block_table() const { return kv_.block_table(0); }
  // Frees the sequence's blocks; the next step starts at position 0.
  void reset();

 private:
  Status run(SeqStepInput in, std::vector<float>* logits);

  ModelExecutor& exec_;
  KvCacheManager kv_;
  int64_t pos_ = 0;
  int32_t lora_slot_ = -1;
};

}  // namespace lancet
