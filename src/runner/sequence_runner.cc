// SequenceRunner: block allocation from the sequence's KvCacheManager, one SeqStepInput a step.
#include "runner/sequence_runner.h"

#include <string>

namespace lancet {
namespace {

constexpr SeqId kSeq = 0;

BlockManagerConfig blocks_of(const ModelExecutor& e) {
  BlockManagerConfig c;
  c.num_blocks = e.num_blocks();
  c.block_size = e.block_size();
  c.enable_prefix_caching = false;
  return c;
}

}  // namespace

SequenceRunner::SequenceRunner(ModelExecutor& executor) : exec_(executor), kv_(blocks_of(executor)) {}

void SequenceRunner::reset() {
  kv_.free(kSeq);
  pos_ = 0;
}

Status SequenceRunner::run(SeqStepInput in, std::vector<float>* logits) {
  const int64_t total = pos_ + static_cast<int64_t>(in.tokens.size());
  if (!kv_.allocate(kSeq, total))
    return ResourceExhausted("kv cache: the sequence needs " + std::to_string(kv_.blocks_needed(kSeq, total)) +
                             " more blocks, " + std::to_string(kv_.num_free_blocks()) + " free");
  in.start_pos = pos_;
  in.block_table = kv_.block_table(kSeq);
  in.lora_slot = lora_slot_;
  const SeqStepInput batch[1] = {in};
  RETURN_IF_ERROR(exec_.execute(batch, logits));
  pos_ = total;
  return OkStatus();
}

Status SequenceRunner::step(std::span<const int32_t> tokens, std::span<const int32_t> offsets,
                            std::vector<float>* logits) {
  SeqStepInput in;
  in.tokens = tokens;
  in.logits_offsets = offsets;
  return run(in, logits);
}

Status SequenceRunner::step_last(std::span<const int32_t> tokens, std::vector<float>* logits, bool want_logits) {
  SeqStepInput in;
  in.tokens = tokens;
  in.need_logits = want_logits;
  return run(in, logits);
}

}  // namespace lancet
