// AsyncEngine: one loop thread owns the Engine; submit/abort/shutdown from anywhere hand their
// work to it through mu_ (see async_engine.h).
#include "engine/async_engine.h"

#include <algorithm>

#include "core/logging.h"

namespace lancet {

bool RequestStream::next(TokenEvent* ev) {
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !queue_.empty() || closed_; });
  if (queue_.empty()) return false;
  *ev = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

RequestStream::Wait RequestStream::next_until(TokenEvent* ev, Clock::time_point deadline) {
  std::unique_lock<std::mutex> lock(mu_);
  auto ready = [&] { return !queue_.empty() || closed_; };
  if (deadline == Clock::time_point::max()) cv_.wait(lock, ready);  // no deadline: no clock arithmetic near max
  else if (!cv_.wait_until(lock, deadline, ready)) return Wait::kTimedOut;
  if (queue_.empty()) return Wait::kEnded;
  *ev = std::move(queue_.front());
  queue_.pop_front();
  return Wait::kEvent;
}

void RequestStream::cancel() {
  if (owner_ && !done()) owner_->abort(id_);
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void RequestStream::push(TokenEvent ev, bool last) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(ev));
    if (last) closed_ = true;
  }
  cv_.notify_all();
  if (group_) group_->mark(this);
}

void RequestStream::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
  if (group_) group_->mark(this);
}

void StreamGroup::mark(RequestStream* s) {
  bool wake = false;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (s->in_group_ready_) return;  // already listed: its reader drains everything queued
    s->in_group_ready_ = true;
    wake = ready_.empty();
    ready_.push_back(s->shared_from_this());
  }
  if (wake) cv_.notify_one();
}

void StreamGroup::wait(std::vector<std::shared_ptr<RequestStream>>* ready) {
  ready->clear();
  std::unique_lock<std::mutex> lock(mu_);
  cv_.wait(lock, [&] { return !ready_.empty(); });
  ready->swap(ready_);
  for (const auto& s : *ready) s->in_group_ready_ = false;
}

