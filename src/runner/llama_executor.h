// ModelExecutor over the Llama model on its one or N ranks: each rank's KV buffers (its KV
// heads of the same blocks, block ids from the engine's src/kv allocator), the one conversion
// of the batch to the step's metadata, one packed upload per rank, decode-graph replay where it
// applies, the forward pass, and the logits (or device-sampled tokens) of the rows asked for.
#pragma once

#include <memory>
#include <mutex>
#include <span>
#include <vector>

#include "model/kv_buffers.h"
#include "model/llama_model.h"
#include "runner/decode_graphs.h"
#include "runner/device_timeline.h"
#include "runner/device_token_ring.h"
#include "runner/model_executor.h"
#include "runner/step_upload.h"

namespace lancet {

struct LlamaExecutorOptions {
  // Replay decode steps as captured graphs on backends that have them (runner/decode_graphs.h).
  bool decode_graphs = true;
  // The largest decode batch the graphs take (the runtime passes --max-num-seqs).
  int64_t max_graph_batch = 256;
  // Time every op on rank 0 (Backend::set_op_timing; the steps then run eagerly), summed by
  // kind of step into step_profile().
  bool op_timing = false;
};

// Where the device time of the steps went (rank 0): steps in which every sequence decodes one
// token, and steps with prompt (or draft) tokens.
struct StepProfile {
  OpTimes decode;
  OpTimes prompt;
};

class LlamaExecutor : public ModelExecutor {
 public:
  // KV buffers of blocks.num_blocks blocks on every rank of `model` (which must outlive this).
  static StatusOr<std::unique_ptr<LlamaExecutor>> create(LlamaModel& model, const KvBlockConfig& blocks,
                                                         DType kv_dtype = DType::kF32,
                                                         const LlamaExecutorOptions& opts = {});
  ~LlamaExecutor() override;

  int64_t vocab_size() const override { return model_.config().vocab_size; }
  int32_t block_size() const override { return blocks_.block_size; }
  int64_t num_blocks() const override { return blocks_.num_blocks; }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override;
  bool supports_device_sampling() const override { return model_.backend(0).supports_device_sampling(); }
  Status execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                         std::vector<int32_t>* tokens, std::vector<float>* host_logits) override;
  int64_t hidden_size() const override { return model_.config().hidden_size; }
  int64_t lora_slots() const override { return model_.lora_config().num_slots; }
  Status execute_hidden(std::span<const SeqStepInput> batch, std::vector<float>* logits,
                        std::vector<float>* hidden) override;
  // One block of every rank's KV buffers (llama_executor_kv_io.cc).
  KvBlockLayout kv_block_layout() const override;
  Status read_kv_block(BlockId block, std::span<uint8_t> out) override;
  Status write_kv_block(BlockId block, std::span<const uint8_t> in) override;
  // Asynchronous steps on one rank keep the sampled tokens on the device and feed them to the
  // next step there (runner/device_token_ring.h), in eager steps and decode-graph replays
  // alike; with several ranks or op timing, the default (each step run at launch) applies.
  Status launch_step(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> rows,
                     std::span<const TokenFeed> feeds) override;
  Status collect_step(std::vector<int32_t>* tokens) override;

  // FP8 caches: the per-layer K and V scales, set on every rank's buffers.
  Status set_kv_scales(const std::vector<float>& k_scales, const std::vector<float>& v_scales);
  const KvBuffers& kv(int rank) const { return *kv_.at(rank); }
  LlamaModel& model() { return model_; }
  int64_t num_decode_graphs() const { return graphs_ ? graphs_->num_graphs() : 0; }
  // The op times since the last call (zero without LlamaExecutorOptions::op_timing), and
  // starts over; any thread.
  StepProfile take_step_profile();
  // The device timeline of the asynchronous steps collected since the last call (busy time and
  // the gaps between steps, runner/device_timeline.h), and starts over; any thread.
  DeviceTimelineStats take_device_timeline();

 private:
  LlamaExecutor(LlamaModel& model, const KvBlockConfig& blocks) : model_(model), blocks_(blocks) {}
  // Checks the step and enqueues it on every rank (replaying decode graphs where they fit);
  // its logits rows [0, num_logits_rows) are in model().logits_device() afterwards.
  // allow_graphs = false runs eagerly (hidden states are read from the eager workspace).
  // before: called with each rank's view before the forward reads it (the token feed).
  Status run_step(std::span<const SeqStepInput> batch, StepMetadata* st, bool allow_graphs = true,
                  const DecodeGraphs::BeforeForward& before = nullptr);
  // Rows of a step: each in [0, R), each at most once.
  static Status check_rows(std::span<const DeviceSampleRow> rows, int64_t R, std::vector<uint8_t>* on_device);
  bool device_async() const { return model_.num_ranks() == 1 && !op_timing_; }
  Status run_rows(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                  std::vector<int32_t>* tokens, std::vector<float>* host_logits, bool allow_graphs);
  Status check_step(const StepMetadata& st) const;

  LlamaModel& model_;
  KvBlockConfig blocks_;
  std::vector<std::unique_ptr<KvBuffers>> kv_;       // one per rank
  std::vector<KvBuffers*> kv_ptrs_;
  std::vector<std::unique_ptr<StepUploader>> uploaders_;  // one per rank: steps that run eagerly
  std::unique_ptr<DecodeGraphs> graphs_;                  // null when disabled or unsupported
  std::unique_ptr<DeviceTokenRing> ring_;                 // asynchronous steps (one rank)
  bool op_timing_ = false;
  std::mutex profile_mu_;
  StepProfile profile_;  // guarded by profile_mu_
  std::mutex timeline_mu_;
  DeviceTimeline timeline_;  // asynchronous steps; guarded by timeline_mu_
};

}  // namespace lancet
