// ThreadPool: workers wait on a generation counter; each parallel_for publishes a new job and
// every thread (caller included) claims chunks until none are left.
#include "core/thread_pool.h"

#include <algorithm>
#include <atomic>
#include <memory>

namespace lancet {

ThreadPool::ThreadPool(int num_threads) {
  if (num_threads <= 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  work_cv_.notify_all();
  for (auto& t : workers_) t.join();
}

void ThreadPool::parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                              int64_t grain) {
  if (n <= 0) return;
  grain = std::max<int64_t>(1, grain);
  const int64_t max_chunks = (n + grain - 1) / grain;
  const int64_t num_chunks = std::min<int64_t>(max_chunks, num_threads_);
  if (num_chunks <= 1 || workers_.empty()) {
    fn(0, n, 0);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    fn_ = &fn;
    n_ = n;
    num_chunks_ = num_chunks;
    chunk_ = (n + num_chunks - 1) / num_chunks;
    next_chunk_ = 0;
    pending_ = static_cast<int>(workers_.size());
    ++generation_;
  }
  work_cv_.notify_all();
  // The caller works too.
  for (;;) {
    int64_t c;
    {
      std::lock_guard<std::mutex> lock(mu_);
      if (next_chunk_ >= num_chunks_) break;
      c = next_chunk_++;
    }
    const int64_t b = c * chunk_, e = std::min(n, b + chunk_);
    if (b < e) fn(b, e, 0);
  }
  std::unique_lock<std::mutex> lock(mu_);
  done_cv_.wait(lock, [this] { return pending_ == 0; });
  fn_ = nullptr;
}

void ThreadPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    std::unique_lock<std::mutex> lock(mu_);
    work_cv_.wait(lock, [&] { return stop_ || generation_ != seen; });
    if (stop_) return;
    seen = generation_;
    while (next_chunk_ < num_chunks_) {
      const int64_t c = next_chunk_++;
      const auto* fn = fn_;
      const int64_t b = c * chunk_, e = std::min(n_, b + chunk_);
      lock.unlock();
      if (b < e) (*fn)(b, e, index);
      lock.lock();
    }
    if (--pending_ == 0) done_cv_.notify_all();
  }
}

namespace {
std::unique_ptr<ThreadPool>& pool_slot() {
  static std::unique_ptr<ThreadPool> pool;
  return pool;
}
std::mutex& pool_mu() {
  static std::mutex mu;
  return mu;
}
}  // namespace

ThreadPool& default_thread_pool() {
  std::lock_guard<std::mutex> lock(pool_mu());
  auto& p = pool_slot();
  if (!p) p = std::make_unique<ThreadPool>(0);
  return *p;
}

void set_default_threads(int n) {
  std::lock_guard<std::mutex> lock(pool_mu());
  pool_slot() = std::make_unique<ThreadPool>(n);
}

}  // namespace lancet
