// The block geometry of the paged KV cache, one struct for its two owners: the block allocator
// (kv/kv_cache_manager.h: BlockManagerConfig) hands out block ids in [0, num_blocks), and the
// KV buffers (model/kv_buffers.h: KvBufferConfig) hold num_blocks blocks of block_size tokens
// per layer. Both derive from it, so the numbers are written once.
#pragma once

#include <cstdint>

namespace lancet {

struct KvBlockConfig {
  int64_t num_blocks = 0;
  int32_t block_size = 16;  // tokens per block
};

}  // namespace lancet
