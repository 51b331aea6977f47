// A fixed pool of worker threads for data-parallel loops (matmul rows, attention heads).
// parallel_for splits [0, n) into contiguous chunks, runs them on the workers and the calling
// thread, and returns when all are done. Not re-entrant: call it from one thread at a time.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace lancet {

class ThreadPool {
 public:
  // num_threads counts the caller: 1 means no worker threads. 0 = hardware concurrency.
  explicit ThreadPool(int num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  int num_threads() const { return num_threads_; }
  // fn(begin, end, thread_index) over chunks of [0, n); chunks are at least `grain` long.
  void parallel_for(int64_t n, const std::function<void(int64_t, int64_t, int)>& fn,
                    int64_t grain = 1);

 private:
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  std::mutex mu_;
  std::condition_variable work_cv_;
  std::condition_variable done_cv_;
  const std::function<void(int64_t, int64_t, int)>* fn_ = nullptr;
  int64_t n_ = 0;
  int64_t chunk_ = 0;
  int64_t num_chunks_ = 0;
  int64_t next_chunk_ = 0;
  int pending_ = 0;
  uint64_t generation_ = 0;
  bool stop_ = false;
};

// Process-wide pool sized by set_default_threads (default: hardware concurrency).
ThreadPool& default_thread_pool();
void set_default_threads(int n);

}  // namespace lancet
