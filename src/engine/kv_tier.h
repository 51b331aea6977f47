// The shared prefix-KV tier as the engine sees it: a store of full KV blocks keyed by their
// chained block hash (kv/block_hash.h), shared by replicas. The engine hands it each block
// whose KV it has just computed (store) and, at admission, asks it for the blocks after a
// local prefix-cache miss (fetch), loading what comes back into fresh blocks
// (engine/kv_tier_loader.h). The tier is an optimisation: a miss, a corrupt entry or an
// unreachable store means the engine computes those tokens. The Redis implementation is
// kv_tier/redis_kv_tier.h.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "kv/block_hash.h"
#include "kv/block_pool.h"

namespace lancet {

// Counters since start, in blocks unless named otherwise.
struct KvTierStats {
  bool enabled = false;
  bool connected = false;        // the last attempt to reach the store succeeded
  int64_t queried_blocks = 0;    // keys looked up at admission
  int64_t hit_blocks = 0;        // of which loaded into the cache (intact entries)
  int64_t fetched_bytes = 0;     // entry bytes of those hits
  int64_t stored_blocks = 0;     // blocks written to the store
  int64_t stored_bytes = 0;
  int64_t store_drops = 0;       // blocks not stored: queue full, or the store unreachable
  int64_t corrupt_entries = 0;   // entries that failed their checks (ignored and deleted)
  int64_t errors = 0;            // failed connections and commands
};

// One block's KV as fetched: layout.payload_bytes() bytes (kv/kv_block_layout.h), kept alive
// by owner.
struct KvTierBlock {
  std::shared_ptr<const void> owner;
  std::span<const uint8_t> payload;
};

class KvTier {
 public:
  virtual ~KvTier() = default;
  // Most keys one fetch() looks up; the engine loads each batch before asking for the next.
  virtual int64_t fetch_batch() const = 0;
  // The time an admission may spend fetching; later batches are not asked for.
  virtual std::chrono::milliseconds fetch_budget() const = 0;
  // The leading run of `keys` the store holds intact, in order: it stops at the first miss,
  // corrupt entry (counted and deleted) or failure. Called by the engine's thread.
  virtual std::vector<KvTierBlock> fetch(std::span<const BlockHash> keys) = 0;
  // Block `block` of the KV cache now holds the KV of `key`: copied out before this returns
  // (the block may be reused after it), written to the store in the background; dropped
  // (and counted) when the write queue is full. Called by the engine's thread.
  virtual void store(BlockId block, const BlockHash& key) = 0;
  // Any thread.
  virtual KvTierStats stats() const = 0;
};

}  // namespace lancet
