// Decode steps replayed as captured backend graphs (CUDA graphs). A decode step runs every
// layer's kernels for one token per sequence; launching them one by one costs more CPU time
// than the GPU needs to run them at small batches. Each (batch bucket, block-table width
// bucket) gets one graph per rank, captured the first time it is needed over fixed metadata
// buffers (with tensor parallelism every rank captures at once, its all-reduces included); a
// step then pads its batch to the bucket, copies its metadata into each rank's buffers with
// one copy, and replays the graphs. Padding rows decode token 0 at position 0 into no cache
// slot (slot -1) and are never returned. The step's attention plan travels in the arena too:
// each replay splits the keys as an eager run of that step would (its real lengths, not the
// bucket's), so graphs and eager decoding compute the same values.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <tuple>
#include <utility>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "model/kv_buffers.h"
#include "model/llama_model.h"
#include "model/step.h"
#include "runner/step_upload.h"

namespace lancet {

class DecodeGraphs {
 public:
  // The model's ranks must all support graphs. Decode steps of up to max_batch sequences (the
  // scheduler's --max-num-seqs) replay graphs; larger ones run eagerly.
  DecodeGraphs(LlamaModel& model, int32_t block_size, int64_t max_batch);

  // A step the graphs take: every sequence computes one token and wants its logits, and the
  // batch fits max_batch. Steps with LoRA rows have graphs of their own.
  bool eligible(const StepMetadata& st) const;
  // The batch bucket a step of n sequences pads to: powers of two to 8, then steps of a
  // sixteenth of the next power of two (at least 8), so a bucket above 64 holds less than an
  // eighth of padding rows; and the table width for max_blocks.
  static int64_t batch_bucket(int64_t n);
  // The fewest sequences a step of this batch bucket holds.
  static int64_t batch_bucket_floor(int64_t bucket);
  static int64_t width_bucket(int64_t max_blocks);

  // Called with each rank's view after its metadata was copied and before anything reads it
  // (asynchronous steps write their fed input tokens there).
  using BeforeForward = std::function<Status(int rank, const StepView& view)>;
  // Enqueues the step on every rank (capturing its graphs first if needed); its logits rows
  // [0, num_seqs) are then in each rank's logits buffer, as LlamaModel::enqueue leaves them.
  Status run(const StepMetadata& st, std::span<KvBuffers* const> kv, const BeforeForward& before = nullptr);
  int64_t num_graphs() const { return static_cast<int64_t>(graphs_.size()); }

 private:
  struct Arena {
    // Metadata arena: two host copies (pinned where the backend has it), filled in turn, so
    // that with asynchronous steps the host fills one while the copy of the other, queued
    // behind the step before, may not have run yet; and the device copy the graphs read.
    Buffer host[2];
    Buffer dev;
    int next = 0;
  };
  // The metadata arrays in the arena, for max_batch_ rows and width columns.
  StepArenaLayout layout(int64_t width) const;
  Status ensure_arena(int64_t width);
  // Rank r's padded copy of the step into its arena.
  Status fill(int r, const StepMetadata& st, int64_t B, int64_t W, const AttentionStepPlan& plan);
  Status capture(std::span<const StepView> views, std::span<KvBuffers* const> kv,
                 std::vector<std::unique_ptr<BackendGraph>>* graphs);

  LlamaModel& model_;
  int32_t block_size_;
  int64_t max_batch_;  // the largest bucket a step may pad to
  int64_t max_width_;
  int64_t arena_width_ = 0;
  uint64_t generation_ = 0;  // the model's workspace the graphs point at
  std::vector<Arena> arenas_;  // one per rank
  uint64_t lora_generation_ = 0;  // the model's LoRA slots the LoRA graphs hold
  // Per (batch bucket, table width, LoRA rows or not): one graph per rank.
  std::map<std::tuple<int64_t, int64_t, bool>, std::vector<std::unique_ptr<BackendGraph>>> graphs_;
};

}  // namespace lancet
