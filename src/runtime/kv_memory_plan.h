// The memory budget of the KV cache: how many blocks the target's (and the draft model's)
// cache get, from --kv-cache-memory, or on a GPU from what --gpu-memory-utilization leaves of
// the device after the weights (already loaded) and a reserve for activations, or on the CPU
// from room for every sequence slot at full length (capped at 2 GiB).
#pragma once

#include <cstdint>

#include "backend/backend.h"
#include "core/status.h"
#include "io/model_config.h"

namespace lancet {

struct KvMemoryInputs {
  int32_t block_size = 16;
  int64_t max_model_len = 0;
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t kv_cache_memory = 0;  // bytes for the whole group; 0 = automatic
  double gpu_memory_utilization = 0.9;
  int tensor_parallel_size = 1;
  int64_t block_bytes = 0;        // one block on one rank, K and V of every layer
  const ModelConfig* target = nullptr;
  // Speculative decoding with a draft model (null / 0 without one): the draft's cache takes as
  // many blocks as the target's plus extra_draft_blocks (room for each sequence's drafts).
  const ModelConfig* draft = nullptr;
  int64_t draft_block_bytes = 0;
  int64_t extra_draft_blocks = 0;
};

// The target's number of blocks (per rank: every rank holds its KV heads of every block).
// ResourceExhausted / InvalidArgument when not even one sequence of max_model_len fits.
StatusOr<int64_t> plan_kv_blocks(const KvMemoryInputs& in, Backend& rank0);

}  // namespace lancet
