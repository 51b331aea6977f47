// InProcessCommunicator and the communicator factory.
#include "backend/tp_communicator.h"

#include <cstring>
#include <string>

#ifdef LANCET_HAVE_CUDA
#include "backend/cuda/cuda_factory.h"
#endif

namespace lancet {

Status InProcessCommunicator::check(std::span<Backend* const> ranks, std::span<float* const> per_rank) const {
  if (static_cast<int>(per_rank.size()) != size_ || static_cast<int>(ranks.size()) != size_)
    return InvalidArgument("all_reduce_sum: " + std::to_string(per_rank.size()) + " buffers and " +
                           std::to_string(ranks.size()) + " backends for " + std::to_string(size_) + " ranks");
  return OkStatus();
}

Status InProcessCommunicator::all_reduce_sum(std::span<Backend* const> ranks, std::span<float* const> per_rank,
                                             int64_t n) {
  RETURN_IF_ERROR(check(ranks, per_rank));
  for (Backend* be : ranks) RETURN_IF_ERROR(be->synchronize());
  if (n <= 0 || size_ == 1) return OkStatus();
  acc_.assign(per_rank[0], per_rank[0] + n);
  for (int r = 1; r < size_; ++r) {
    const float* p = per_rank[r];
    for (int64_t i = 0; i < n; ++i) acc_[i] += p[i];
  }
  for (int r = 0; r < size_; ++r) std::memcpy(per_rank[r], acc_.data(), n * sizeof(float));
  return OkStatus();
}

StatusOr<std::unique_ptr<TpCommunicator>> make_tp_communicator(std::span<Backend* const> ranks) {
  if (ranks.empty()) return InvalidArgument("tensor parallel: no ranks");
  const std::string kind = ranks[0]->name();
  for (Backend* be : ranks)
    if (kind != be->name()) return InvalidArgument("tensor parallel: ranks on different backends");
  if (kind == "cpu") return std::unique_ptr<TpCommunicator>(new InProcessCommunicator(static_cast<int>(ranks.size())));
#ifdef LANCET_HAVE_CUDA
  if (kind == "cuda") return make_nccl_communicator(ranks);
#endif
  return Unimplemented("tensor parallel: no communicator for the " + kind + " backend");
}

}  // namespace lancet