AsyncEngine::AsyncEngine(Engine* engine, OutputStage* output) : engine_(engine), output_(output) {
  stats_ = engine_->stats();
  output_thread_ = std::thread([this] { output_loop(); });
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() { shutdown(/*drain=*/false); }

StatusOr<std::shared_ptr<RequestStream>> AsyncEngine::submit(const GenerationRequest& req) {
  return std::move(submit_all(std::span<const GenerationRequest>(&req, 1)).front());
}

std::vector<StatusOr<std::shared_ptr<RequestStream>>> AsyncEngine::submit_all(
    std::span<const GenerationRequest> reqs, std::shared_ptr<StreamGroup> group) {
  std::vector<PendingSubmit> pending(reqs.size());
  std::vector<StatusOr<std::shared_ptr<RequestStream>>> out;
  out.reserve(reqs.size());
  {
    std::unique_lock<std::mutex> lock(mu_);
    if (!accepting_) {
      for (size_t i = 0; i < reqs.size(); ++i) out.emplace_back(FailedPrecondition("the server is shutting down"));
      return out;
    }
    for (size_t i = 0; i < reqs.size(); ++i) {
      pending[i].request = &reqs[i];
      pending[i].group = group;
      submits_.push_back(&pending[i]);
    }
    active_ += static_cast<int64_t>(reqs.size());
    work_cv_.notify_one();
    submit_cv_.wait(lock, [&] {
      return std::all_of(pending.begin(), pending.end(), [](const PendingSubmit& p) { return p.done; });
    });
  }
  for (PendingSubmit& p : pending) {
    if (p.status.ok())
      out.emplace_back(std::move(p.stream));
    else
      out.emplace_back(p.status);
  }
  return out;
}

Status AsyncEngine::run_on_loop(const std::function<Status()>& task) {
  PendingTask p;
  p.task = &task;
  std::unique_lock<std::mutex> lock(mu_);
  if (stop_) return FailedPrecondition("the engine loop has stopped");
  tasks_.push_back(&p);
  work_cv_.notify_one();
  submit_cv_.wait(lock, [&] { return p.done; });
  return p.status;
}

void AsyncEngine::abort(int64_t request_id) {
  engine_->abort(request_id);  // thread-safe by itself; applied at the next step
  // Notifying under the lock: a loop that checked has_work() before the abort was queued is
  // already waiting by the time we hold mu_, so it cannot miss this wake-up.
  std::lock_guard<std::mutex> lock(mu_);
  work_cv_.notify_one();
}

bool AsyncEngine::accepting() const {
  std::lock_guard<std::mutex> lock(mu_);
  return accepting_;
}

void AsyncEngine::shutdown(bool drain) {
  {
    std::unique_lock<std::mutex> lock(mu_);
    accepting_ = false;
    if (!drain) abort_all_ = true;
    work_cv_.notify_one();
    // Submits already queued count in active_, so they are drained (or aborted) too.
    idle_cv_.wait(lock, [&] { return active_ == 0 || stop_; });
    stop_ = true;
    work_cv_.notify_one();
  }
  // Once, even when shutdown() races the destructor or another shutdown().
  std::call_once(joined_, [this] {
    if (thread_.joinable()) thread_.join();
  });
}

EngineStats AsyncEngine::stats() const {
  std::lock_guard<std::mutex> lock(mu_);
  return stats_;
}

int64_t AsyncEngine::num_active_requests() const {
  std::lock_guard<std::mutex> lock(mu_);
  return active_;
}

void AsyncEngine::publish_stats() {
  EngineStats s = engine_->stats();
  std::lock_guard<std::mutex> lock(mu_);
  s.output_seconds = output_seconds_;
  stats_ = std::move(s);
}

void AsyncEngine::admit(const std::vector<PendingSubmit*>& taken) {
  int64_t failed = 0;
  for (PendingSubmit* p : taken) {
    const GenerationRequest& req = *p->request;
    // Stop strings are matched on text: nobody applies them without an output stage.
    Status st = output_                  ? output_->check(req)
                : req.params.stop.empty() ? OkStatus()
                                          : InvalidArgument("stop strings need a tokenizer; this model has none");
    StatusOr<int64_t> id = st.ok() ? engine_->add_request(req) : StatusOr<int64_t>(st);
    if (!id.ok()) {
      p->status = id.status();
      ++failed;
      continue;
    }
    auto stream = std::make_shared<RequestStream>();
    stream->id_ = *id;
    stream->n_ = p->request->params.n;
    stream->open_choices_ = p->request->params.n;
    stream->choice_done_.assign(static_cast<size_t>(std::max(p->request->params.n, 1)), false);
    stream->owner_ = this;
    stream->group_ = std::move(p->group);
    {
      // Before the step that makes the request's first events, so the output thread knows it.
      std::lock_guard<std::mutex> out(out_mu_);
      if (output_) output_->add_request(*id, req);
      streams_[*id] = stream;
    }
    p->stream = std::move(stream);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (PendingSubmit* p : taken) p->done = true;  // after this the submitter may free *p
  active_ -= failed;
  submit_cv_.notify_all();
  if (active_ == 0) idle_cv_.notify_all();
}

void AsyncEngine::send_to_output(OutputBatch batch) {
  {
    std::unique_lock<std::mutex> lock(queue_mu_);
    queue_cv_.wait(lock, [&] { return queue_.size() < kMaxQueuedBatches; });
    queue_.push_back(std::move(batch));
  }
  queue_cv_.notify_all();
}

void AsyncEngine::loop() {
  for (;;) {
    std::vector<PendingSubmit*> taken;
    bool abort_all = false;
    OutputBatch batch;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // has_work() turns true from another thread only through abort(), which notifies under mu_.
      work_cv_.wait(lock, [&] {
        return stop_ || !submits_.empty() || !tasks_.empty() || abort_all_ || !stop_ended_.empty() ||
               engine_->has_work();
      });
      if (stop_) break;
      if (!tasks_.empty()) {
        std::vector<PendingTask*> run(tasks_.begin(), tasks_.end());
        tasks_.clear();
        lock.unlock();
        for (PendingTask* t : run) t->status = (*t->task)();
        lock.lock();
        for (PendingTask* t : run) t->done = true;
        submit_cv_.notify_all();
      }
      taken.assign(submits_.begin(), submits_.end());
      submits_.clear();
      abort_all = abort_all_;
      abort_all_ = false;
      batch.finished.swap(stop_ended_);
    }
    // Sequences the output thread ended at a stop string: finished before the next step, which
    // then runs without them.
    if (!batch.finished.empty()) engine_->finish_sequences(batch.finished);
    if (!taken.empty()) admit(taken);
    if (abort_all) {
      std::lock_guard<std::mutex> out(out_mu_);
      for (const auto& [id, s] : streams_) engine_->abort(id);
    }
    if (engine_->has_work()) {
      auto events = engine_->step();  // a model failure comes back as events (finish reason error)
      if (events.ok()) batch.events = std::move(*events);
      else LOG_ERROR("engine step failed: " << events.status().to_string());
    }
    publish_stats();  // before the final events, see stats()
    if (!batch.events.empty() || !batch.finished.empty()) send_to_output(std::move(batch));
  }
  // Stopped: the output thread sends what is queued (nothing is left in a drained shutdown)
  // and ends the readers' waits.
  {
    std::lock_guard<std::mutex> lock(queue_mu_);
    output_stop_ = true;
  }
  queue_cv_.notify_all();
  output_thread_.join();
  std::lock_guard<std::mutex> lock(mu_);
  for (PendingSubmit* p : submits_) {
    p->status = FailedPrecondition("the server is shutting down");
    p->done = true;
  }
  submits_.clear();
  for (PendingTask* t : tasks_) {
    t->status = FailedPrecondition("the engine loop has stopped");
    t->done = true;
  }
  tasks_.clear();
  submit_cv_.notify_all();
}

}  // namespace lancet
