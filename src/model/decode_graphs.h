// Decode steps replayed as captured backend graphs (CUDA graphs). A decode step runs every
// layer's kernels for one token per sequence; launching them one by one costs more CPU time
// than the GPU needs to run them at small batches. Each (batch bucket, block-table width
// bucket) gets one graph, captured the first time it is needed over fixed metadata buffers;
// a step then pads its batch to the bucket, copies its metadata into those buffers with one
// copy, and replays the graph. Padding rows decode token 0 at position 0 into no cache slot
// (slot -1) and are never returned.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "model/kv_cache.h"
#include "model/step.h"

namespace lancet {

class LlamaModel;

class DecodeGraphs {
 public:
  // Batches above this run eagerly (large batches are GEMM-bound; launches matter little).
  static constexpr int64_t kMaxBatch = 256;

  DecodeGraphs(Backend& backend, int64_t max_model_len) : be_(backend), max_model_len_(max_model_len) {}

  // A step the graphs take: every sequence computes one token and wants its logits, and the
  // batch fits kMaxBatch.
  static bool eligible(const StepMetadata& st);
  // The batch bucket a step of n sequences pads to, and the table width for max_blocks.
  static int64_t batch_bucket(int64_t n);
  static int64_t width_bucket(int64_t max_blocks);

  // Runs the step (capturing its graph first if needed); logits as LlamaModel::forward. With
  // logits null the step is only enqueued: its logits rows [0, num_seqs) stay in
  // model.logits_device() (device sampling reads them there).
  Status run(LlamaModel& model, const StepMetadata& st, PagedKvCache& cache, std::vector<float>* logits);
  // Drops every graph (the model's buffers moved).
  void invalidate() { graphs_.clear(); }
  int64_t num_graphs() const { return static_cast<int64_t>(graphs_.size()); }

 private:
  // The metadata arrays in the arena, for kMaxBatch rows and width columns.
  StepArenaLayout layout(int64_t width) const;
  Status ensure_arena(int64_t width);

  Backend& be_;
  int64_t max_model_len_;
  int64_t arena_width_ = 0;
  Buffer host_, dev_;  // metadata arena (host pinned where the backend has it)
  std::map<std::pair<int64_t, int64_t>, std::unique_ptr<BackendGraph>> graphs_;
};

}  // namespace lancet
