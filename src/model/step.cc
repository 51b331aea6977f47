// build_step: reserves cache blocks for each sequence, then builds the step from its tables.
#include "model/step.h"

#include <string>

#include "model/step_tables.h"

namespace lancet {

StatusOr<StepMetadata> build_step(PagedKvCache& cache, const std::vector<SequenceStep>& seqs) {
  std::vector<std::span<const int32_t>> tables;
  tables.reserve(seqs.size());
  for (const SequenceStep& s : seqs) {
    if (s.num_tokens < 0 || s.start_pos < 0)
      return InvalidArgument("step: sequence " + std::to_string(s.seq) + " has bad token range");
    RETURN_IF_ERROR(cache.reserve(s.seq, s.start_pos + s.num_tokens));
  }
  for (const SequenceStep& s : seqs) {
    ASSIGN_OR_RETURN(const std::vector<int32_t>* table, cache.block_table(s.seq));
    tables.emplace_back(table->data(), table->size());
  }
  return build_step_with_tables(cache.block_size(), cache.config().num_blocks, seqs, tables);
}

}  // namespace lancet
