// The shared prefix-KV tier in Redis (engine/kv_tier.h): each full block's KV, every layer,
// is stored as one entry (kv_tier/kv_entry_codec.h: header, payload, checksum) under a key
// derived from the block's chained hash and the cache layout, so replicas of the same model
// and KV dtype share what any of them computed.
//  - Stores never stall the step loop beyond copying the block to host memory: a background
//    thread writes pipelined SETs from a queue bounded in bytes; a block that does not fit is
//    dropped (counted).
//  - Fetches (admission, the engine's thread) are MGETs of up to fetch_batch() keys with a
//    timeout on every command and a time budget per admission; a miss, a corrupt entry
//    (counted, deleted), an error or an unreachable server ends the run, and the engine
//    computes the rest.
//  - Size: with max_bytes the tier sets the server's maxmemory and maxmemory-policy
//    allkeys-lru on every connect (Redis evicts least recently used entries; an evicted entry
//    is a miss); without it the server's own configuration applies.
//  - An outage is logged once; both connections reconnect with backoff.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "engine/kv_tier.h"
#include "kv/kv_block_layout.h"
#include "kv_tier/redis_connection.h"
#include "runner/model_executor.h"

namespace lancet {

struct KvOffloadConfig {
  std::string url;                    // redis://HOST:PORT[/DB] or unix:///PATH; "" = off
  int64_t max_bytes = 0;              // > 0: CONFIG SET maxmemory + allkeys-lru on the server
  int64_t timeout_ms = 1000;          // every connect and command; also each admission's fetch budget
  int64_t queue_bytes = 256ll << 20;  // blocks waiting to be written, at most
  Status validate() const;
};

class RedisKvTier final : public KvTier {
 public:
  // model: the executor whose KV blocks are copied (not owned; outlives the tier).
  static StatusOr<std::unique_ptr<RedisKvTier>> create(const KvOffloadConfig& config, ModelExecutor* model);
  // Waits up to the timeout for queued writes, then stops the writer (the rest is dropped).
  ~RedisKvTier() override;

  int64_t fetch_batch() const override { return kFetchBatch; }
  std::chrono::milliseconds fetch_budget() const override { return std::chrono::milliseconds(config_.timeout_ms); }
  std::vector<KvTierBlock> fetch(std::span<const BlockHash> keys) override;
  void store(BlockId block, const BlockHash& key) override;
  KvTierStats stats() const override;

  // Waits until every queued write has been written or dropped, at most `timeout`; true if so.
  bool flush(std::chrono::milliseconds timeout);
  const KvBlockLayout& layout() const { return layout_; }
  const RedisEndpoint& endpoint() const { return endpoint_; }

 private:
  static constexpr int64_t kFetchBatch = 16;
  static constexpr size_t kWriteBatch = 16;
  struct Pending {
    std::string key;
    BlockHash hash;
    std::unique_ptr<uint8_t[]> entry;  // kv_entry_bytes(layout_)
  };
  RedisKvTier(const KvOffloadConfig& config, RedisEndpoint endpoint, ModelExecutor* model, KvBlockLayout layout);
  void writer_loop();
  void write_batch(std::vector<Pending>& batch);

  const KvOffloadConfig config_;
  const RedisEndpoint endpoint_;
  ModelExecutor* model_;
  const KvBlockLayout layout_;
  const size_t entry_bytes_;
  RedisHealth health_;
  RedisConnection fetch_conn_;   // the engine's thread
  RedisConnection writer_conn_;  // the writer thread

  std::mutex mu_;
  std::condition_variable work_cv_, idle_cv_;
  std::deque<Pending> queue_;    // guarded by mu_
  size_t queued_bytes_ = 0;      // queued and in flight, guarded by mu_
  size_t in_flight_ = 0;         // guarded by mu_
  bool stop_ = false;            // guarded by mu_
  bool refused_warned_ = false;  // the writer thread's

  std::atomic<int64_t> queried_{0}, hits_{0}, fetched_bytes_{0}, stored_{0}, stored_bytes_{0}, drops_{0},
      corrupt_{0}, errors_{0};
  std::thread writer_;
};

}  // namespace lancet
