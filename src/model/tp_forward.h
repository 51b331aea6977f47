// A simulated tensor-parallel group on the CPU: N ranks, each with its own CPU backend, its
// shard of the weights (model/tp_shard.h), its own rope table and paged KV cache (the rank's
// KV heads only), running the Llama layer loop of LlamaModel::enqueue with the same ops in the
// same order, plus the collectives of Megatron-style tensor parallelism: an all-reduce after
// the vocab-parallel embedding, after o_proj and after down_proj, and an all-gather of the
// vocab-parallel logits. It exists to prove the sharding reproduces the single-rank logits;
// a multi-GPU runner replaces the in-process communicator with NCCL and runs one rank per GPU.
#pragma once

#include <memory>
#include <span>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/model_source.h"
#include "model/kv_cache.h"
#include "model/llama_weights.h"
#include "model/step.h"
#include "model/tp_shard.h"

namespace lancet {

// The collectives a tensor-parallel forward pass needs. per_rank[r] is rank r's buffer in its
// backend's memory.
class TpCommunicator {
 public:
  virtual ~TpCommunicator() = default;
  virtual int size() const = 0;
  // Every per_rank[r][0, n) becomes the element-wise sum over ranks.
  virtual Status all_reduce_sum(std::span<float* const> per_rank, int64_t n) = 0;
  // out [rows, size * cols] (host) gets rank r's [rows, cols] block at columns r * cols.
  virtual Status all_gather_cols(std::span<const float* const> per_rank, int64_t rows, int64_t cols,
                                 float* out) = 0;
};

// For ranks whose buffers are host memory (CPU backends in one process). Sums in rank order.
class InProcessCommunicator : public TpCommunicator {
 public:
  explicit InProcessCommunicator(int size) : size_(size) {}
  int size() const override { return size_; }
  Status all_reduce_sum(std::span<float* const> per_rank, int64_t n) override;
  Status all_gather_cols(std::span<const float* const> per_rank, int64_t rows, int64_t cols,
                         float* out) override;

 private:
  int size_;
  std::vector<float> acc_;
};

struct TpGroupOptions {
  int size = 2;
  // CPU instruction set per rank ("avx2" / "scalar" multiply f32 tiles exactly).
  std::string isa = "avx2";
  int num_threads = 0;          // per rank backend; 0 = the process-wide pool
  int64_t max_model_len = 4096; // rope table length
  bool hf_rope_rounding = true; // as LlamaModelOptions::hf_rope_rounding
  int64_t kv_num_blocks = 64;   // per rank
  int64_t kv_block_size = 16;
};

class TpSimulatedGroup {
 public:
  // The source must outlive the group. comm defaults to an InProcessCommunicator.
  static StatusOr<std::unique_ptr<TpSimulatedGroup>> create(const ModelSource& src, const TpGroupOptions& opts,
                                                            std::unique_ptr<TpCommunicator> comm = nullptr);
  ~TpSimulatedGroup();

  int size() const { return static_cast<int>(ranks_.size()); }
  const ModelConfig& config() const { return cfg_; }
  const TpRankLayout& layout(int rank) const;
  const PagedKvCache& cache(int rank) const;

  // A sequence id valid on every rank's cache.
  StatusOr<int64_t> add_sequence();
  void free_sequence(int64_t seq);

  // Runs one step on every rank; logits (host) get [logits rows, vocab], rows in step order
  // (as LlamaModel::forward).
  Status forward(const std::vector<SequenceStep>& seqs, std::vector<float>* logits);

  struct Rank;

 private:
  TpSimulatedGroup() = default;
  Status ensure_workspace(int64_t tokens, int64_t rows);

  ModelConfig cfg_;
  int64_t max_model_len_ = 0;
  int64_t rotary_dim_ = 0;
  std::unique_ptr<TpCommunicator> comm_;
  std::vector<std::unique_ptr<Rank>> ranks_;
  int64_t ws_tokens_ = 0, ws_rows_ = 0;
};

}  // namespace lancet
