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
}

void RequestStream::close() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    closed_ = true;
  }
  cv_.notify_all();
}

AsyncEngine::AsyncEngine(Engine* engine, OutputStage* output) : engine_(engine), output_(output) {
  stats_ = engine_->stats();
  thread_ = std::thread([this] { loop(); });
}

AsyncEngine::~AsyncEngine() { shutdown(/*drain=*/false); }

StatusOr<std::shared_ptr<RequestStream>> AsyncEngine::submit(const GenerationRequest& req) {
  return std::move(submit_all(std::span<const GenerationRequest>(&req, 1)).front());
}

std::vector<StatusOr<std::shared_ptr<RequestStream>>> AsyncEngine::submit_all(
    std::span<const GenerationRequest> reqs) {
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
  s.output_seconds = output_seconds_;
  std::lock_guard<std::mutex> lock(mu_);
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
    if (output_) output_->add_request(*id, req);
    auto stream = std::make_shared<RequestStream>();
    stream->id_ = *id;
    stream->n_ = p->request->params.n;
    stream->open_choices_ = p->request->params.n;
    stream->owner_ = this;
    streams_[*id] = stream;
    p->stream = std::move(stream);
  }
  std::lock_guard<std::mutex> lock(mu_);
  for (PendingSubmit* p : taken) p->done = true;  // after this the submitter may free *p
  active_ -= failed;
  submit_cv_.notify_all();
  if (active_ == 0) idle_cv_.notify_all();
}

void AsyncEngine::process_outputs(std::vector<TokenEvent>* events) {
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<SequenceKey> ended;
  output_->process(events, &ended);
  if (!ended.empty()) engine_->finish_sequences(ended);
  output_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

void AsyncEngine::deliver(std::vector<TokenEvent>* events) {
  struct Delivery {
    RequestStream* stream;
    TokenEvent* event;
    bool last;
  };
  std::vector<Delivery> out;
  std::vector<std::shared_ptr<RequestStream>> ending;  // keeps closed streams alive to their push
  out.reserve(events->size());
  for (TokenEvent& ev : *events) {
    auto it = streams_.find(ev.request_id);
    if (it == streams_.end()) continue;
    RequestStream* s = it->second.get();
    const bool last = ev.finished && --s->open_choices_ == 0;
    if (last) {
      ending.push_back(std::move(it->second));
      streams_.erase(it);
    }
    out.push_back({s, &ev, last});
  }
  // Counted out before the pushes, so a reader that saw its stream end sees it gone here too.
  if (!ending.empty()) {
    std::lock_guard<std::mutex> lock(mu_);
    active_ -= static_cast<int64_t>(ending.size());
    if (active_ == 0) idle_cv_.notify_all();
  }
  for (Delivery& d : out) d.stream->push(std::move(*d.event), d.last);
}

void AsyncEngine::loop() {
  for (;;) {
    std::vector<PendingSubmit*> taken;
    bool abort_all = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      // has_work() turns true from another thread only through abort(), which notifies under mu_.
      work_cv_.wait(lock, [&] {
        return stop_ || !submits_.empty() || !tasks_.empty() || abort_all_ || engine_->has_work();
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
    }
    if (!taken.empty()) admit(taken);
    if (abort_all)
      for (const auto& [id, s] : streams_) engine_->abort(id);
    if (!engine_->has_work()) {
      publish_stats();
      continue;
    }
    auto events = engine_->step();
    if (events.ok() && output_) process_outputs(&*events);
    publish_stats();  // before the final events, see stats()
    if (!events.ok()) {
      LOG_ERROR("engine step failed: " << events.status().to_string());
      continue;
    }
    deliver(&*events);
  }
  // Stopped: nothing is left in a drained shutdown; otherwise end the readers' waits.
  for (auto& [id, s] : streams_) s->close();
  streams_.clear();
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
