// LlamaExecutor: engine batch -> StepMetadata -> forward (or forward_sampled).
#include "engine/llama_executor.h"

#include "engine/step_inputs.h"
#include "model/step_tables.h"

namespace lancet {

StatusOr<StepMetadata> LlamaExecutor::make_step(std::span<const SeqStepInput> batch) {
  std::vector<SequenceStep> seqs;
  std::vector<std::span<const int32_t>> tables;
  RETURN_IF_ERROR(to_sequence_steps(batch, &seqs, &tables));
  return build_step_with_tables(cache_.block_size(), cache_.config().num_blocks, seqs, tables);
}

Status LlamaExecutor::execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) {
  ASSIGN_OR_RETURN(StepMetadata step, make_step(batch));
  return model_.forward(step, cache_, logits);
}

Status LlamaExecutor::execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                                      std::vector<int32_t>* tokens, std::vector<float>* host_logits) {
  ASSIGN_OR_RETURN(StepMetadata step, make_step(batch));
  tokens->assign(device.size(), -1);
  return model_.forward_sampled(step, cache_, device, tokens->data(), host_logits);
}

}  // namespace lancet
