// to_sequence_steps: which logits rows each sequence needs (none, its last token, all of its
// new tokens, or the last N: speculative verification).
#include "engine/step_inputs.h"

namespace lancet {

Status to_sequence_steps(std::span<const SeqStepInput> batch, std::vector<SequenceStep>* seqs,
                         std::vector<std::span<const int32_t>>* tables) {
  seqs->clear();
  tables->clear();
  seqs->reserve(batch.size());
  tables->reserve(batch.size());
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
    seqs->push_back(std::move(s));
    tables->emplace_back(in.block_table.data(), in.block_table.size());
  }
  return OkStatus();
}

}  // namespace lancet
