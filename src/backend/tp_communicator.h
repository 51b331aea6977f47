// The collectives of a tensor-parallel group whose N ranks live in one process, each rank a
// backend (one per GPU, or CPU backends simulating a group): an in-place sum over ranks.
// In-process groups on the CPU sum host buffers (InProcessCommunicator); CUDA groups use NCCL
// (backend/cuda/nccl_communicator.cc), enqueued on each rank's stream.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace lancet {

class TpCommunicator {
 public:
  virtual ~TpCommunicator() = default;
  virtual int size() const = 0;
  // Every per_rank[r][0, n) (memory of ranks[r]) becomes the element-wise sum over ranks.
  // Work the ranks enqueued before is included; the call may return before the sum is done
  // (stream-ordered backends), so later ops on the same rank see the result.
  virtual Status all_reduce_sum(std::span<Backend* const> ranks, std::span<float* const> per_rank,
                                int64_t n) = 0;
};

// For ranks whose buffers are host memory (CPU backends). Waits for every rank, then sums in
// rank order, so the result is the same on every run.
class InProcessCommunicator : public TpCommunicator {
 public:
  explicit InProcessCommunicator(int size) : size_(size) {}
  int size() const override { return size_; }
  Status all_reduce_sum(std::span<Backend* const> ranks, std::span<float* const> per_rank, int64_t n) override;

 protected:
  Status check(std::span<Backend* const> ranks, std::span<float* const> per_rank) const;

 private:
  int size_;
  std::vector<float> acc_;
};

// The communicator for these ranks: NCCL when they are CUDA backends (one per GPU, devices
// distinct), in-process summing when they are CPU backends.
StatusOr<std::unique_ptr<TpCommunicator>> make_tp_communicator(std::span<Backend* const> ranks);

}  // namespace lancet
