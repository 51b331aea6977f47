// KvCacheManager implementation.
#include "kv/kv_cache_manager.h"

#include <algorithm>
#include <cassert>

namespace lancet {

KvCacheManager::KvCacheManager(const BlockManagerConfig& config)
    : config_(config), pool_(config.num_blocks, config.enable_prefix_caching) {
  assert(config.block_size > 0);
}

double KvCacheManager::usage() const {
  if (pool_.num_blocks() == 0) return 0.0;
  return 1.0 - static_cast<double>(pool_.num_free()) / static_cast<double>(pool_.num_blocks());
}

KvCacheManager::SeqState& KvCacheManager::state(SeqId seq) {
  auto [it, made] = seqs_.try_emplace(seq);
  if (made && !(salt_source_ && salt_source_(seq, &it->second.salt))) it->second.salt = config_.salt;
  return it->second;
}

int64_t KvCacheManager::match_prefix(SeqId seq, std::span<const int32_t> tokens) {
  SeqState& s = state(seq);
  assert(s.blocks.empty() && "match_prefix on a sequence that already has blocks");
  if (!pool_.prefix_caching() || tokens.empty()) return 0;
  const int64_t bs = config_.block_size;
  // Leave at least the last token to compute.
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / bs;
  BlockHash parent = s.salt;
  for (int64_t i = 0; i < max_blocks; ++i) {
    BlockHash key = chain_block_hash(parent, tokens.subspan(i * bs, bs));
    auto hit = pool_.lookup(key);
    if (!hit) break;
    s.blocks.push_back(*hit);
    s.keys.push_back(key);
    parent = key;
  }
  return static_cast<int64_t>(s.blocks.size()) * bs;
}

void KvCacheManager::count_prefix_query(int64_t queried_tokens, int64_t hit_tokens) {
  if (!pool_.prefix_caching()) return;
  prefix_query_tokens_ += queried_tokens;
  prefix_hit_tokens_ += hit_tokens;
}

int64_t KvCacheManager::blocks_needed(SeqId seq, int64_t total_tokens) const {
  auto it = seqs_.find(seq);
  const int64_t have = it == seqs_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
  const int64_t need = blocks_for(total_tokens, config_.block_size);
  return need > have ? need - have : 0;
}

bool KvCacheManager::allocate(SeqId seq, int64_t total_tokens) {
  const int64_t extra = blocks_needed(seq, total_tokens);
  SeqState& s = state(seq);
  if (extra == 0) return true;
  return pool_.allocate(extra, &s.blocks);
}

void KvCacheManager::commit(SeqId seq, std::span<const int32_t> tokens, int64_t num_computed) {
  commit_blocks(seq, tokens, num_computed, /*notify=*/true);
}

void KvCacheManager::commit_loaded(SeqId seq, std::span<const int32_t> tokens, int64_t num_tokens) {
  commit_blocks(seq, tokens, num_tokens, /*notify=*/false);
}

void KvCacheManager::commit_blocks(SeqId seq, std::span<const int32_t> tokens, int64_t num_computed, bool notify) {
  if (!pool_.prefix_caching()) return;
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& s = it->second;
  const int64_t bs = config_.block_size;
  const int64_t full = std::min<int64_t>(num_computed / bs, static_cast<int64_t>(s.blocks.size()));
  while (static_cast<int64_t>(s.keys.size()) < full) {
    const int64_t i = static_cast<int64_t>(s.keys.size());
    const BlockHash& parent = i == 0 ? s.salt : s.keys.back();
    BlockHash key = chain_block_hash(parent, tokens.subspan(i * bs, bs));
    const BlockId b = s.blocks[i];
    const bool was_indexed = pool_.has_hash(b);
    pool_.set_hash(b, key);
    // Only a block that now holds its key canonically is new KV (an identical block already
    // indexed elsewhere was published when it was computed).
    if (notify && listener_ && !was_indexed && pool_.has_hash(b)) listener_(b, key);
    s.keys.push_back(key);
  }
}

std::vector<BlockHash> KvCacheManager::missing_block_keys(SeqId seq, std::span<const int32_t> tokens) const {
  std::vector<BlockHash> out;
  if (!pool_.prefix_caching() || tokens.empty()) return out;
  auto it = seqs_.find(seq);
  const std::vector<BlockHash> none;
  const std::vector<BlockHash>& held = it == seqs_.end() ? none : it->second.keys;
  if (it != seqs_.end() && it->second.blocks.size() != held.size()) return out;  // a table past its keys
  const int64_t bs = config_.block_size;
  const int64_t max_blocks = (static_cast<int64_t>(tokens.size()) - 1) / bs;
  BlockHash salt = config_.salt;
  if (it != seqs_.end()) salt = it->second.salt;
  else if (salt_source_) salt_source_(seq, &salt);
  BlockHash parent = held.empty() ? salt : held.back();
  for (int64_t i = static_cast<int64_t>(held.size()); i < max_blocks; ++i) {
    parent = chain_block_hash(parent, tokens.subspan(i * bs, bs));
    out.push_back(parent);
  }
  return out;
}

void KvCacheManager::truncate(SeqId seq, int64_t total_tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  SeqState& s = it->second;
  const size_t keep = std::max<size_t>(static_cast<size_t>(blocks_for(std::max<int64_t>(total_tokens, 0), config_.block_size)),
                                       s.keys.size());
  while (s.blocks.size() > keep) {
    pool_.release(s.blocks.back());
    s.blocks.pop_back();
  }
}

void KvCacheManager::free(SeqId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) return;
  pool_.release_all(it->second.blocks);
  seqs_.erase(it);
}

const std::vector<BlockId>& KvCacheManager::block_table(SeqId seq) const {
  static const std::vector<BlockId> kEmpty;
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? kEmpty : it->second.blocks;
}

}  // namespace lancet
