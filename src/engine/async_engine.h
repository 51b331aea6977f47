// Runs the Engine's step loop on its own thread and hands each request's events to a
// per-request stream, so callers (the HTTP server, the interactive chat) submit from any
// thread and read their tokens as they come. A reader that goes away calls cancel(), which
// aborts the request and frees its blocks within one step.
#pragma once

#include <atomic>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "engine/engine.h"

namespace lancet {

class AsyncEngine;

// Events of one request, in order; ends after the last sequence's finished event.
class RequestStream {
 public:
  int64_t id() const { return id_; }
  int32_t num_choices() const { return n_; }
  // Blocks until an event arrives (true) or the stream has ended and is drained (false).
  bool next(TokenEvent* ev);
  // As next(), but gives up after `timeout_ms` (returns false, *timed_out = true).
  bool next_for(TokenEvent* ev, int64_t timeout_ms, bool* timed_out);
  // Aborts the request (idempotent; safe after it ended).
  void cancel();
  bool done() const;

 private:
  friend class AsyncEngine;
  void push(TokenEvent ev);
  void close();

  int64_t id_ = 0;
  int32_t n_ = 1;
  int32_t open_choices_ = 1;
  AsyncEngine* owner_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> queue_;
  bool closed_ = false;
};

class AsyncEngine {
 public:
  explicit AsyncEngine(Engine* engine);
  ~AsyncEngine();  // stops the loop (aborting what is left)

  // Validates and queues; errors are the engine's (bad input, too long).
  StatusOr<std::shared_ptr<RequestStream>> submit(const GenerationRequest& req);
  void abort(int64_t request_id);
  // Stops accepting work; with drain, waits until every request in flight has finished.
  void shutdown(bool drain);
  bool accepting() const { return accepting_.load(); }
  EngineStats stats() const;
  int64_t num_active_requests() const;

 private:
  void loop();
  // engine_mu_ for every thread but the loop's. std::mutex is not fair and the loop takes the
  // lock again right after each step, so callers announce themselves in waiters_ and the loop
  // lets them in first; otherwise a submit can wait out a whole long prefill.
  std::unique_lock<std::mutex> lock_engine() const;

  Engine* engine_;
  mutable std::mutex engine_mu_;  // guards engine_ and streams_
  mutable std::atomic<int> waiters_{0};  // callers waiting for engine_mu_
  std::condition_variable work_cv_;
  std::map<int64_t, std::shared_ptr<RequestStream>> streams_;
  std::atomic<bool> accepting_{true};
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

}  // namespace lancet
