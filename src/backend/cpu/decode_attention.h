// Split-KV decode attention on the CPU: sequences with one query token and a long context are
// cut into fixed partitions of kDecodePartitionKeys keys per KV head; each partition runs the
// vectorized kernel of decode_attention_impl.inc (all query heads of the group share each key
// and value load) on any worker, and a merge step combines the partitions' (max, sum, acc)
// with the online-softmax rule. Partition boundaries depend only on the sequence's own
// context length, never on the batch or the thread count, so a sequence's output is the same
// bits alone or among others and with any number of threads.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/cpu/worker_pool.h"

namespace lancet::cpu {

// Contexts at least this long go through the split path (shorter ones stay on the general
// kernel, where one work item per KV head already covers them cheaply).
constexpr int64_t kDecodeMinKeys = 256;
// Keys per partition: small enough that one sequence of 512+ tokens feeds several workers,
// large enough that the merge (one exp per partition and head) costs nothing.
constexpr int64_t kDecodePartitionKeys = 256;

// One partition of one (sequence, KV head) with a single query token.
struct DecodePartition {
  const float* q;               // [group, head_dim]: the query heads of this KV head
  const int32_t* block_table;   // [blocks of the sequence]
  int64_t key_begin = 0;        // keys [key_begin, key_end) of the sequence
  int64_t key_end = 0;
  int64_t kv_head = 0;
  int64_t group = 0;            // query heads per KV head
  float scale = 1.f;            // softmax scale (times k_scale for an FP8 cache)
  float* max = nullptr;         // [group] out: largest scaled score
  float* sum = nullptr;         // [group] out: sum of exp(score - max)
  float* acc = nullptr;         // [group, head_dim] out: sum of exp(score - max) * v
};

using DecodePartitionFn = void (*)(const DecodePartition& p, const KvCacheLayer& cache);

// The kernel for an instruction set name ("avx512", "avx2", "scalar"); null if not built.
DecodePartitionFn decode_partition_scalar();
DecodePartitionFn decode_partition_avx2();
DecodePartitionFn decode_partition_avx512();
DecodePartitionFn decode_partition_kernel(const std::string& isa);

// Whether a sequence with q_len new tokens and ctx keys takes the split path on this cache.
inline bool decode_attention_handles(int64_t q_len, int64_t ctx, const KvCacheLayer& cache) {
  return q_len == 1 && ctx >= kDecodeMinKeys &&
         (cache.dtype == DType::kF32 || cache.dtype == DType::kBF16 || cache.dtype == DType::kF8E4M3);
}

// Runs attention for every sequence of `a` that decode_attention_handles() selects and leaves
// the others' output rows untouched. The caller has validated a's query offsets, context
// lengths and block tables. scratch holds the partitions' partial results between calls.
Status decode_attention(const PagedAttentionArgs& a, const KvCacheLayer& cache, WorkerPool& pool,
                        const std::string& isa, std::vector<float>* scratch);

}  // namespace lancet::cpu
