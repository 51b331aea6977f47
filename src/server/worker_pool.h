// Threads that run complete requests handed over by the event loop, with a bounded queue: a
// request that finds every thread busy waits in the queue; one that finds the queue full is
// refused (try_submit false) and the loop answers it 503 at once, so a burst cannot pile up
// without bound.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

namespace lancet::server {

class WorkerPool {
 public:
  // `threads` >= 1 threads, at most `max_queued` jobs waiting for one.
  WorkerPool(size_t threads, size_t max_queued);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues a job; false when the queue is full or the pool is shut down.
  bool try_submit(std::function<void()> job);
  // Runs what is queued, then joins the threads; later submissions are refused.
  void shutdown();

  size_t threads() const { return threads_.size(); }

 private:
  void work();

  const size_t max_queued_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool shut_down_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace lancet::server
