// Entry point of the CUDA backend for code that must not see CUDA headers (backend.cc).
// Only declared in builds with CUDA (LANCET_HAVE_CUDA).
#pragma once

#include <memory>

#include "backend/backend.h"

namespace lancet {

struct CudaBackendOptions {
  int device = 0;
  size_t gemm_workspace_bytes = size_t{32} << 20;  // cuBLASLt workspace
};

// FailedPrecondition when no GPU is visible.
StatusOr<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opts = {});

}  // namespace lancet
