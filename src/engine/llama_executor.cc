// LlamaExecutor: engine batch -> StepMetadata -> forward.
#include "engine/llama_executor.h"

#include "model/step_tables.h"

namespace lancet {

Status LlamaExecutor::execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) {
  std::vector<SequenceStep> seqs;
  std::vector<std::span<const int32_t>> tables;
  seqs.reserve(batch.size());
  tables.reserve(batch.size());
  for (size_t i = 0; i < batch.size(); ++i) {
    const SeqStepInput& in = batch[i];
    SequenceStep s;
    s.seq = static_cast<int64_t>(i);
    s.tokens = in.tokens.data();
    s.num_tokens = static_cast<int64_t>(in.tokens.size());
    s.start_pos = in.start_pos;
    const int32_t rows = in.logits_rows();
    if (rows == 0) {
      s.logits = LogitsMode::kNone;
    } else if (rows == 1) {
      s.logits = LogitsMode::kLast;
    } else if (rows >= s.num_tokens) {
      if (rows > s.num_tokens) return InvalidArgument("a sequence asks for more logits rows than it has new tokens");
      s.logits = LogitsMode::kAll;
    } else {
      s.logits = LogitsMode::kSelected;
      for (int64_t j = s.num_tokens - rows; j < s.num_tokens; ++j) s.logits_offsets.push_back(static_cast<int32_t>(j));
    }
    seqs.push_back(std::move(s));
    tables.emplace_back(in.block_table.data(), in.block_table.size());
  }
  ASSIGN_OR_RETURN(StepMetadata step,
                   build_step_with_tables(backend_, cache_.block_size(), cache_.config().num_blocks, seqs, tables));
  return model_.forward(step, cache_, logits);
}

}  // namespace lancet
