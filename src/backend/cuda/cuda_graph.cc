// CUDA graphs on the backend's stream: capture records the enqueued kernels and cuBLASLt calls,
// instantiation turns them into an executable graph, and a launch replays it with one call
// (a decode step of a 32-layer model is a few hundred kernels; replaying them as a graph
// removes the per-kernel launch cost from the step). Also pinned host memory for the copies
// that feed a replay.
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"

namespace lancet::cuda {
namespace {

class CudaGraph final : public BackendGraph {
 public:
  CudaGraph(cudaGraph_t g, cudaGraphExec_t e) : graph_(g), exec_(e) {}
  ~CudaGraph() override {
    if (exec_) cudaGraphExecDestroy(exec_);
    if (graph_) cudaGraphDestroy(graph_);
  }
  cudaGraphExec_t exec() const { return exec_; }

 private:
  cudaGraph_t graph_;
  cudaGraphExec_t exec_;
};

}  // namespace

Status CudaBackend::begin_capture() {
  if (capturing_) return FailedPrecondition("cuda backend: a graph capture is already in progress");
  if (op_timing()) return FailedPrecondition("cuda backend: graphs cannot be captured while ops are timed");
  // Thread-local mode: other threads' CUDA calls (another backend, the allocator) are not
  // forbidden during the capture, only this thread's unsafe ones.
  LANCET_CUDA_RETURN(cudaStreamBeginCapture(ctx_->stream, cudaStreamCaptureModeThreadLocal), "begin capture");
  capturing_ = true;
  return OkStatus();
}

StatusOr<std::unique_ptr<BackendGraph>> CudaBackend::end_capture() {
  if (!capturing_) return FailedPrecondition("cuda backend: end_capture without begin_capture");
  capturing_ = false;
  cudaGraph_t graph = nullptr;
  LANCET_CUDA_RETURN(cudaStreamEndCapture(ctx_->stream, &graph), "end capture");
  cudaGraphExec_t exec = nullptr;
  const cudaError_t e = cudaGraphInstantiate(&exec, graph, 0);
  if (e != cudaSuccess) {
    cudaGraphDestroy(graph);
    cudaGetLastError();
    return cuda_status(e, "cudaGraphInstantiate");
  }
  return std::unique_ptr<BackendGraph>(new CudaGraph(graph, exec));
}

Status CudaBackend::launch_graph(BackendGraph& graph) {
  auto* g = dynamic_cast<CudaGraph*>(&graph);
  if (!g) return InvalidArgument("cuda backend: graph from another backend");
  clear_prepared_input();  // a replay may rewrite both the noted input and the fp8 scratch
  LANCET_CUDA_RETURN(cudaGraphLaunch(g->exec(), ctx_->stream), "cudaGraphLaunch");
  return OkStatus();
}

StatusOr<Buffer> CudaBackend::alloc_host(size_t nbytes) {
  void* p = nullptr;
  LANCET_CUDA_RETURN(cudaMallocHost(&p, nbytes ? nbytes : 1), "cudaMallocHost");
  return Buffer(p, nbytes, std::shared_ptr<void>(p, [](void* q) { cudaFreeHost(q); }));
}

bool CudaBackend::memory_info(size_t* free_bytes, size_t* total_bytes) {
  // Freed buffers stay in the stream-ordered pool (release threshold: never); they are free
  // for our own allocations, so count them as free.
  DeviceScope scope(ctx_->device);
  cudaMemPool_t pool;
  uint64_t reserved = 0, used = 0;
  if (cudaDeviceGetDefaultMemPool(&pool, ctx_->device) == cudaSuccess) {
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrReservedMemCurrent, &reserved);
    cudaMemPoolGetAttribute(pool, cudaMemPoolAttrUsedMemCurrent, &used);
  }
  if (cudaMemGetInfo(free_bytes, total_bytes) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  *free_bytes += reserved > used ? reserved - used : 0;
  return true;
}

}  // namespace lancet::cuda
