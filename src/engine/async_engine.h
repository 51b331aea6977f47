// Runs the Engine's step loop on its own thread and hands each request's events to a
// per-request stream, so callers (the HTTP server, the interactive chat) submit from any
// thread and read their tokens as they come. A reader that goes away calls cancel(), which
// aborts the request and frees its blocks within one step.
//
// Only the loop thread touches the Engine (abort() aside, which is thread-safe by itself).
// Other threads hand their work over through a queue that the loop drains between steps, so a
// submit waits at most for the step in progress, however long the loop keeps stepping; the
// loop pushes every event once, right after the step that made it, and the push wakes the
// reader. Nothing polls.
//
// Between the step and the push the loop runs the output stage, when there is one
// (engine/output_stage.h: text, stop strings), and finishes the sequences it ended, so a
// stream's events carry their text and a stop string's final event comes with its token.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <mutex>
#include <thread>
#include <vector>

#include "engine/engine.h"
#include "engine/output_stage.h"

namespace lancet {

class AsyncEngine;

// Events of one request, in order; ends after the last sequence's finished event.
class RequestStream {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Wait { kEvent, kEnded, kTimedOut };

  int64_t id() const { return id_; }
  int32_t num_choices() const { return n_; }
  // Blocks until an event arrives (true) or the stream has ended and is drained (false).
  bool next(TokenEvent* ev);
  // As next(), but gives up at `deadline` (kTimedOut). An event already queued is returned
  // even when the deadline has passed.
  Wait next_until(TokenEvent* ev, Clock::time_point deadline);
  // Aborts the request (idempotent; safe after it ended).
  void cancel();
  bool done() const;

 private:
  friend class AsyncEngine;
  // Queues one event; `last` (the request's final event) also ends the stream, under the
  // same lock, so a reader never sees the end before every event.
  void push(TokenEvent ev, bool last);
  void close();

  int64_t id_ = 0;
  int32_t n_ = 1;
  int32_t open_choices_ = 1;  // loop thread only
  AsyncEngine* owner_ = nullptr;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> queue_;
  bool closed_ = false;
};

class AsyncEngine {
 public:
  // output: the output side (not owned; called on the loop thread only). Without one, events
  // carry no text and requests with stop strings are refused.
  explicit AsyncEngine(Engine* engine, OutputStage* output = nullptr);
  ~AsyncEngine();  // stops the loop (aborting what is left)

  // Validates and queues; errors are the output stage's or the engine's (bad input, too long)
  // or FailedPrecondition once shutting down. Waits for the loop to take the request (at most
  // the step in progress).
  StatusOr<std::shared_ptr<RequestStream>> submit(const GenerationRequest& req);
  // Queues every request at once, in order, so that the loop takes them all before its next
  // step (one submit() after another adds one request per step); one result per request.
  std::vector<StatusOr<std::shared_ptr<RequestStream>>> submit_all(std::span<const GenerationRequest> reqs);
  void abort(int64_t request_id);
  // Stops accepting work; with drain, waits until every request in flight has finished,
  // without, aborts them and waits for their final events. Then stops the loop.
  void shutdown(bool drain);
  bool accepting() const;
  // The engine's statistics as of the end of the last step (or the last submit). A stream's
  // final event is pushed after these are published, so a reader that saw its stream end
  // reads statistics that include its request's freed blocks.
  EngineStats stats() const;
  int64_t num_active_requests() const;
  // Runs `task` on the loop thread between two steps (what must not race a step: writing a
  // LoRA adapter into the model's slots) and returns its status; FailedPrecondition once the
  // loop has stopped.
  Status run_on_loop(const std::function<Status()>& task);

 private:
  struct PendingTask {
    const std::function<Status()>* task = nullptr;
    Status status;
    bool done = false;
  };
  // A submit waiting for the loop: the loop fills status/stream and sets done.
  struct PendingSubmit {
    const GenerationRequest* request = nullptr;
    Status status;
    std::shared_ptr<RequestStream> stream;
    bool done = false;
  };
  void loop();
  // Loop thread: registers the taken submits with the engine and wakes their callers.
  void admit(const std::vector<PendingSubmit*>& taken);
  // Loop thread: one step's events through the output stage; the sequences it ended are
  // finished in the engine.
  void process_outputs(std::vector<TokenEvent>* events);
  // Loop thread: pushes one step's events to their streams (closing finished ones).
  void deliver(std::vector<TokenEvent>* events);
  void publish_stats();

  Engine* engine_;
  OutputStage* output_;
  double output_seconds_ = 0;  // loop thread only; published in stats_
  std::map<int64_t, std::shared_ptr<RequestStream>> streams_;  // loop thread only

  mutable std::mutex mu_;  // guards everything below
  std::condition_variable work_cv_;    // the loop waits here for work
  std::condition_variable submit_cv_;  // submitters wait here for the loop to take them
  std::condition_variable idle_cv_;    // shutdown waits here for active_ == 0
  std::deque<PendingSubmit*> submits_;
  std::deque<PendingTask*> tasks_;
  int64_t active_ = 0;  // requests submitted (queued or running) whose stream is still open
  bool accepting_ = true;
  bool abort_all_ = false;
  bool stop_ = false;
  EngineStats stats_;

  std::thread thread_;
  std::once_flag joined_;
};

}  // namespace lancet
