// One hiredis connection to the Redis server of the shared KV tier, used by one thread, with
// what a cache needs from it: a timeout on connecting and on every command (a slow or dead
// server costs at most that, and its blocks are computed instead), pipelined commands, and
// reconnection with exponential backoff (100 ms doubling to 5 s) after any failure. The two
// connections of a tier share a RedisHealth, so an outage is logged once (a warning) and the
// recovery once.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"

struct redisContext;
struct redisReply;

namespace lancet {

// redis://[:PASSWORD@]HOST[:PORT][/DB] or unix://[:PASSWORD@]/PATH[?db=DB].
struct RedisEndpoint {
  std::string host;
  int port = 6379;
  std::string unix_path;  // set for unix:// URLs
  int db = 0;
  std::string password;
  std::string describe() const;  // without the password
};
StatusOr<RedisEndpoint> parse_redis_url(std::string_view url);

struct RedisHealth {
  std::atomic<bool> down{false};
  std::atomic<bool> connected{false};
  std::atomic<int64_t> errors{0};
};

using RedisReplyPtr = std::shared_ptr<redisReply>;
using RedisCommand = std::vector<std::string_view>;

class RedisConnection {
 public:
  // setup: commands sent after every connect (CONFIG SET ...); a refused one is logged once.
  RedisConnection(RedisEndpoint endpoint, std::chrono::milliseconds timeout, RedisHealth* health,
                  std::vector<std::vector<std::string>> setup = {});
  ~RedisConnection();
  RedisConnection(const RedisConnection&) = delete;
  RedisConnection& operator=(const RedisConnection&) = delete;

  // Connected now, connecting first when the backoff allows it; false while unreachable.
  bool ready();
  // Sends the commands as one pipeline and reads every reply, in order. An I/O failure
  // (timeout, reset, refused) drops the connection and is an error; error replies come back
  // as replies.
  StatusOr<std::vector<RedisReplyPtr>> pipeline(std::span<const RedisCommand> commands);

 private:
  bool connect();
  void fail(const std::string& why);

  RedisEndpoint endpoint_;
  std::chrono::milliseconds timeout_;
  RedisHealth* health_;
  std::vector<std::vector<std::string>> setup_;
  bool setup_warned_ = false;
  redisContext* ctx_ = nullptr;
  std::chrono::milliseconds backoff_{0};
  std::chrono::steady_clock::time_point retry_at_{};
};

}  // namespace lancet
