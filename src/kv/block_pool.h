// The pool of KV-cache blocks: reference counts, a free list in LRU order, and the prefix
// cache index (full-block key -> block). A block whose count drops to zero keeps its key and
// stays in the index until it is evicted, so a later request with the same prefix revives it.
// Allocation evicts from the least recently freed end. Running out of blocks is a return value
// (nullopt / false), never an exception. Not thread-safe: the scheduler owns it.
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "kv/block_hash.h"

namespace lancet {

using BlockId = int32_t;

struct BlockPoolStats {
  int64_t num_blocks = 0;
  int64_t num_free = 0;         // ref count 0 (cached or empty)
  int64_t num_cached = 0;       // blocks that carry a key (in use or free)
  int64_t prefix_queries = 0;   // full blocks looked up (the served counters are tokens:
  int64_t prefix_hits = 0;      // of which found       KvCacheManager::prefix_query_tokens)
  int64_t evictions = 0;        // cached blocks whose key was dropped to reuse them
};

class BlockPool {
 public:
  BlockPool(int64_t num_blocks, bool enable_prefix_caching);

  int64_t num_blocks() const { return static_cast<int64_t>(blocks_.size()); }
  int64_t num_free() const { return num_free_; }
  bool prefix_caching() const { return prefix_caching_; }

  // Takes `n` blocks with ref count 1 (fresh, no key), or none if fewer than n are free.
  bool allocate(int64_t n, std::vector<BlockId>* out);
  // Looks up a full block by key; on a hit, takes a reference (reviving a free cached block).
  std::optional<BlockId> lookup(const BlockHash& key);
  // Records that `block` (ref > 0, just filled) holds the block with this key. If another
  // block already holds the key, nothing changes (the first stays canonical).
  void set_hash(BlockId block, const BlockHash& key);
  void add_ref(BlockId block);
  // Drops one reference; at zero the block joins the free list (most recently freed last).
  void release(BlockId block);
  // Releases a sequence's blocks, last block first, so the tail of a prefix is evicted before
  // its head (the head is likelier to be shared).
  void release_all(const std::vector<BlockId>& blocks);

  int32_t ref_count(BlockId b) const { return blocks_[b].ref; }
  bool has_hash(BlockId b) const { return blocks_[b].hashed; }
  BlockPoolStats stats() const;
  void reset_prefix_stats();
  // Checks every invariant (free list vs ref counts, index vs block keys); for tests.
  bool check_invariants(std::string* why) const;

 private:
  struct Block {
    int32_t ref = 0;
    bool hashed = false;
    BlockHash key;
    // Free list links (valid while ref == 0).
    BlockId prev = -1, next = -1;
    bool in_free_list = false;
  };
  void push_free_back(BlockId b);
  void unlink_free(BlockId b);
  void drop_hash(BlockId b);

  bool prefix_caching_;
  std::vector<Block> blocks_;
  BlockId free_head_ = -1, free_tail_ = -1;
  int64_t num_free_ = 0;
  std::unordered_map<BlockHash, BlockId, BlockHashHasher> index_;
  BlockPoolStats counters_;
};

}  // namespace lancet
