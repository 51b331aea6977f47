// build_step_with_tables: step metadata for sequences whose block tables come from the caller
// (the engine's block manager owns block allocation; the model only reads the tables).
#pragma once

#include <span>
#include <vector>

#include "model/step.h"

namespace lancet {

// tables[i] is the block table of seqs[i] (SequenceStep::seq is ignored); it must cover
// positions [0, start_pos + num_tokens). Block ids must be < num_blocks.
StatusOr<StepMetadata> build_step_with_tables(int64_t block_size, int64_t num_blocks,
                                              const std::vector<SequenceStep>& seqs,
                                              const std::vector<std::span<const int32_t>>& tables);

}  // namespace lancet
