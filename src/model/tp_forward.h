// A tensor-parallel group in one process: N ranks, each a backend of its own (rank r on GPU r
// with the CUDA backend; CPU backends simulate a group for tests), holding its shard of the
// weights (model/tp_shard.h), its rope table and a paged KV cache of its KV heads only. One
// thread drives every rank: the Llama layer loop of LlamaModel::enqueue with the same ops in
// the same order, plus the collectives of Megatron-style tensor parallelism (an all-reduce
// after the vocab-parallel embedding, after o_proj and after down_proj; the vocab-parallel
// logits are gathered on the host). On CUDA, ops and NCCL all-reduces are only enqueued, so
// the GPUs run concurrently while the thread moves on; it waits once per step, for the logits.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "backend/tp_communicator.h"
#include "io/model_source.h"
#include "model/kv_cache.h"
#include "model/llama_weights.h"
#include "model/step.h"
#include "model/tp_shard.h"

namespace lancet {

struct TpGroupOptions {
  int size = 2;
  std::string backend = "cpu";  // "cpu" (simulated ranks) or "cuda" (rank r on GPU r)
  // CPU ranks: instruction set ("avx2" / "scalar" multiply f32 tiles exactly) and threads
  // (0 = the process-wide pool).
  std::string isa = "avx2";
  int num_threads = 0;
  ActivationPrecision precision = ActivationPrecision::kFast;
  int64_t max_model_len = 4096;  // rope table length
  bool hf_rope_rounding = true;  // as LlamaModelOptions::hf_rope_rounding
  // KV cache per rank; kv_num_blocks 0 leaves it to allocate_kv_cache (sized after the
  // weights are loaded, from the memory left).
  int64_t kv_num_blocks = 64;
  int64_t kv_block_size = 16;
  DType kv_dtype = DType::kF32;  // kF32 or kBF16
};

class TpGroup {
 public:
  // The source must outlive the group. comm defaults to make_tp_communicator over the ranks.
  static StatusOr<std::unique_ptr<TpGroup>> create(const ModelSource& src, const TpGroupOptions& opts,
                                                   std::unique_ptr<TpCommunicator> comm = nullptr);
  ~TpGroup();

  int size() const { return static_cast<int>(ranks_.size()); }
  const ModelConfig& config() const { return cfg_; }
  const TpRankLayout& layout(int rank) const;
  Backend& backend(int rank);
  const PagedKvCache& cache(int rank) const;

  // Bytes of one KV block on one rank (all layers, K and V) for this block size and dtype.
  int64_t kv_block_bytes(int64_t block_size, DType dtype) const;
  // (Re)creates every rank's cache with num_blocks blocks.
  Status allocate_kv_cache(int64_t num_blocks, int64_t block_size, DType dtype);

  // A sequence id valid on every rank's cache (for forward()).
  StatusOr<int64_t> add_sequence();
  void free_sequence(int64_t seq);

  // Runs one step on every rank, blocks reserved in the group's own caches; logits (host) get
  // [logits rows, vocab], rows in step order (as LlamaModel::forward).
  Status forward(const std::vector<SequenceStep>& seqs, std::vector<float>* logits);
  // The same with block tables from the caller (the engine's block manager): tables[i] is
  // seqs[i]'s, identical on every rank.
  Status forward_with_tables(const std::vector<SequenceStep>& seqs,
                             const std::vector<std::span<const int32_t>>& tables, std::vector<float>* logits);

  struct Rank;

 private:
  TpGroup() = default;
  Status ensure_workspace(int64_t tokens, int64_t rows);
  Status run(std::vector<float>* logits);  // on every rank's ranks_[r]->st

  ModelConfig cfg_;
  int64_t max_model_len_ = 0;
  int64_t rotary_dim_ = 0;
  std::unique_ptr<TpCommunicator> comm_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  std::vector<Backend*> backends_;
  int64_t ws_tokens_ = 0, ws_rows_ = 0;
  std::vector<float> part_;  // one rank's logits slice on the host
};

}  // namespace lancet
