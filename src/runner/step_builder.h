// The one conversion from a batch of scheduled sequences (SeqStepInput: new tokens, start
// position, block table from src/kv, logits rows) to the step's metadata, made once per step
// and shared by every rank.
#pragma once

#include <span>

#include "core/status.h"
#include "model/step.h"
#include "runner/model_executor.h"

namespace lancet {

// Each sequence's block table must cover positions [0, start_pos + num_new); block ids must be
// < num_blocks. Logits rows come out in sequence order. Bad input is InvalidArgument /
// OutOfRange naming the sequence. A sequence's lora_slot must be < lora_num_slots (the model's
// adapter slots; 0 when it has none).
StatusOr<StepMetadata> build_step(int32_t block_size, int64_t num_blocks, std::span<const SeqStepInput> batch,
                                  int64_t lora_num_slots = 0);

}  // namespace lancet
