// Admission's second lookup: after the local prefix cache misses, the blocks that follow are
// asked of the shared KV tier (engine/kv_tier.h), batch by batch; each leading hit is loaded
// into a fresh block (ModelExecutor::write_kv_block), appended to the sequence's table and
// registered in the prefix cache, so the sequence computes only the rest.
#pragma once

#include <cstdint>
#include <span>

#include "engine/kv_tier.h"
#include "kv/kv_cache_manager.h"
#include "runner/model_executor.h"

namespace lancet {

// Returns the tokens loaded (a multiple of the block size). Never fails: a block that cannot
// be loaded, or no free block, ends the run there. The sequence's table must hold only
// blocks with keys (what match_prefix leaves).
int64_t load_prefix_from_tier(KvTier& tier, ModelExecutor& model, KvCacheManager& kv, SeqId seq,
                              std::span<const int32_t> tokens);

}  // namespace lancet
