// The engine's batch (SeqStepInput: new tokens, start position, block table, logits rows) as
// the model layer's SequenceStep list plus block tables, shared by the executors.
#pragma once

#include <span>
#include <vector>

#include "engine/model_executor.h"
#include "model/step.h"

namespace lancet {

// InvalidArgument when a sequence asks for more logits rows than it has new tokens.
Status to_sequence_steps(std::span<const SeqStepInput> batch, std::vector<SequenceStep>* seqs,
                         std::vector<std::span<const int32_t>>* tables);

}  // namespace lancet
