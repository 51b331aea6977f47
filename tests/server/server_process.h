// Test helper: runs `lancet serve` as a child process on a free port (port 0; the port is read
// from the server's "listening on" log line), waits for /health, and stops it with a signal.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "server/httplib_include.h"
#include "test_paths.h"

namespace lancet::testing {

class ServerProcess {
 public:
  ~ServerProcess() {
    if (pid_ > 0) {
      ::kill(pid_, SIGKILL);
      int st = 0;
      ::waitpid(pid_, &st, 0);
    }
  }

  // Starts `lancet serve MODEL --port 0 ARGS...`; false (with the log in *error) on failure.
  bool start(const std::vector<std::string>& args, std::string* error) {
    log_path_ = make_temp_dir() + "/serve.log";
    std::vector<std::string> argv = {lancet_binary(), "serve", "--port", "0"};
    argv.insert(argv.end(), args.begin(), args.end());
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log_path_.c_str(), "w", stderr);
      (void)f;
      std::vector<char*> cargs;
      for (auto& a : argv) cargs.push_back(a.data());
      cargs.push_back(nullptr);
      ::execv(cargs[0], cargs.data());
      _exit(127);
    }
    const std::regex re("listening on http://[0-9.]+:([0-9]+)");
    for (int i = 0; i < 300 && port_ < 0; ++i) {
      std::smatch m;
      const std::string text = log();
      if (std::regex_search(text, m, re)) port_ = std::stoi(m[1]);
      else if (exited()) break;
      else std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    if (port_ < 0) {
      *error = "server did not start: " + log();
      return false;
    }
    return true;
  }

  bool wait_healthy(double timeout_s, std::string* error) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    httplib::Client cli("127.0.0.1", port_);
    while (std::chrono::steady_clock::now() < deadline) {
      auto r = cli.Get("/health");
      if (r && r->status == 200) return true;
      if (exited()) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    *error = "server not healthy: " + log();
    return false;
  }

  // Sends `sig` and waits for the exit; returns the exit code (128+signal if killed, -1 on timeout).
  int stop(int sig = SIGTERM, double timeout_s = 60) {
    if (pid_ <= 0) return status_;
    ::kill(pid_, sig);
    return wait_exit(timeout_s);
  }

  int wait_exit(double timeout_s) {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_s);
    while (pid_ > 0 && std::chrono::steady_clock::now() < deadline) {
      if (exited()) return status_;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return pid_ > 0 ? -1 : status_;
  }

  int port() const { return port_; }
  pid_t pid() const { return pid_; }
  std::string base_url() const { return "http://127.0.0.1:" + std::to_string(port_); }
  std::string log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    return ss.str();
  }

 private:
  bool exited() {
    if (pid_ <= 0) return true;
    int st = 0;
    if (::waitpid(pid_, &st, WNOHANG) == pid_) {
      status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
      pid_ = -1;
      return true;
    }
    return false;
  }

  pid_t pid_ = -1;
  int port_ = -1;
  int status_ = -1;
  std::string log_path_;
};

}  // namespace lancet::testing
