// Entry point of the CUDA backend for code that must not see CUDA headers (backend.cc).
// Only declared in builds with CUDA (LANCET_HAVE_CUDA).
#pragma once

#include <memory>
#include <span>

#include "backend/backend.h"
#include "backend/tp_communicator.h"

namespace lancet {

struct CudaBackendOptions {
  int device = 0;
  size_t gemm_workspace_bytes = size_t{32} << 20;  // cuBLASLt workspace
};

// FailedPrecondition when no GPU is visible.
StatusOr<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opts = {});

// NCCL all-reduce over CUDA backends on distinct devices, all driven from one thread (one
// communicator per device from ncclCommInitAll, calls grouped with ncclGroupStart/End).
// libnccl.so.2 is loaded at run time (LANCET_NCCL_LIBRARY names another file), so binaries
// that never run a tensor-parallel group do not need it. FailedPrecondition when it is missing.
StatusOr<std::unique_ptr<TpCommunicator>> make_nccl_communicator(std::span<Backend* const> ranks);

}  // namespace lancet
