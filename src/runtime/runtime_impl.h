// The parts of Runtime that create() does not own itself: the backends of the ranks, the model,
// its executor (with the KV buffers) and the draft model. Shared by runtime.cc and
// runtime_load.cc only.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "runtime/draft_model.h"
#include "runtime/runtime.h"
#include "engine/speculative_config.h"
#include "model/llama_model.h"
#include "runner/llama_executor.h"

namespace lancet {

struct Runtime::Impl {
  std::vector<std::unique_ptr<Backend>> backends;  // one per rank
  std::unique_ptr<LlamaModel> model;               // every rank's shard
  std::unique_ptr<LlamaExecutor> executor;         // every rank's KV buffers
  std::unique_ptr<DraftModel> draft;               // speculative decoding, method draft (on rank 0)
  std::string bos_text, eos_text;
  DType kv_dtype = DType::kF32;
  SpeculativeConfig spec;
  std::unique_ptr<RedisKvTier> kv_tier;            // --kv-offload; last: stops before the executor goes
};

}  // namespace lancet
