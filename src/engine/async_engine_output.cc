// AsyncEngine's output thread: each step's events through the output stage (text, stop
// strings) and out to their streams, beside the engine loop (see async_engine.h).
#include <algorithm>
#include <chrono>

#include "engine/async_engine.h"

namespace lancet {
namespace {

bool same_seq(const TokenEvent& ev, const SequenceKey& k) {
  return ev.request_id == k.request_id && ev.index == k.index;
}

}  // namespace

void AsyncEngine::output_loop() {
  for (;;) {
    OutputBatch batch;
    {
      std::unique_lock<std::mutex> lock(queue_mu_);
      queue_cv_.wait(lock, [&] { return !queue_.empty() || output_stop_; });
      if (queue_.empty()) break;  // stopped, and everything sent
      batch = std::move(queue_.front());
      queue_.pop_front();
    }
    queue_cv_.notify_all();  // room for the loop
    handle_output(&batch);
  }
  // The loop has stopped: end the readers' waits (nothing is left after a drained shutdown).
  std::lock_guard<std::mutex> out(out_mu_);
  for (auto& [id, s] : streams_) s->close();
  streams_.clear();
  held_.clear();
}

void AsyncEngine::handle_output(OutputBatch* batch) {
  const auto t0 = std::chrono::steady_clock::now();
  struct Delivery {
    RequestStream* stream;
    TokenEvent event;
    bool last;
  };
  std::vector<Delivery> out;
  std::vector<std::shared_ptr<RequestStream>> ending;  // keeps closed streams alive to their push
  std::vector<SequenceKey> ended;                       // stop strings completed in this batch
  {
    std::lock_guard<std::mutex> lock(out_mu_);
    if (output_ && !batch->events.empty()) output_->process(&batch->events, &ended);
    // The held final events whose sequences the engine has finished go first: they end
    // sequences of earlier steps.
    std::vector<TokenEvent> ready;
    for (const SequenceKey& k : batch->finished) {
      auto it = std::find_if(held_.begin(), held_.end(), [&](const TokenEvent& ev) { return same_seq(ev, k); });
      if (it == held_.end()) continue;
      ready.push_back(std::move(*it));
      held_.erase(it);
    }
    out.reserve(ready.size() + batch->events.size());
    auto route = [&](TokenEvent& ev, bool released) {
      auto it = streams_.find(ev.request_id);
      if (it == streams_.end()) return;
      RequestStream* s = it->second.get();
      const size_t choice = static_cast<size_t>(ev.index);
      if (!released) {
        // Events the engine made for a choice after its final one (it ran on until the loop
        // finished a stop string's sequence) are dropped.
        if (choice < s->choice_done_.size() && s->choice_done_[choice]) return;
        if (ev.finished && std::any_of(ended.begin(), ended.end(), [&](const SequenceKey& k) { return same_seq(ev, k); })) {
          // A stop string's final event waits until the engine has finished its sequence.
          if (choice < s->choice_done_.size()) s->choice_done_[choice] = true;
          held_.push_back(std::move(ev));
          return;
        }
        if (ev.finished && choice < s->choice_done_.size()) s->choice_done_[choice] = true;
      }
      const bool last = ev.finished && --s->open_choices_ == 0;
      if (last) {
        ending.push_back(std::move(it->second));
        streams_.erase(it);
      }
      out.push_back({s, std::move(ev), last});
    };
    for (TokenEvent& ev : ready) route(ev, /*released=*/true);
    for (TokenEvent& ev : batch->events) route(ev, /*released=*/false);
  }
  {
    // The loop finishes the stop strings' sequences at its next turn; counted out before the
    // pushes, so a reader that saw its stream end sees it gone here too.
    std::lock_guard<std::mutex> lock(mu_);
    if (!ended.empty()) {
      stop_ended_.insert(stop_ended_.end(), ended.begin(), ended.end());
      work_cv_.notify_one();
    }
    if (!ending.empty()) {
      active_ -= static_cast<int64_t>(ending.size());
      if (active_ == 0) idle_cv_.notify_all();
    }
    output_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }
  for (Delivery& d : out) d.stream->push(std::move(d.event), d.last);
}

}  // namespace lancet
