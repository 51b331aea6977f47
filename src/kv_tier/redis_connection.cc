// RedisConnection over hiredis's blocking API (timeouts through redisSetTimeout).
#include "kv_tier/redis_connection.h"

#include <pthread.h>
#include <signal.h>
#include <sys/time.h>
#include <time.h>

#include <algorithm>
#include <cerrno>
#include <charconv>

#include <hiredis/hiredis.h>

#include "core/logging.h"

namespace lancet {
namespace {

constexpr std::chrono::milliseconds kFirstBackoff{100};
constexpr std::chrono::milliseconds kMaxBackoff{5000};

// hiredis writes with write(2): a server that died makes it raise SIGPIPE, which would end the
// process unless the program ignores it. The guard blocks SIGPIPE on this thread for the
// call and swallows one raised meanwhile, leaving the program's own disposition alone.
class SigpipeGuard {
 public:
  SigpipeGuard() {
    sigset_t pipe;
    sigemptyset(&pipe);
    sigaddset(&pipe, SIGPIPE);
    sigset_t pending;
    sigpending(&pending);
    was_pending_ = sigismember(&pending, SIGPIPE) == 1;
    pthread_sigmask(SIG_BLOCK, &pipe, &old_);
  }
  ~SigpipeGuard() {
    sigset_t pending;
    sigpending(&pending);
    if (!was_pending_ && sigismember(&pending, SIGPIPE) == 1) {
      sigset_t pipe;
      sigemptyset(&pipe);
      sigaddset(&pipe, SIGPIPE);
      const timespec zero{0, 0};
      while (sigtimedwait(&pipe, nullptr, &zero) == -1 && errno == EINTR) {
      }
    }
    pthread_sigmask(SIG_SETMASK, &old_, nullptr);
  }

