// Programmatic dependent launch (sm_90+): a kernel launched with launch_pdl may start while the
// kernel before it on the stream is still running, so its launch, its CTAs' setup and any loads
// of data no earlier kernel writes (weights, norm gains) overlap the previous kernel's tail.
// Decode runs ~10 short kernels per layer; without this each pays launch latency and ramp-up.
//
// The contract, for every kernel launched through launch_pdl:
//  - pdl_wait() runs in every thread before the first access (read or write) to memory that an
//    earlier kernel on the stream may write or read; it returns once the previous grid has
//    completed and its writes are visible. Only constant inputs may be read before it.
//  - pdl_wait() runs on every path, early exits included: a grid that finished without waiting
//    would let the next kernel's wait return before the kernel two back has completed.
// pdl_launch_dependents() lets the next kernel launch before this one ends; it may be called
// anywhere (the next kernel still waits for this one to complete before touching memory).
// Where a kernel calls it matters (measured on an H200, batch-1 decode of the Llama-3-8B shape):
// at the start of every kernel, waiting grids pile up and crowd out the running one (FP8: 228
// against 299 tok/s); right after every kernel's own pdl_wait() (at most two grids overlap) it
// still cost 4% in BF16 and 6% in FP8 against the placement the kernels use (the gemvs and the
// decode attention after their main loop, the other kernels at their exit, or right after their
// wait when their grid is small: pdl_release_if_small below).
// On sm_80 both are no-ops and launch_pdl launches normally.
#pragma once

#include <cuda_runtime.h>

#include <utility>

namespace lancet::cuda {

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;" :::);
#endif
}

// The short kernels between two weight streams in decode (the norm, rope with the KV write, the
// split-KV merge: a few CTAs each) release the next kernel right after their own pdl_wait(): the
// next gemv's CTAs then launch beside them and fetch their first weights while these run,
// instead of after their exit (FP8 batch-1 decode of the Llama-3-8B shape on an H200: 335 against
// 326 tok/s). Larger grids (prompt steps) keep the release at their exit, where the next grid
// cannot take the SMs their later waves need. The same early release in gemvs whose grid fits
// on the device at once measured slower (331.5 tok/s): there the next kernel is a short one
// with nothing to fetch before its wait.
constexpr unsigned kPdlEarlyReleaseCtas = 128;

__device__ __forceinline__ void pdl_release_if_small() {
  if (gridDim.x * gridDim.y * gridDim.z <= kPdlEarlyReleaseCtas) pdl_launch_dependents();
}

// True when the current device runs programmatic dependent launches (compute capability 9+).
bool pdl_supported();

template <typename... KernelArgs, typename... Args>
cudaError_t launch_pdl(void (*kernel)(KernelArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t s,
                       Args&&... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = smem;
  cfg.stream = s;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
  attr[0].val.programmaticStreamSerializationAllowed = 1;
  cfg.attrs = attr;
  cfg.numAttrs = pdl_supported() ? 1 : 0;
  const cudaError_t e = cudaLaunchKernelEx(&cfg, kernel, std::forward<Args>(args)...);
  if (e != cudaSuccess) cudaGetLastError();  // reported here; do not leave it for the next launch
  return e;
}

}  // namespace lancet::cuda
