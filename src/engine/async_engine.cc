// AsyncEngine: one loop thread; submit/abort/shutdown from anywhere.
#include "engine/async_engine.h"

#include <chrono>
#include <thread>

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

bool RequestStream::next_for(TokenEvent* ev, int64_t timeout_ms, bool* timed_out) {
  std::unique_lock<std::mutex> lock(mu_);
  *timed_out = false;
  if (!cv_.wait_for(lock, std::chrono::milliseconds(timeout_ms),
                    [&] { return !queue_.empty() || closed_; })) {
    *timed_out = true;
    return false;
  }
  if (queue_.empty()) return false;
  *ev = std::move(queue_.front());
  queue_.pop_front();
  return true;
}

void RequestStream::cancel() {
  if (owner_ && !done()) owner_->abort(id_);
}

bool RequestStream::done() const {
  std::lock_guard<std::mutex> lock(mu_);
  return closed_;
}

void RequestStream::push(TokenEvent ev) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(ev));
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

AsyncEngine::AsyncEngine(Engine* engine) : engine_(engine) {
  thread_ = std::thread([this] { loop(); });
}

std::unique_lock<std::mutex> AsyncEngine::lock_engine() const {
  waiters_.fetch_add(1, std::memory_order_acq_rel);
  std::unique_lock<std::mutex> lock(engine_mu_);
  waiters_.fetch_sub(1, std::memory_order_acq_rel);
  return lock;
}

AsyncEngine::~AsyncEngine() {
  shutdown(/*drain=*/false);
}

StatusOr<std::shared_ptr<RequestStream>> AsyncEngine::submit(const GenerationRequest& req) {
  if (!accepting_.load()) return FailedPrecondition("the server is shutting down");
  auto stream = std::make_shared<RequestStream>();
  {
    auto lock = lock_engine();
    ASSIGN_OR_RETURN(int64_t id, engine_->add_request(req));
    stream->id_ = id;
    stream->n_ = req.params.n;
    stream->open_choices_ = req.params.n;
    stream->owner_ = this;
    streams_[id] = stream;
  }
  work_cv_.notify_one();
  return stream;
}

void AsyncEngine::abort(int64_t request_id) {
  engine_->abort(request_id);  // thread-safe by itself
  work_cv_.notify_one();
}

void AsyncEngine::shutdown(bool drain) {
  accepting_.store(false);
  if (drain) {
    auto lock = lock_engine();
    while (!streams_.empty()) {
      lock.unlock();
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
      lock.lock();
    }
  } else {
    std::vector<int64_t> ids;
    {
      auto lock = lock_engine();
      for (const auto& [id, s] : streams_) ids.push_back(id);
    }
    for (int64_t id : ids) engine_->abort(id);
    // Let the loop turn the aborts into events and close the streams.
    for (int i = 0; i < 1000; ++i) {
      {
        auto lock = lock_engine();
        if (streams_.empty()) break;
      }
      work_cv_.notify_one();
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
  }
  if (!stop_.exchange(true)) {
    work_cv_.notify_all();
    if (thread_.joinable()) thread_.join();
  }
}

EngineStats AsyncEngine::stats() const {
  auto lock = lock_engine();
  return engine_->stats();
}

int64_t AsyncEngine::num_active_requests() const {
  auto lock = lock_engine();
  return static_cast<int64_t>(streams_.size());
}

void AsyncEngine::loop() {
  while (!stop_.load()) {
    while (waiters_.load(std::memory_order_acquire) > 0) std::this_thread::yield();  // callers first
    std::unique_lock<std::mutex> lock(engine_mu_);
    if (!engine_->has_work()) {
      work_cv_.wait_for(lock, std::chrono::milliseconds(50));
      continue;
    }
    auto events = engine_->step();
    if (!events.ok()) LOG_ERROR("engine step failed: " << events.status().to_string());
    struct Delivery {
      std::shared_ptr<RequestStream> stream;
      TokenEvent event;
      bool last;  // the request's final event: close the stream after pushing it
    };
    std::vector<Delivery> deliveries;
    if (events.ok()) {
      for (TokenEvent& ev : *events) {
        auto it = streams_.find(ev.request_id);
        if (it == streams_.end()) continue;
        std::shared_ptr<RequestStream> s = it->second;
        const bool last = ev.finished && --s->open_choices_ == 0;
        deliveries.push_back({s, std::move(ev), last});
        if (last) streams_.erase(it);
      }
    }
    lock.unlock();
    for (Delivery& d : deliveries) {
      d.stream->push(std::move(d.event));
      if (d.last) d.stream->close();
    }
  }
}

}  // namespace lancet
