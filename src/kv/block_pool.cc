// BlockPool: an intrusive doubly linked free list gives O(1) allocate, revive and release.
#include "kv/block_pool.h"

#include <cassert>
#include <string>

namespace lancet {

BlockPool::BlockPool(int64_t num_blocks, bool enable_prefix_caching)
    : prefix_caching_(enable_prefix_caching), blocks_(num_blocks) {
  for (BlockId b = 0; b < num_blocks; ++b) push_free_back(b);
  // At most one key per block: the index never rehashes while blocks fill.
  if (prefix_caching_) index_.reserve(static_cast<size_t>(num_blocks));
}

void BlockPool::push_free_back(BlockId b) {
  Block& blk = blocks_[b];
  assert(!blk.in_free_list && blk.ref == 0);
  blk.prev = free_tail_;
  blk.next = -1;
  if (free_tail_ >= 0) blocks_[free_tail_].next = b;
  else free_head_ = b;
  free_tail_ = b;
  blk.in_free_list = true;
  ++num_free_;
}

void BlockPool::unlink_free(BlockId b) {
  Block& blk = blocks_[b];
  assert(blk.in_free_list);
  if (blk.prev >= 0) blocks_[blk.prev].next = blk.next;
  else free_head_ = blk.next;
  if (blk.next >= 0) blocks_[blk.next].prev = blk.prev;
  else free_tail_ = blk.prev;
  blk.prev = blk.next = -1;
  blk.in_free_list = false;
  --num_free_;
}

void BlockPool::drop_hash(BlockId b) {
  Block& blk = blocks_[b];
  if (!blk.hashed) return;
  auto it = index_.find(blk.key);
  if (it != index_.end() && it->second == b) index_.erase(it);
  blk.hashed = false;
}

bool BlockPool::allocate(int64_t n, std::vector<BlockId>* out) {
  if (n > num_free_) return false;
  for (int64_t i = 0; i < n; ++i) {
    const BlockId b = free_head_;
    unlink_free(b);
    if (blocks_[b].hashed) {
      drop_hash(b);
      counters_.evictions++;
    }
    blocks_[b].ref = 1;
    out->push_back(b);
  }
  return true;
}

std::optional<BlockId> BlockPool::lookup(const BlockHash& key) {
  if (!prefix_caching_) return std::nullopt;
  counters_.prefix_queries++;
  auto it = index_.find(key);
  if (it == index_.end()) return std::nullopt;
  counters_.prefix_hits++;
  const BlockId b = it->second;
  if (blocks_[b].ref == 0) unlink_free(b);
  blocks_[b].ref++;
  return b;
}

void BlockPool::set_hash(BlockId block, const BlockHash& key) {
  if (!prefix_caching_) return;
  Block& blk = blocks_[block];
  assert(blk.ref > 0);
  if (blk.hashed) return;
  auto [it, inserted] = index_.try_emplace(key, block);
  if (!inserted) return;  // an identical block is already indexed; this one stays private
  blk.hashed = true;
  blk.key = key;
}

void BlockPool::add_ref(BlockId block) {
  assert(blocks_[block].ref > 0);
  blocks_[block].ref++;
}

void BlockPool::release(BlockId block) {
  Block& blk = blocks_[block];
  assert(blk.ref > 0 && "double free of a KV block");
  if (--blk.ref == 0) push_free_back(block);
}

void BlockPool::release_all(const std::vector<BlockId>& blocks) {
  for (auto it = blocks.rbegin(); it != blocks.rend(); ++it) release(*it);
}

BlockPoolStats BlockPool::stats() const {
  BlockPoolStats s = counters_;
  s.num_blocks = num_blocks();
  s.num_free = num_free_;
  s.num_cached = static_cast<int64_t>(index_.size());
  return s;
}

void BlockPool::reset_prefix_stats() {
  counters_.prefix_queries = counters_.prefix_hits = counters_.evictions = 0;
}

bool BlockPool::check_invariants(std::string* why) const {
  int64_t listed = 0;
  BlockId prev = -1;
  for (BlockId b = free_head_; b >= 0; b = blocks_[b].next) {
    if (blocks_[b].ref != 0) { *why = "block " + std::to_string(b) + " in free list with refs"; return false; }
    if (blocks_[b].prev != prev) { *why = "broken free-list link at " + std::to_string(b); return false; }
    prev = b;
    if (++listed > num_blocks()) { *why = "free list cycle"; return false; }
  }
  if (listed != num_free_) { *why = "free count mismatch"; return false; }
  for (BlockId b = 0; b < num_blocks(); ++b) {
    const Block& blk = blocks_[b];
    if (blk.ref < 0) { *why = "negative ref"; return false; }
    if ((blk.ref == 0) != blk.in_free_list) { *why = "free flag mismatch at " + std::to_string(b); return false; }
    if (blk.hashed) {
      auto it = index_.find(blk.key);
      if (it == index_.end() || it->second != b) { *why = "hashed block not indexed"; return false; }
    }
  }
  for (const auto& [key, b] : index_) {
    if (!blocks_[b].hashed || !(blocks_[b].key == key)) { *why = "index points to wrong block"; return false; }
  }
  return true;
}

}  // namespace lancet
