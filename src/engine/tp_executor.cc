// TpExecutor: engine batch -> per-sequence steps and block tables -> TpGroup::forward_with_tables.
#include "engine/tp_executor.h"

#include "engine/step_inputs.h"

namespace lancet {

Status TpExecutor::execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) {
  std::vector<SequenceStep> seqs;
  std::vector<std::span<const int32_t>> tables;
  RETURN_IF_ERROR(to_sequence_steps(batch, &seqs, &tables));
  return group_.forward_with_tables(seqs, tables, logits);
}

}  // namespace lancet
