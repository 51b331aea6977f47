// plan_kv_blocks: bytes per block pair (target + draft), the budget, and the check that one
// full-length sequence fits.
#include "runtime/kv_memory_plan.h"

#include <algorithm>
#include <string>

namespace lancet {
namespace {

// Activations at the largest step of a model on one rank (its share of the split dimensions).
int64_t activation_reserve(const ModelConfig& c, const KvMemoryInputs& in) {
  const int64_t tokens = std::max(in.max_num_batched_tokens, in.max_num_seqs);
  const int tp = in.tensor_parallel_size;
  return tokens * (8 * c.hidden_size + (4 * c.intermediate_size + 4 * c.num_heads * c.head_dim) / tp) * 4 +
         in.max_num_seqs * c.vocab_size * 4 * 2 / tp;
}

}  // namespace

StatusOr<int64_t> plan_kv_blocks(const KvMemoryInputs& in, Backend& rank0) {
  const int64_t blocks_per_seq = (in.max_model_len + in.block_size - 1) / in.block_size;
  const int64_t pair_bytes = in.block_bytes + in.draft_block_bytes;
  const int64_t fixed_bytes = in.extra_draft_blocks * in.draft_block_bytes;
  const int64_t one_seq_bytes = blocks_per_seq * pair_bytes + fixed_bytes;
  int64_t budget = in.kv_cache_memory;
  size_t dev_free = 0, dev_total = 0;
  if (budget == 0 && rank0.memory_info(&dev_free, &dev_total)) {
    // With tensor parallelism every GPU holds the same share, so rank 0's device sizes all.
    const int64_t used = static_cast<int64_t>(dev_total - dev_free);
    const int64_t reserve = activation_reserve(*in.target, in) + (in.draft ? activation_reserve(*in.draft, in) : 0) +
                            (int64_t{1} << 30);
    budget = static_cast<int64_t>(in.gpu_memory_utilization * static_cast<double>(dev_total)) - used - reserve;
    if (budget < one_seq_bytes)
      return ResourceExhausted("GPU memory: " + std::to_string(used >> 20) + " MiB in use of " +
                               std::to_string(dev_total >> 20) + " MiB leaves no room for one sequence of " +
                               std::to_string(in.max_model_len) + " tokens at --gpu-memory-utilization " +
                               std::to_string(in.gpu_memory_utilization) + "; lower --max-model-len");
  } else if (budget > 0) {
    budget /= in.tensor_parallel_size;  // --kv-cache-memory is the whole group's
  }
  if (budget == 0) {
    const int64_t want = blocks_per_seq * pair_bytes * in.max_num_seqs + fixed_bytes;
    budget = std::max(std::min<int64_t>(want, int64_t{2} << 30), one_seq_bytes);
  }
  const int64_t num_blocks = std::max<int64_t>(budget - fixed_bytes, 0) / pair_bytes;
  if (num_blocks < blocks_per_seq)
    return InvalidArgument("the KV cache (" + std::to_string(budget >> 20) + " MiB) cannot hold one sequence of " +
                           std::to_string(in.max_model_len) + " tokens (" + std::to_string(one_seq_bytes >> 20) +
                           " MiB" + (in.draft ? " with the draft model's cache" : "") +
                           "); raise --kv-cache-memory or lower --max-model-len");
  return num_blocks;
}

}  // namespace lancet
