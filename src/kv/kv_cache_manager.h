// Per-sequence KV block tables over a BlockPool, with prefix caching: at admission a sequence
// takes the cached blocks of its longest cached prefix; as its blocks fill, their chained keys
// are registered so later sequences can share them. All sizes are in tokens unless named
// otherwise. Running out of blocks is a `false` return with nothing changed.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <unordered_map>
#include <vector>

#include "core/kv_block_config.h"
#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace lancet {

using SeqId = int64_t;

struct BlockManagerConfig : KvBlockConfig {
  bool enable_prefix_caching = true;
  BlockHash salt;  // kv_cache_salt(model, kv dtype, adapter)
};

class KvCacheManager {
 public:
  explicit KvCacheManager(const BlockManagerConfig& config);

  int32_t block_size() const { return config_.block_size; }
  int64_t num_blocks() const { return pool_.num_blocks(); }
  int64_t num_free_blocks() const { return pool_.num_free(); }
  // Fraction of blocks referenced by a sequence (0 when idle).
  double usage() const;
  static int64_t blocks_for(int64_t tokens, int32_t block_size) {
    return (tokens + block_size - 1) / block_size;
  }

  // Admission: the longest run of full blocks of `tokens` that is cached, capped so at least
  // one token is left to compute (its logits are needed). Takes a reference on each matched
  // block and makes them the start of the sequence's table. Returns the number of cached tokens.
  int64_t match_prefix(SeqId seq, std::span<const int32_t> tokens);
  // Grows the sequence's table to cover `total_tokens`. False (and no change) when the pool
  // has too few free blocks.
  bool allocate(SeqId seq, int64_t total_tokens);
  // Blocks needed to grow `seq` to `total_tokens` (0 if already covered).
  int64_t blocks_needed(SeqId seq, int64_t total_tokens) const;
  // After a step has written KV for tokens [0, num_computed), registers the keys of blocks
  // that became full. `tokens` holds at least num_computed ids.
  void commit(SeqId seq, std::span<const int32_t> tokens, int64_t num_computed);

  // Sequences whose KV differs from the base model's for the same tokens (a LoRA adapter) key
  // their blocks from their own salt: the source is asked when a sequence's table is started
  // and returns false to keep config.salt.
  using SaltSource = std::function<bool(SeqId, BlockHash*)>;
  void set_salt_source(SaltSource source) { salt_source_ = std::move(source); }

  // The shared KV tier (kv_tier/): called by commit() for each block whose key it indexes
  // for the first time (its KV was just computed), so the block can be copied out.
  using BlockListener = std::function<void(BlockId, const BlockHash&)>;
  void set_block_listener(BlockListener listener) { listener_ = std::move(listener); }
  // Admission after match_prefix: the keys of the full blocks after the sequence's table,
  // within the same cap (the last token is left to compute).
  std::vector<BlockHash> missing_block_keys(SeqId seq, std::span<const int32_t> tokens) const;
  // Blocks whose KV was loaded from elsewhere (the tier) into the table's blocks up to
  // `num_tokens`: registers their keys like commit() but without calling the listener.
  void commit_loaded(SeqId seq, std::span<const int32_t> tokens, int64_t num_tokens);
  // Shrinks the sequence's table to the blocks that cover `total_tokens` (speculative decoding
  // rolls back rejected drafts: blocks that only held them go back to the pool). Blocks whose
  // keys were registered are kept (they hold computed tokens).
  void truncate(SeqId seq, int64_t total_tokens);
  // Frees the sequence's blocks (cached ones stay reusable until evicted).
  void free(SeqId seq);
  bool has(SeqId seq) const { return seqs_.count(seq) != 0; }
  const std::vector<BlockId>& block_table(SeqId seq) const;

  // Prefix-cache counters in tokens, as vLLM counts them: an admitted request queries its whole
  // prompt and hits the tokens it took from the cache (a repeated 160-token prompt at block
  // size 16 counts 160 queried, 144 hit: the last block is partial, and the last token is
  // always computed). The scheduler reports each admission once.
  void count_prefix_query(int64_t queried_tokens, int64_t hit_tokens);
  int64_t prefix_query_tokens() const { return prefix_query_tokens_; }
  int64_t prefix_hit_tokens() const { return prefix_hit_tokens_; }

  const BlockPool& pool() const { return pool_; }
  BlockPool& pool() { return pool_; }

 private:
  struct SeqState {
    std::vector<BlockId> blocks;
    std::vector<BlockHash> keys;  // keys of the first keys.size() blocks (all full)
    BlockHash salt;               // the chain's start: config_.salt or the sequence's own
  };
  // The state of `seq`, made (with its salt) when it has none.
  SeqState& state(SeqId seq);
  BlockManagerConfig config_;
  void commit_blocks(SeqId seq, std::span<const int32_t> tokens, int64_t num_computed, bool notify);

  BlockPool pool_;
  BlockListener listener_;
  SaltSource salt_source_;
  std::unordered_map<SeqId, SeqState> seqs_;
  int64_t prefix_query_tokens_ = 0;
  int64_t prefix_hit_tokens_ = 0;
};

}  // namespace lancet
