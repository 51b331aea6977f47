// RedisKvTier: fetches on the caller's thread, writes on a thread of its own.
#include "kv_tier/redis_kv_tier.h"

#include <cstring>

#include <hiredis/hiredis.h>

#include "core/logging.h"
#include "kv_tier/kv_entry_codec.h"

namespace lancet {

Status KvOffloadConfig::validate() const {
  if (url.empty()) return OkStatus();
  RETURN_IF_ERROR(parse_redis_url(url).status());
  if (max_bytes < 0) return InvalidArgument("--kv-offload-max-bytes must not be negative");
  if (timeout_ms < 1 || timeout_ms > 60000) return InvalidArgument("--kv-offload-timeout-ms must be in [1, 60000]");
  if (queue_bytes < 0) return InvalidArgument("--kv-offload-queue-bytes must not be negative");
  return OkStatus();
}

StatusOr<std::unique_ptr<RedisKvTier>> RedisKvTier::create(const KvOffloadConfig& config, ModelExecutor* model) {
  RETURN_IF_ERROR(config.validate());
  ASSIGN_OR_RETURN(RedisEndpoint ep, parse_redis_url(config.url));
  const KvBlockLayout layout = model->kv_block_layout();
  if (layout.payload_bytes() <= 0) return FailedPrecondition("--kv-offload: this model executor cannot copy KV blocks");
  std::unique_ptr<RedisKvTier> t(new RedisKvTier(config, std::move(ep), model, layout));
  // Reachable or not, the server starts: without the tier every prompt is simply computed.
  if (t->fetch_conn_.ready())
    LOG_INFO("kv offload: Redis at " << t->endpoint_.describe() << ", " << t->entry_bytes_
             << " bytes per block entry");
  return t;
}

RedisKvTier::RedisKvTier(const KvOffloadConfig& config, RedisEndpoint endpoint, ModelExecutor* model,
                         KvBlockLayout layout)
    : config_(config),
      endpoint_(std::move(endpoint)),
      model_(model),
      layout_(layout),
      entry_bytes_(kv_entry_bytes(layout)),
      fetch_conn_(endpoint_, std::chrono::milliseconds(config.timeout_ms), &health_),
      writer_conn_(endpoint_, std::chrono::milliseconds(config.timeout_ms), &health_,
                   config.max_bytes > 0
                       ? std::vector<std::vector<std::string>>{{"CONFIG", "SET", "maxmemory", std::to_string(config.max_bytes)},
                                                               {"CONFIG", "SET", "maxmemory-policy", "allkeys-lru"}}
                       : std::vector<std::vector<std::string>>{}) {
  writer_ = std::thread([this] { writer_loop(); });
}

RedisKvTier::~RedisKvTier() {
  // A process that ends right after a prompt (lancet generate) still shares its blocks; a
  // slow or dead server holds the exit up by at most the timeout.
  flush(std::chrono::milliseconds(config_.timeout_ms));
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  writer_.join();
}

std::vector<KvTierBlock> RedisKvTier::fetch(std::span<const BlockHash> keys) {
  std::vector<KvTierBlock> out;
  if (keys.empty() || !fetch_conn_.ready()) return out;
  std::vector<std::string> names;
  names.reserve(keys.size());
  for (const BlockHash& k : keys) names.push_back(kv_entry_key(layout_, k));
  RedisCommand mget{"MGET"};
  for (const std::string& n : names) mget.push_back(n);
  queried_ += static_cast<int64_t>(keys.size());
  auto replies = fetch_conn_.pipeline(std::span<const RedisCommand>(&mget, 1));
  if (!replies.ok()) return out;  // counted and logged by the connection
  const RedisReplyPtr reply = (*replies)[0];
  if (reply->type != REDIS_REPLY_ARRAY || reply->elements != keys.size()) {
    if (errors_++ == 0)
      LOG_WARN("kv offload: unexpected MGET reply" << (reply->type == REDIS_REPLY_ERROR ? ": " + std::string(reply->str, reply->len) : ""));
    return out;
  }
  for (size_t i = 0; i < keys.size(); ++i) {
    const redisReply* e = reply->element[i];
    if (e->type == REDIS_REPLY_NIL) break;  // never stored, or evicted
    const std::span<const uint8_t> bytes(reinterpret_cast<const uint8_t*>(e->str),
                                         e->type == REDIS_REPLY_STRING ? e->len : 0);
    auto payload = decode_kv_entry(layout_, keys[i], bytes);
    if (!payload.ok()) {
      if (corrupt_++ < 10) LOG_WARN("kv offload: ignoring and deleting " << names[i] << ": " << payload.status().to_string());
      const RedisCommand del{"DEL", names[i]};
      (void)fetch_conn_.pipeline(std::span<const RedisCommand>(&del, 1));
      break;
    }
    hits_++;
    fetched_bytes_ += static_cast<int64_t>(bytes.size());
    out.push_back(KvTierBlock{std::shared_ptr<const void>(reply, reply.get()), *payload});
  }
  return out;
}

void RedisKvTier::store(BlockId block, const BlockHash& key) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (queued_bytes_ + entry_bytes_ > static_cast<size_t>(config_.queue_bytes)) {
      drops_++;
      return;
    }
    queued_bytes_ += entry_bytes_;
  }
  Pending p{kv_entry_key(layout_, key), key, std::unique_ptr<uint8_t[]>(new uint8_t[entry_bytes_])};
  // The copy happens now: the block may be overwritten once this step's sequences move on.
  const Status st = model_->read_kv_block(
      block, std::span<uint8_t>(p.entry.get() + kKvEntryHeaderBytes, static_cast<size_t>(layout_.payload_bytes())));
  std::lock_guard<std::mutex> lock(mu_);
  if (!st.ok()) {
    queued_bytes_ -= entry_bytes_;
    if (errors_++ == 0) LOG_WARN("kv offload: copying a block out failed: " << st.to_string());
    return;
  }
  queue_.push_back(std::move(p));
  work_cv_.notify_one();
}

