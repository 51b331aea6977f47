// What the runner needs from a model: run one step over a batch of sequences, each computing
// some new tokens at given positions into its paged KV blocks, and return the logits of the
// rows the sequences asked for. The Llama model implements it on one or N ranks
// (runner/llama_executor.h); tests implement it with small fakes. Executors whose backend
// samples on the device also return tokens instead of logits for the rows the runner marks
// (execute_sampled).
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "kv/block_pool.h"
#include "kv/kv_block_layout.h"

namespace lancet {

// One sequence's share of a step, as the scheduler decided it: the one input shape of the
// runner (runner/step_builder.h turns a batch of them into the step's metadata).
struct SeqStepInput {
  std::span<const int32_t> tokens;       // [num_new] ids computed this step
  int64_t start_pos = 0;                 // position of tokens[0] (== num_computed)
  std::span<const BlockId> block_table;  // covers positions [0, start_pos + num_new)
  bool need_logits = false;              // return logits of the last new token
  // Logits of the last num_logits new tokens (speculative verification scores k drafts plus
  // the bonus position in one pass). The rows returned are max(num_logits, need_logits ? 1 : 0).
  int32_t num_logits = 0;
  // Evaluations: logits at these offsets into the new tokens (increasing) instead.
  std::span<const int32_t> logits_offsets;
  // Embeddings: also return the final-norm hidden states of its logits rows (execute_hidden).
  bool want_hidden = false;
  // LoRA: the adapter slot its tokens are computed with (-1: the base model).
  int32_t lora_slot = -1;

  int32_t logits_rows() const {
    if (!logits_offsets.empty()) return static_cast<int32_t>(logits_offsets.size());
    const int32_t n = need_logits ? 1 : 0;
    return num_logits > n ? num_logits : n;
  }
};

// Asynchronous steps: input token `token` of a launched step (an index into all its new
// tokens, sequences in batch order) is the token the previous launched step sampled for its
// row `sample` (an index into that step's DeviceSampleRow list).
struct TokenFeed {
  int32_t token = 0;
  int32_t sample = 0;
};

// The CPU sampler's draw for one device row (what sample_rows computes), from its logits row.
int32_t draw_sample_row(std::span<const float> logits /*[vocab]*/, const DeviceSampleRow& row);

class ModelExecutor {
 public:
  virtual ~ModelExecutor() = default;
  virtual int64_t vocab_size() const = 0;
  virtual int32_t block_size() const = 0;
  virtual int64_t num_blocks() const = 0;
  // LoRA adapter slots of the model (SeqStepInput::lora_slot < this); 0 without LoRA.
  virtual int64_t lora_slots() const { return 0; }
  // logits: [sum of the inputs' logits_rows(), vocab], in input order (a sequence's rows in
  // position order).
  virtual Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) = 0;

  // The second output kind: the step runs as in execute() (logits as there), and the hidden
  // states after the final norm of the logits rows of the inputs with want_hidden come back
  // too: hidden [those rows, hidden_size()], in row order. Executors without it say so.
  virtual int64_t hidden_size() const { return 0; }
  virtual Status execute_hidden(std::span<const SeqStepInput> batch, std::vector<float>* logits,
                                std::vector<float>* hidden) {
    (void)batch;
    (void)logits;
    (void)hidden;
    return Unimplemented("this model executor returns no hidden states");
  }

  // Device sampling: the step runs as in execute(), then each logits row named in `device`
  // (DeviceSampleRow::row, numbered as execute() numbers its rows; each row at most once) is
  // sampled where it is, so only its token comes back: tokens gets device.size() entries,
  // tokens[i] for device[i]. host_logits gets only the other rows, [rows not in device,
  // vocab], in row order.
  virtual bool supports_device_sampling() const { return false; }
  virtual Status execute_sampled(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> device,
                                 std::vector<int32_t>* tokens, std::vector<float>* host_logits) {
    (void)batch;
    (void)device;
    (void)tokens;
    (void)host_logits;
    return Unimplemented("this model executor has no device sampling");
  }

  // The shared KV tier (kv_tier/): what one block's bytes hold, and copies of a block between
  // the KV cache and host memory of layout.payload_bytes() bytes. Executors without a paged
  // cache of their own return a layout of 0 bytes.
  virtual KvBlockLayout kv_block_layout() const { return {}; }
  virtual Status read_kv_block(BlockId block, std::span<uint8_t> out) {
    (void)block;
    (void)out;
    return Unimplemented("this model executor cannot copy KV blocks");
  }
  virtual Status write_kv_block(BlockId block, std::span<const uint8_t> in) {
    (void)block;
    (void)in;
    return Unimplemented("this model executor cannot copy KV blocks");
  }
  // Asynchronous steps (the engine's async scheduling). launch_step runs a step whose every
  // logits row is sampled (`rows`, numbered as in execute_sampled, each row once), with the
  // input tokens named in `feeds` taken from the previous launched step's samples (their
  // places in `batch` hold any valid id), and does not wait for it: the sampled tokens stay
  // where they were drawn. collect_step waits for the oldest launched step that was not
  // collected and returns its tokens ([its rows], in rows order). At most two steps are
  // launched and not collected. The default runs each step at launch (execute_sampled with
  // device sampling, else execute and draw_sample_row) and keeps its tokens on the host: the
  // same results and ordering without overlap (model_executor.cc).
  virtual Status launch_step(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> rows,
                             std::span<const TokenFeed> feeds);
  virtual Status collect_step(std::vector<int32_t>* tokens);

 private:
  // The default asynchronous steps: tokens of the launched steps not yet collected, and of
  // the last launched step (the feeds' source).
  std::deque<std::vector<int32_t>> emulated_pending_;
  std::vector<int32_t> emulated_last_;
};

// Checks a launched step's feeds: token indices inside the step's num_tokens new tokens (each
// at most once), sample indices inside the previous step's num_samples rows.
Status check_token_feeds(std::span<const TokenFeed> feeds, int64_t num_tokens, int64_t num_samples);

}  // namespace lancet
