// WorkerPool: spin-then-sleep workers over one generation counter (see worker_pool.h).
#include "backend/cpu/worker_pool.h"

#include <immintrin.h>

#include <algorithm>
#include <chrono>

namespace lancet::cpu {

namespace {
// How long an idle worker polls before it sleeps: long enough to bridge the gap between two
// ops of a step (and the host-side work between steps), short enough not to hog a core
// when the backend is idle.
constexpr auto kSpinTime = std::chrono::microseconds(300);

inline void cpu_relax() { _mm_pause(); }
}  // namespace

WorkerPool::WorkerPool(int num_threads) {
  if (num_threads <= 0) num_threads = static_cast<int>(std::max(1u, std::thread::hardware_concurrency()));
  num_threads_ = num_threads;
  for (int i = 1; i < num_threads_; ++i) workers_.emplace_back([this, i] { worker_loop(i); });
}

WorkerPool::~WorkerPool() {
  stop_.store(true);
  generation_.fetch_add(1);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void WorkerPool::run_impl(Trampoline fn, void* ctx, int active) {
  if (workers_.empty() || active <= 1) {
    fn(ctx, 0, 1);
    return;
  }
  job_fn_ = fn;
  job_ctx_ = ctx;
  job_active_ = active;
  pending_.store(static_cast<int>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1);  // seq_cst: pairs with the sleepers_ increment in worker_loop
  if (sleepers_.load() > 0) generation_.notify_all();
  fn(ctx, 0, active);
  // Workers finish within microseconds of the caller; spin, then yield if one was preempted.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4000) cpu_relax();
    else std::this_thread::yield();
  }
}

void WorkerPool::worker_loop(int index) {
  uint64_t seen = 0;
  for (;;) {
    uint64_t g = generation_.load(std::memory_order_acquire);
    if (g == seen) {
      const auto start = std::chrono::steady_clock::now();
      int polls = 0;
      while ((g = generation_.load(std::memory_order_acquire)) == seen) {
        cpu_relax();
        if (++polls % 256 == 0 && std::chrono::steady_clock::now() - start > kSpinTime) {
          sleepers_.fetch_add(1);  // seq_cst: the caller either sees us or we see its bump
          generation_.wait(seen);
          sleepers_.fetch_sub(1);
        }
      }
    }
    seen = g;
    if (stop_.load()) return;
    if (index < job_active_) job_fn_(job_ctx_, index, job_active_);
    pending_.fetch_sub(1, std::memory_order_release);
  }
}

}  // namespace lancet::cpu
