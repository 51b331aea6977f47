// The paged KV cache: per layer, K and V of [num_blocks, block_size, num_kv_heads, head_dim]
// in backend memory, plus a simple block allocator and one block table per sequence. The
// engine's shared block pool (src/kv) replaces the allocator later; the layout stays.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace lancet {

struct KvCacheConfig {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t block_size = 16;
  int64_t num_blocks = 0;
  DType dtype = DType::kF32;  // kF32 or kBF16 on CPU
};

class PagedKvCache {
 public:
  static StatusOr<std::unique_ptr<PagedKvCache>> create(Backend& backend, const KvCacheConfig& cfg);

  const KvCacheConfig& config() const { return cfg_; }
  const KvCacheLayer& layer(int64_t i) const { return layers_[i]; }
  int64_t block_size() const { return cfg_.block_size; }
  int64_t free_blocks() const { return static_cast<int64_t>(free_.size()); }

  // Sequences: ids are handed out here and index the block tables.
  int64_t add_sequence();
  void free_sequence(int64_t seq);
  // Grows seq's block table to hold num_tokens tokens. Out of blocks is ResourceExhausted
  // (nothing is allocated then); an unknown sequence is NotFound.
  Status reserve(int64_t seq, int64_t num_tokens);
  StatusOr<const std::vector<int32_t>*> block_table(int64_t seq) const;

 private:
  PagedKvCache() = default;
  KvCacheConfig cfg_;
  std::vector<Buffer> buffers_;
  std::vector<KvCacheLayer> layers_;
  std::vector<int32_t> free_;                       // free block ids (stack)
  std::map<int64_t, std::vector<int32_t>> tables_;  // seq -> block ids
  int64_t next_seq_ = 0;
};

}  // namespace lancet
