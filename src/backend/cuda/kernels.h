// Host-side launchers of the CUDA backend's kernels (defined in the .cu files beside this).
// Each enqueues work on the given stream and returns the launch error (cudaGetLastError);
// none synchronizes. Indices that come from device memory (token ids, rows, positions,
// slots, block tables, query offsets) cannot be checked on the host without a round trip,
// so kernels skip bad ones (writing zeros) and set a bit in a device error word that
// CudaBackend::synchronize() turns into a Status.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace lancet::cuda {

// Bits of the device error word.
enum ErrorBit : unsigned {
  kErrEmbeddingId = 1u << 0,   // embedding: token id outside the table
  kErrGatherRow = 1u << 1,     // gather_rows: row outside [0, n)
  kErrRopePosition = 1u << 2,  // rope: position outside the table
  kErrKvSlot = 1u << 3,        // kv_write: slot past the cache
  kErrBlockId = 1u << 4,       // paged_attention: block id outside the cache
  kErrSeqShape = 1u << 5,      // paged_attention: bad query_start / context_lens
};

// y = bf16(x), round to nearest even.
cudaError_t launch_f32_to_bf16(const float* x /*[n]*/, void* y /*[n] bf16*/, int64_t n, cudaStream_t s);

// out[i] = table[ids[i]] as f32.
cudaError_t launch_embedding_bf16(const void* table /*[rows, cols] bf16*/, int64_t rows, int64_t cols,
                                  const int32_t* ids /*[n]*/, int64_t n, float* out /*[n, cols]*/,
                                  unsigned* err, cudaStream_t s);

cudaError_t launch_rms_norm(const RmsNormArgs& a, cudaStream_t s);
cudaError_t launch_rope(const RopeArgs& a, unsigned* err, cudaStream_t s);
cudaError_t launch_silu_mul(const float* gate /*[n]*/, const float* up /*[n]*/, int64_t n, float* out /*[n]*/,
                            cudaStream_t s);
cudaError_t launch_gather_rows(const float* x /*[n, d]*/, int64_t n, int64_t d, const int32_t* rows /*[r]*/,
                               int64_t r, float* out /*[r, d]*/, unsigned* err, cudaStream_t s);
cudaError_t launch_kv_write(const KvWriteArgs& a, const KvCacheLayer& cache, unsigned* err, cudaStream_t s);

// How paged attention splits each query's context (flash decoding): num_splits > 1 writes
// per-split partial results to the workspace and a second kernel combines them.
struct AttentionPlan {
  int num_splits = 1;
  int split_len = 0;      // keys per split (multiple of 16)
  float* partial = nullptr;  // [num_tokens, num_heads, num_splits, head_dim + 2] when num_splits > 1
};

// Query heads of one KV head that one CTA handles (the grid's head chunking).
int attention_heads_per_cta(int64_t head_dim);
// Floats of workspace a plan with num_splits needs.
int64_t attention_workspace_floats(int64_t num_tokens, int64_t num_heads, int64_t head_dim, int num_splits);

cudaError_t launch_paged_attention(const PagedAttentionArgs& a, const KvCacheLayer& cache,
                                   const AttentionPlan& plan, unsigned* err, cudaStream_t s);

}  // namespace lancet::cuda
