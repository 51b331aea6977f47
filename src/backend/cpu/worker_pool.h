// The CPU backend's thread pool, built for many short parallel regions (a decode step runs a
// few hundred of them, each tens of microseconds long). Workers spin on a generation counter
// for a while after each region before they sleep on a futex, so back-to-back ops wake them in
// well under a microsecond instead of the tens a condition variable costs. Work is split
// statically (thread t always gets the same share), which keeps results deterministic and
// needs no shared counter. Not re-entrant: one caller thread at a time.
#pragma once

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

namespace lancet::cpu {

class WorkerPool {
 public:
  // num_threads counts the caller (1 = no worker threads); <= 0 means hardware concurrency.
  explicit WorkerPool(int num_threads);
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  int num_threads() const { return num_threads_; }

  // fn(thread_index, num_threads) on every thread (the caller is index 0); returns when all
  // have finished.
  template <typename F>
  void run(F&& fn) {
    using Fn = std::remove_reference_t<F>;
    run_impl([](void* ctx, int t, int nt) { (*static_cast<Fn*>(ctx))(t, nt); }, &fn, num_threads_);
  }

  // fn(begin, end, thread_index) over an even static split of [0, n) into at most
  // num_threads chunks of at least `grain` items; small ranges run on the caller alone.
  template <typename F>
  void parallel_for(int64_t n, F&& fn, int64_t grain = 1) {
    if (n <= 0) return;
    if (grain < 1) grain = 1;
    const int64_t chunks = std::min<int64_t>(num_threads_, (n + grain - 1) / grain);
    if (chunks <= 1) {
      fn(int64_t{0}, n, 0);
      return;
    }
    auto body = [&](int t, int) {
      if (t >= chunks) return;
      const int64_t b = n * t / chunks, e = n * (t + 1) / chunks;
      if (b < e) fn(b, e, t);
    };
    using Fn = decltype(body);
    run_impl([](void* ctx, int t, int nt) { (*static_cast<Fn*>(ctx))(t, nt); }, &body,
             static_cast<int>(chunks));
  }

 private:
  using Trampoline = void (*)(void* ctx, int thread, int num_threads);
  void run_impl(Trampoline fn, void* ctx, int active);
  void worker_loop(int index);

  int num_threads_;
  std::vector<std::thread> workers_;
  // The job of the current generation.
  Trampoline job_fn_ = nullptr;
  void* job_ctx_ = nullptr;
  int job_active_ = 0;  // threads with an index below this take part
  alignas(64) std::atomic<uint64_t> generation_{0};
  alignas(64) std::atomic<int> pending_{0};   // workers still running the current job
  alignas(64) std::atomic<int> sleepers_{0};  // workers blocked in generation_.wait
  std::atomic<bool> stop_{false};
};

}  // namespace lancet::cpu
