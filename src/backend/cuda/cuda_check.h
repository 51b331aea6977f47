// CUDA / cuBLASLt error codes turned into Status, so every launcher can report a failure to
// its caller instead of aborting (DESIGN.md §8.3).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <string>

#include "core/status.h"

namespace lancet::cuda {

inline Status cuda_status(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return OkStatus();
  const std::string msg = std::string("cuda: ") + what + ": " + cudaGetErrorName(e) + " (" +
                          cudaGetErrorString(e) + ")";
  if (e == cudaErrorMemoryAllocation) return ResourceExhausted(msg);
  return Internal(msg);
}

inline Status cublas_status(cublasStatus_t e, const char* what) {
  if (e == CUBLAS_STATUS_SUCCESS) return OkStatus();
  return Internal(std::string("cublasLt: ") + what + ": status " + std::to_string(static_cast<int>(e)));
}

}  // namespace lancet::cuda

#define LANCET_CUDA_RETURN(expr, what) RETURN_IF_ERROR(::lancet::cuda::cuda_status((expr), (what)))
#define LANCET_CUBLAS_RETURN(expr, what) RETURN_IF_ERROR(::lancet::cuda::cublas_status((expr), (what)))
