// A real redis-server for the tests, started on a unix socket in a temporary folder (no port
// to collide with), without persistence; stop() kills it like a crash, start() brings it back
// on the same socket.
#pragma once

#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

#include <hiredis/hiredis.h>

#include "test_paths.h"

extern char** environ;

namespace lancet::testing {

class RedisTestServer {
 public:
  RedisTestServer() : dir_(make_temp_dir()), socket_(dir_ + "/redis.sock") {}
  ~RedisTestServer() { stop(); }

  // True once the server answers PING (within 20 s).
  bool start() {
    std::vector<std::string> args = {"redis-server", "--port", "0", "--unixsocket", socket_, "--unixsocketperm", "700",
                                     "--save", "", "--appendonly", "no", "--dir", dir_, "--logfile", dir_ + "/redis.log"};
    std::vector<char*> argv;
    for (std::string& a : args) argv.push_back(a.data());
    argv.push_back(nullptr);
    if (posix_spawnp(&pid_, "redis-server", nullptr, nullptr, argv.data(), environ) != 0) {
      pid_ = -1;
      return false;
    }
    for (int i = 0; i < 400; ++i) {
      if (ping()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return false;
  }
  // SIGKILL: the server dies mid-run as in a crash.
  void stop() {
    if (pid_ <= 0) return;
    kill(pid_, SIGKILL);
    int st = 0;
    waitpid(pid_, &st, 0);
    pid_ = -1;
    unlink(socket_.c_str());
  }
  std::string url() const { return "unix://" + socket_; }

  // One command on a fresh connection; null when the server does not answer.
  redisReply* command(const std::vector<std::string>& args) const {
    redisContext* c = redisConnectUnix(socket_.c_str());
    if (!c || c->err) {
      if (c) redisFree(c);
      return nullptr;
    }
    std::vector<const char*> argv;
    std::vector<size_t> lens;
    for (const std::string& a : args) argv.push_back(a.data()), lens.push_back(a.size());
    auto* r = static_cast<redisReply*>(redisCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data()));
    redisFree(c);
    return r;
  }
  bool ping() const {
    redisReply* r = command({"PING"});
    const bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return ok;
  }
  // The value of a key ("" and false when absent).
  bool get(const std::string& key, std::string* value) const {
    redisReply* r = command({"GET", key});
    const bool found = r && r->type == REDIS_REPLY_STRING;
    if (found) value->assign(r->str, r->len);
    if (r) freeReplyObject(r);
    return found;
  }
  bool set(const std::string& key, const std::string& value) const {
    redisReply* r = command({"SET", key, value});
    const bool ok = r && r->type == REDIS_REPLY_STATUS;
    if (r) freeReplyObject(r);
    return ok;
  }
  long long dbsize() const {
    redisReply* r = command({"DBSIZE"});
    const long long n = r && r->type == REDIS_REPLY_INTEGER ? r->integer : -1;
    if (r) freeReplyObject(r);
    return n;
  }

 private:
  std::string dir_, socket_;
  pid_t pid_ = -1;
};

}  // namespace lancet::testing
