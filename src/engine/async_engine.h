// Runs the Engine's step loop on its own thread and hands each request's events to a
// per-request stream, so callers (the HTTP server, the interactive chat) submit from any
// thread and read their tokens as they come. A reader that goes away calls cancel(), which
// aborts the request and frees its blocks within one step.
//
// Only the loop thread touches the Engine (abort() aside, which is thread-safe by itself).
// Other threads hand their work over through a queue that the loop drains between steps, so a
// submit waits at most for the step in progress, however long the loop keeps stepping. Nothing
// polls.
//
// Each step's events go from the loop to a second thread, the output thread, which runs the
// output stage when there is one (engine/output_stage.h: text, stop strings) and pushes the
// events to their streams (the push wakes the reader), while the loop goes on with the next
// step: the engine loop does no detokenization and wakes no reader. A sequence that a stop
// string ends is finished in the engine at the loop's next turn (within one step; the events
// the engine made for it in between are dropped), and its final event, which carries the stop
// string's token, goes out once the engine has finished it, so a reader that saw its stream
// end reads statistics that include its request's freed blocks.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <span>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

#include "engine/engine.h"
#include "engine/output_stage.h"

namespace lancet {

class AsyncEngine;
class RequestStream;

// One reader for many streams (an offline batch, a CLI run over many prompts): each stream
// submitted with the group reports here when it gets an event or ends, so one thread waits
// once for any of them instead of one thread per stream, each woken every step.
class StreamGroup {
 public:
  // Blocks until a stream of the group has news, then moves the streams that have into *ready
  // (each once, in the order their news came; cleared first). The reader drains each with
  // next_until(ev, {}) until kTimedOut (more may come later) or kEnded.
  void wait(std::vector<std::shared_ptr<RequestStream>>* ready);

 private:
  friend class RequestStream;
  void mark(RequestStream* s);

  std::mutex mu_;
  std::condition_variable cv_;
  std::vector<std::shared_ptr<RequestStream>> ready_;
};

// Events of one request, in order; ends after the last sequence's finished event.
class RequestStream : public std::enable_shared_from_this<RequestStream> {
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
  friend class StreamGroup;
  // Queues one event; `last` (the request's final event) also ends the stream, under the
  // same lock, so a reader never sees the end before every event.
  void push(TokenEvent ev, bool last);
  void close();

  int64_t id_ = 0;
  int32_t n_ = 1;
  int32_t open_choices_ = 1;       // output thread only, as choice_done_
  std::vector<bool> choice_done_;  // [n] the choice's final event was taken (later ones are dropped)
  AsyncEngine* owner_ = nullptr;
  std::shared_ptr<StreamGroup> group_;  // set at submit: told about every push and the end
  bool in_group_ready_ = false;         // guarded by group_->mu_
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<TokenEvent> queue_;
  bool closed_ = false;
};

class AsyncEngine {
 public:
  // output: the output side (not owned; called on the loop thread for admissions and on the
  // output thread for events, never both at once). Without one, events carry no text and
  // requests with stop strings are refused.
  explicit AsyncEngine(Engine* engine, OutputStage* output = nullptr);
  // The most steps' events that wait for the output thread; the loop waits before it queues
  // more. A stop string seen in a step's events is finished in the engine at most this many
  // steps, and one more, after the step.
  static constexpr size_t kMaxQueuedBatches = 4;
  ~AsyncEngine();  // stops the loop (aborting what is left)

  // Validates and queues; errors are the output stage's or the engine's (bad input, too long)
  // or FailedPrecondition once shutting down. Waits for the loop to take the request (at most
  // the step in progress).
  StatusOr<std::shared_ptr<RequestStream>> submit(const GenerationRequest& req);
  // Queues every request at once, in order, so that the loop takes them all before its next
  // step (one submit() after another adds one request per step); one result per request.
  // With a group, every stream reports its news to it (StreamGroup::wait).
  std::vector<StatusOr<std::shared_ptr<RequestStream>>> submit_all(std::span<const GenerationRequest> reqs,
                                                                    std::shared_ptr<StreamGroup> group = nullptr);
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
    std::shared_ptr<StreamGroup> group;
    Status status;
    std::shared_ptr<RequestStream> stream;
    bool done = false;
  };
  // What the loop hands the output thread after a step (or after finishing sequences without
  // a step): the step's events, and the sequences ended by stop strings that the engine has
  // finished since the last batch (their held final events may go out now).
  struct OutputBatch {
    std::vector<TokenEvent> events;
    std::vector<SequenceKey> finished;
  };
  void loop();
  // Loop thread: registers the taken submits with the engine and the output side and wakes
  // their callers.
  void admit(const std::vector<PendingSubmit*>& taken);
  // Loop thread: queues a batch for the output thread (waits while kMaxQueuedBatches are).
  void send_to_output(OutputBatch batch);
  void publish_stats();
  // Output thread (async_engine_output.cc): takes batches until the loop has stopped.
  void output_loop();
  // Output thread: one batch through the output stage and out to the streams.
  void handle_output(OutputBatch* batch);

  Engine* engine_;
  OutputStage* output_;

  // The output side: output_'s state and the streams, shared by the loop's admissions and the
  // output thread.
  std::mutex out_mu_;
  std::unordered_map<int64_t, std::shared_ptr<RequestStream>> streams_;
  std::vector<TokenEvent> held_;  // output thread: final events of stop-string ends not yet finished

  std::mutex queue_mu_;  // guards the two below
  std::condition_variable queue_cv_;  // the output thread waits for batches, the loop for room
  std::deque<OutputBatch> queue_;
  bool output_stop_ = false;

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
  std::vector<SequenceKey> stop_ended_;  // ended by stop strings: the loop finishes them
  double output_seconds_ = 0;            // the output thread's busy time, published in stats_

  std::thread thread_;
  std::thread output_thread_;  // joined by the loop thread when it stops
  std::once_flag joined_;
};

}  // namespace lancet
