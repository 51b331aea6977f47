// What the bytes of one KV block mean outside the process (the shared KV tier, kv_tier/):
// every layer's K and V of one block, rank after rank, each [block_size, rank's kv heads,
// head_dim] in the cache's dtype. Two caches may exchange blocks only when these fields are
// equal; an FP8 cache also needs the same per-layer scales (scales_digest).
#pragma once

#include <cstdint>

namespace lancet {

struct KvBlockLayout {
  uint32_t num_layers = 0;
  uint32_t num_kv_heads = 0;  // all ranks together
  uint32_t head_dim = 0;
  uint32_t block_size = 0;
  uint32_t dtype_code = 0;    // kv_layout_dtype_code(): 1 f32, 2 bf16, 3 f8 e4m3
  uint32_t num_ranks = 1;     // the payload is ordered rank by rank
  uint32_t element_bytes = 0;
  uint64_t scales_digest = 0; // FP8: a hash of the per-layer K/V scales; 0 otherwise

  // [num_layers, 2, block_size, num_kv_heads, head_dim] elements.
  int64_t payload_bytes() const {
    return static_cast<int64_t>(num_layers) * 2 * block_size * num_kv_heads * head_dim * element_bytes;
  }
  bool operator==(const KvBlockLayout&) const = default;
};

}  // namespace lancet
