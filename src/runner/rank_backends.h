// The backends of a runner's ranks: one for a single device, or N for tensor parallelism (rank
// r on GPU r with the CUDA backend; CPU backends simulate a group for tests and CPU serving).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"

namespace lancet {

struct RankBackendOptions {
  std::string kind = "cpu";  // "cpu" or "cuda"
  int size = 1;
  // CPU ranks of a group: instruction set ("avx2" / "scalar" multiply f32 tiles exactly) and
  // threads (0 = the process-wide pool).
  std::string isa = "auto";
  int num_threads = 0;
  ActivationPrecision precision = ActivationPrecision::kFast;
  Fp8AttentionMath fp8_attention = Fp8AttentionMath::kF16;
};

StatusOr<std::vector<std::unique_ptr<Backend>>> make_rank_backends(const RankBackendOptions& opts);

// Raw pointers for LlamaModel::create.
std::vector<Backend*> rank_pointers(const std::vector<std::unique_ptr<Backend>>& backends);

}  // namespace lancet