void RedisKvTier::writer_loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (true) {
    work_cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
    if (stop_) break;
    std::vector<Pending> batch;
    while (!queue_.empty() && batch.size() < kWriteBatch) {
      batch.push_back(std::move(queue_.front()));
      queue_.pop_front();
    }
    in_flight_ = batch.size();
    lock.unlock();
    write_batch(batch);
    lock.lock();
    queued_bytes_ -= batch.size() * entry_bytes_;
    in_flight_ = 0;
    idle_cv_.notify_all();
  }
  queue_.clear();
  queued_bytes_ = 0;
  idle_cv_.notify_all();
}

void RedisKvTier::write_batch(std::vector<Pending>& batch) {
  const auto n = static_cast<int64_t>(batch.size());
  if (!writer_conn_.ready()) {  // in backoff: the blocks are not stored, serving goes on
    drops_ += n;
    return;
  }
  std::vector<RedisCommand> sets;
  for (Pending& p : batch) {
    const std::span<uint8_t> entry(p.entry.get(), entry_bytes_);
    if (!seal_kv_entry(layout_, p.hash, entry).ok()) continue;  // sized by entry_bytes_: cannot fail
    sets.push_back({"SET", p.key, std::string_view(reinterpret_cast<const char*>(entry.data()), entry.size())});
  }
  auto replies = writer_conn_.pipeline(sets);
  if (!replies.ok()) {
    drops_ += n;
    return;
  }
  for (const RedisReplyPtr& r : *replies) {
    if (r->type == REDIS_REPLY_ERROR) {
      errors_++;
      if (!refused_warned_) {
        refused_warned_ = true;
        LOG_WARN("kv offload: Redis refused a block: " << std::string(r->str, r->len));
      }
      continue;
    }
    stored_++;
    stored_bytes_ += static_cast<int64_t>(entry_bytes_);
  }
}

bool RedisKvTier::flush(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mu_);
  return idle_cv_.wait_for(lock, timeout, [&] { return queue_.empty() && in_flight_ == 0; });
}

KvTierStats RedisKvTier::stats() const {
  KvTierStats s;
  s.enabled = true;
  s.connected = health_.connected;
  s.queried_blocks = queried_;
  s.hit_blocks = hits_;
  s.fetched_bytes = fetched_bytes_;
  s.stored_blocks = stored_;
  s.stored_bytes = stored_bytes_;
  s.store_drops = drops_;
  s.corrupt_entries = corrupt_;
  s.errors = errors_ + health_.errors;
  return s;
}

}  // namespace lancet
