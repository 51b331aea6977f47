// build_step: reserves cache blocks for each sequence, then builds the step from its tables;
// StepArenaLayout::view.
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

StepView StepArenaLayout::view(const void* base, int64_t num_tokens, int64_t num_seqs, int64_t max_blocks_per_seq,
                               int64_t num_logits_rows) const {
  const char* d = static_cast<const char*>(base);
  StepView v;
  v.num_tokens = num_tokens;
  v.num_seqs = num_seqs;
  v.max_blocks_per_seq = max_blocks_per_seq;
  v.num_logits_rows = num_logits_rows;
  v.token_ids = reinterpret_cast<const int32_t*>(d + token_ids);
  v.positions = reinterpret_cast<const int32_t*>(d + positions);
  v.query_start = reinterpret_cast<const int32_t*>(d + query_start);
  v.context_lens = reinterpret_cast<const int32_t*>(d + context_lens);
  v.logits_rows = reinterpret_cast<const int32_t*>(d + logits_rows);
  v.slot_mapping = reinterpret_cast<const int64_t*>(d + slot_mapping);
  v.block_tables = reinterpret_cast<const int32_t*>(d + block_tables);
  return v;
}

}  // namespace lancet
