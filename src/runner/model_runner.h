// The model runner: one step of scheduled sequences in, sampled tokens (with logprobs) out.
// It routes each row that needs a token to device sampling where the executor has it and the
// request asks for nothing a device draw cannot give (logprobs, logit_bias, penalties,
// min_tokens masking, a structured-output mask), samples the other rows on the host (over the
// thread pool at large batches), and hands back the logits rows of speculative verification
// untouched. The executor behind it (runner/llama_executor.h: N ranks of backend, weight
// shard, KV buffers and communicator, N = 1 without tensor parallelism) builds the step's
// metadata once.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <vector>

#include "core/status.h"
#include "runner/model_executor.h"
#include "runner/prompt_logprobs.h"
#include "runner/sampler.h"

namespace lancet {

// One scheduled sequence as the runner reads it.
struct RunnerSeq {
  SeqStepInput input;
  // With logits rows: verify = false samples the last row into a token (params and ctx say
  // how); verify = true returns the rows (speculative verification scores them).
  bool verify = false;
  const SamplingParams* params = nullptr;
  SampleContext ctx;
  // Prompt logprobs: the first prompt_targets.size() logits rows (input.logits_offsets) are
  // scored at these tokens (each the prompt token after its row's position), with
  // prompt_top alternatives; such a sequence's rows always come to the host.
  std::span<const int32_t> prompt_targets;
  int32_t prompt_top = 0;
  // Embedding (pooling) sequence: never sampled; with input.want_hidden its last row's hidden
  // state is pooled into RunnerOutput::embeddings (runner/pooling.h).
  bool embed = false;

  // Whether the last logits row is sampled into a token.
  bool samples() const {
    return !verify && !embed && input.logits_rows() > static_cast<int32_t>(prompt_targets.size());
  }
};

struct RunnerOutput {
  // [batch]: the token of each sampled sequence (token -1 for the others).
  std::vector<SampleResult> samples;
  // The logits rows of the verified sequences, in batch order: [rows, vocab]; verify_row[i]
  // is sequence i's first row (-1 when it is not verified).
  std::vector<float> verify_logits;
  std::vector<int64_t> verify_row;
  // [batch]: the scored prompt rows of each sequence (empty for most).
  std::vector<std::vector<PromptLogprob>> prompt_logprobs;
  // [batch]: the pooled embedding of each want_hidden sequence ([hidden_size]; empty otherwise).
  std::vector<std::vector<float>> embeddings;
};

class ModelRunner {
 public:
  explicit ModelRunner(ModelExecutor& executor) : exec_(executor) {}

  int64_t vocab_size() const { return exec_.vocab_size(); }
  int32_t block_size() const { return exec_.block_size(); }
  int64_t num_blocks() const { return exec_.num_blocks(); }

  // Runs the step; a model failure is returned (nothing in `out` is then meaningful).
  Status execute(std::span<const RunnerSeq> batch, RunnerOutput* out);

  // Asynchronous steps (ModelExecutor::launch_step): every row that samples is drawn where the
  // logits are and nothing is waited for; `feeds` name the input tokens taken from the
  // previous launched step's draws. Only sequences whose rows need nothing but a draw may be
  // in such a step (FailedPrecondition otherwise: logprobs, penalties, masks, verification,
  // prompt logprobs, embeddings). sample_index[i] is sequence i's draw index in this step (its
  // TokenFeed::sample next step), -1 when it does not sample.
  Status launch(std::span<const RunnerSeq> batch, std::span<const TokenFeed> feeds, std::vector<int32_t>* sample_index);
  // The oldest launched step's tokens: out->samples [that step's batch], token -1 for the
  // sequences that did not sample.
  Status collect(RunnerOutput* out);

 private:
  // Host sampling of the sequences in `rows` (index into batch, first host logits row).
  void sample_on_host(std::span<const RunnerSeq> batch, const std::vector<std::pair<size_t, int64_t>>& rows,
                      const std::vector<float>& logits, RunnerOutput* out) const;
  // The embeddings of the want_hidden sequences from the executor's hidden rows.
  Status pool_embeddings(std::span<const RunnerSeq> batch, const std::vector<float>& hidden, RunnerOutput* out) const;
  // Scores the prompt rows of the sequences in `rows` (index into batch, first host row).
  void score_prompts(std::span<const RunnerSeq> batch, const std::vector<std::pair<size_t, int64_t>>& rows,
                     const std::vector<float>& logits, RunnerOutput* out) const;

  ModelExecutor& exec_;
  // Launched steps not yet collected, oldest first: their batch size and the sequence of each
  // draw.
  struct Launched {
    size_t batch_size = 0;
    std::vector<size_t> sample_seq;
  };
  std::deque<Launched> launched_;
};

// True when a sampled row needs its logits on the host: logprobs, logit_bias, penalties, or
// eos masking while min_tokens are not out yet (process_logits changes the logits for those).
// A structured-output token mask alone does not: it travels with the row (DeviceSampleRow).
bool needs_host_logits(const SamplingParams& params, const SampleContext& ctx);

}  // namespace lancet