 private:
  sigset_t old_;
  bool was_pending_ = false;
};

timeval to_timeval(std::chrono::milliseconds ms) {
  timeval tv;
  tv.tv_sec = static_cast<time_t>(ms.count() / 1000);
  tv.tv_usec = static_cast<suseconds_t>((ms.count() % 1000) * 1000);
  return tv;
}

bool parse_int(std::string_view s, int lo, int hi, int* out) {
  int v = 0;
  auto r = std::from_chars(s.data(), s.data() + s.size(), v);
  if (r.ec != std::errc() || r.ptr != s.data() + s.size() || v < lo || v > hi) return false;
  *out = v;
  return true;
}

}  // namespace

std::string RedisEndpoint::describe() const {
  std::string s = unix_path.empty() ? "redis://" + host + ":" + std::to_string(port) : "unix://" + unix_path;
  if (db != 0) s.append(unix_path.empty() ? "/" : "?db=").append(std::to_string(db));
  return s;
}

StatusOr<RedisEndpoint> parse_redis_url(std::string_view url) {
  const std::string bad = "--kv-offload: expected redis://HOST[:PORT][/DB] or unix:///PATH[?db=DB], got '" +
                          std::string(url) + "'";
  RedisEndpoint ep;
  std::string_view rest;
  bool is_unix = false;
  if (url.starts_with("redis://")) rest = url.substr(8);
  else if (url.starts_with("unix://")) rest = url.substr(7), is_unix = true;
  else return InvalidArgument(bad);
  if (const size_t at = rest.rfind('@'); at != std::string_view::npos) {
    std::string_view cred = rest.substr(0, at);
    if (const size_t colon = cred.find(':'); colon != std::string_view::npos) cred = cred.substr(colon + 1);
    ep.password = std::string(cred);
    rest = rest.substr(at + 1);
  }
  if (is_unix) {
    std::string_view path = rest;
    if (const size_t q = rest.find('?'); q != std::string_view::npos) {
      path = rest.substr(0, q);
      const std::string_view query = rest.substr(q + 1);
      if (!query.starts_with("db=") || !parse_int(query.substr(3), 0, 1 << 20, &ep.db)) return InvalidArgument(bad);
    }
    if (path.empty() || path[0] != '/') return InvalidArgument(bad);
    ep.unix_path = std::string(path);
    return ep;
  }
  std::string_view hostport = rest;
  if (const size_t slash = rest.find('/'); slash != std::string_view::npos) {
    hostport = rest.substr(0, slash);
    const std::string_view db = rest.substr(slash + 1);
    if (!db.empty() && !parse_int(db, 0, 1 << 20, &ep.db)) return InvalidArgument(bad);
  }
  std::string_view port;
  if (hostport.starts_with("[")) {  // [IPv6]:PORT
    const size_t close = hostport.find(']');
    if (close == std::string_view::npos) return InvalidArgument(bad);
    if (close + 1 < hostport.size()) {
      if (hostport[close + 1] != ':') return InvalidArgument(bad);
      port = hostport.substr(close + 2);
    }
    hostport = hostport.substr(1, close - 1);
  } else if (const size_t colon = hostport.rfind(':'); colon != std::string_view::npos) {
    port = hostport.substr(colon + 1);
    hostport = hostport.substr(0, colon);
  }
  if (!port.empty() && !parse_int(port, 1, 65535, &ep.port)) return InvalidArgument(bad);
  if (hostport.empty()) return InvalidArgument(bad);
  ep.host = std::string(hostport);
  return ep;
}

RedisConnection::RedisConnection(RedisEndpoint endpoint, std::chrono::milliseconds timeout, RedisHealth* health,
                                 std::vector<std::vector<std::string>> setup)
    : endpoint_(std::move(endpoint)), timeout_(timeout), health_(health), setup_(std::move(setup)) {}

RedisConnection::~RedisConnection() {
  if (ctx_) redisFree(ctx_);
}

void RedisConnection::fail(const std::string& why) {
  if (ctx_) {
    redisFree(ctx_);
    ctx_ = nullptr;
  }
  health_->errors++;
  health_->connected = false;
  backoff_ = backoff_.count() == 0 ? kFirstBackoff : std::min(2 * backoff_, kMaxBackoff);
  retry_at_ = std::chrono::steady_clock::now() + backoff_;
  if (!health_->down.exchange(true))
    LOG_WARN("kv offload: Redis at " << endpoint_.describe() << " failed (" << why
             << "); prompts are computed without it, reconnecting with backoff");
}

bool RedisConnection::connect() {
  const SigpipeGuard guard;
  const timeval tv = to_timeval(timeout_);
  ctx_ = endpoint_.unix_path.empty() ? redisConnectWithTimeout(endpoint_.host.c_str(), endpoint_.port, tv)
                                     : redisConnectUnixWithTimeout(endpoint_.unix_path.c_str(), tv);
  if (!ctx_ || ctx_->err) {
    fail(ctx_ ? ctx_->errstr : "cannot allocate a connection");
    return false;
  }
  if (redisSetTimeout(ctx_, tv) != REDIS_OK) {
    fail("cannot set the timeout");
    return false;
  }
  std::vector<std::vector<std::string>> first;
  if (!endpoint_.password.empty()) first.push_back({"AUTH", endpoint_.password});
  if (endpoint_.db != 0) first.push_back({"SELECT", std::to_string(endpoint_.db)});
  for (const std::vector<std::vector<std::string>>* group : {&first, &setup_}) {
    for (const auto& cmd : *group) {
      std::vector<const char*> argv;
      std::vector<size_t> lens;
      for (const std::string& a : cmd) argv.push_back(a.data()), lens.push_back(a.size());
      auto* r = static_cast<redisReply*>(redisCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()));
      if (!r) {
        fail(ctx_->errstr);
        return false;
      }
      const bool refused = r->type == REDIS_REPLY_ERROR;
      const std::string msg = refused ? std::string(r->str, r->len) : "";
      freeReplyObject(r);
      if (refused && group == &first) {  // AUTH / SELECT refused: nothing will work
        fail(cmd[0] + ": " + msg);
        return false;
      }
      if (refused && !setup_warned_) {
        setup_warned_ = true;
        LOG_WARN("kv offload: Redis refused '" << cmd[0] << " " << (cmd.size() > 2 ? cmd[1] + " " + cmd[2] : "")
                 << "' (" << msg << "); configure its memory limit and eviction policy on the server");
      }
    }
  }
  backoff_ = std::chrono::milliseconds{0};
  health_->connected = true;
  if (health_->down.exchange(false)) LOG_INFO("kv offload: reconnected to Redis at " << endpoint_.describe());
  return true;
}

bool RedisConnection::ready() {
  if (ctx_) return true;
  if (std::chrono::steady_clock::now() < retry_at_) return false;
  return connect();
}

StatusOr<std::vector<RedisReplyPtr>> RedisConnection::pipeline(std::span<const RedisCommand> commands) {
  const SigpipeGuard guard;
  if (!ready()) return IoError("kv offload: Redis at " + endpoint_.describe() + " is unreachable");
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (const RedisCommand& cmd : commands) {
    argv.clear();
    lens.clear();
    for (std::string_view a : cmd) argv.push_back(a.data()), lens.push_back(a.size());
    if (redisAppendCommandArgv(ctx_, static_cast<int>(argv.size()), argv.data(), lens.data()) != REDIS_OK) {
      const std::string why = ctx_->errstr;
      fail(why);
      return IoError("kv offload: " + why);
    }
  }
  std::vector<RedisReplyPtr> replies;
  replies.reserve(commands.size());
  for (size_t i = 0; i < commands.size(); ++i) {
    void* r = nullptr;
    if (redisGetReply(ctx_, &r) != REDIS_OK || !r) {
      const std::string why = ctx_->err ? ctx_->errstr : "no reply";
      fail(why);
      return IoError("kv offload: " + why);
    }
    replies.emplace_back(static_cast<redisReply*>(r), [](redisReply* p) { freeReplyObject(p); });
  }
  return replies;
}

}  // namespace lancet
