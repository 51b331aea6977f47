// CudaBackend::kv_block_read / kv_block_write: one KV block of every layer between device
// memory and the host (the shared KV tier). A block of one layer's K or V is contiguous
// ([num_blocks, block_size, heads, head_dim]), so each is one cudaMemcpyAsync on the
// backend's stream (ordered after the step that wrote it), and one synchronization ends the
// call, so the host memory may be reused at once.
#include "backend/cuda/cuda_backend.h"

#include "backend/cuda/cuda_check.h"

namespace lancet::cuda {

Status CudaBackend::kv_block_read(std::span<const KvCacheLayer> layers, int64_t block, void* host) {
  ASSIGN_OR_RETURN(const size_t bytes, kv_block_host_bytes(layers, block));
  auto* dst = static_cast<uint8_t*>(host);
  const size_t offset = static_cast<size_t>(block) * bytes;
  for (const KvCacheLayer& l : layers) {
    LANCET_CUDA_RETURN(cudaMemcpyAsync(dst, static_cast<const uint8_t*>(l.k) + offset, bytes, cudaMemcpyDefault,
                                       ctx_->stream), "kv_block_read");
    LANCET_CUDA_RETURN(cudaMemcpyAsync(dst + bytes, static_cast<const uint8_t*>(l.v) + offset, bytes,
                                       cudaMemcpyDefault, ctx_->stream), "kv_block_read");
    dst += 2 * bytes;
  }
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "kv_block_read sync");
  return OkStatus();
}

Status CudaBackend::kv_block_write(std::span<const KvCacheLayer> layers, int64_t block, const void* host) {
  ASSIGN_OR_RETURN(const size_t bytes, kv_block_host_bytes(layers, block));
  const auto* src = static_cast<const uint8_t*>(host);
  const size_t offset = static_cast<size_t>(block) * bytes;
  for (const KvCacheLayer& l : layers) {
    LANCET_CUDA_RETURN(cudaMemcpyAsync(static_cast<uint8_t*>(l.k) + offset, src, bytes, cudaMemcpyDefault,
                                       ctx_->stream), "kv_block_write");
    LANCET_CUDA_RETURN(cudaMemcpyAsync(static_cast<uint8_t*>(l.v) + offset, src + bytes, bytes, cudaMemcpyDefault,
                                       ctx_->stream), "kv_block_write");
    src += 2 * bytes;
  }
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "kv_block_write sync");
  return OkStatus();
}

}  // namespace lancet::cuda
