// ModelRunner: the device/host routing of a step's rows, host sampling, verification rows.
#include "runner/model_runner.h"

#include <string>

#include "core/thread_pool.h"
#include "runner/pooling.h"

namespace lancet {
namespace {

// The device sampler's settings for a sequence's next token: sample_token's seed and counter
// (the number of output tokens so far), so either path draws the same token.
DeviceSampleRow device_sample_row(const SamplingParams& p, const SampleContext& ctx, int64_t row) {
  DeviceSampleRow d;
  d.row = static_cast<int32_t>(row);
  d.temperature = p.greedy() ? 0.0f : p.temperature;
  d.top_k = p.top_k;
  d.top_p = p.top_p;
  d.min_p = p.min_p;
  d.seed = ctx.seed;
  d.counter = static_cast<uint64_t>(static_cast<int64_t>(ctx.output_tokens.size()) + ctx.pending_outputs);
  if (!ctx.allowed_tokens.empty()) {  // a structured-output mask, applied where the row is drawn
    d.allowed = ctx.allowed_tokens.data();
    d.allowed_words = static_cast<int32_t>(ctx.allowed_tokens.size());
  }
  return d;
}

bool hidden_wanted_in(std::span<const RunnerSeq> batch) {
  for (const RunnerSeq& s : batch)
    if (s.input.want_hidden) return true;
  return false;
}

}  // namespace

bool needs_host_logits(const SamplingParams& p, const SampleContext& ctx) {
  if (p.logprobs >= 0 || !p.logit_bias.empty() || p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f ||
      p.frequency_penalty != 0.0f)
    return true;
  return static_cast<int64_t>(ctx.output_tokens.size()) < p.min_tokens &&
         (!ctx.eos_token_ids.empty() || !p.stop_token_ids.empty());
}

Status ModelRunner::execute(std::span<const RunnerSeq> batch, RunnerOutput* out) {
  const int64_t V = exec_.vocab_size();
  out->samples.assign(batch.size(), SampleResult{});
  out->verify_row.assign(batch.size(), -1);
  out->prompt_logprobs.assign(batch.size(), {});
  out->embeddings.assign(batch.size(), {});
  // A step with embeddings runs as the second output kind (no device sampling in it).
  const bool hidden_wanted = hidden_wanted_in(batch);
  out->verify_logits.clear();
  std::vector<SeqStepInput> inputs;
  inputs.reserve(batch.size());
  // Plain rows are sampled where the logits are when the executor can (only their tokens
  // come back); the others get host logits, packed in row order.
  std::vector<DeviceSampleRow> device;
  std::vector<size_t> device_seq;
  std::vector<std::pair<size_t, int64_t>> host_sampled;  // (sequence, first host row)
  std::vector<std::pair<size_t, int64_t>> prompt_scored;  // (sequence, first host row)
  int64_t row = 0, host_rows = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const RunnerSeq& s = batch[i];
    inputs.push_back(s.input);
    const int64_t rows = s.input.logits_rows();
    if (rows == 0) continue;
    row += rows;
    if (s.samples() && s.prompt_targets.empty() && !hidden_wanted && exec_.supports_device_sampling() &&
        !needs_host_logits(*s.params, s.ctx)) {
      device.push_back(device_sample_row(*s.params, s.ctx, row - 1));
      device_seq.push_back(i);
      continue;
    }
    if (!s.prompt_targets.empty()) prompt_scored.emplace_back(i, host_rows);
    if (s.verify) out->verify_row[i] = host_rows;
    else if (s.samples()) host_sampled.emplace_back(i, host_rows + rows - 1);
    host_rows += rows;
  }
  std::vector<float> logits, hidden;
  std::vector<int32_t> tokens;
  Status st = hidden_wanted  ? exec_.execute_hidden(inputs, &logits, &hidden)
              : device.empty() ? exec_.execute(inputs, &logits)
                               : exec_.execute_sampled(inputs, device, &tokens, &logits);
  RETURN_IF_ERROR(st);
  if (hidden_wanted) RETURN_IF_ERROR(pool_embeddings(batch, hidden, out));
  if (static_cast<int64_t>(logits.size()) < host_rows * V || tokens.size() != device.size())
    return Internal("the model returned " + std::to_string(logits.size()) + " logits and " +
                    std::to_string(tokens.size()) + " tokens; the step needs " + std::to_string(host_rows) +
                    " rows of logits and " + std::to_string(device.size()) + " tokens");
  for (size_t j = 0; j < device.size(); ++j) {
    if (tokens[j] < 0 || tokens[j] >= V)
      return Internal("device sampling returned token " + std::to_string(tokens[j]) + ", outside the vocabulary");
    out->samples[device_seq[j]].token = tokens[j];
  }
  sample_on_host(batch, host_sampled, logits, out);
  score_prompts(batch, prompt_scored, logits, out);
  out->verify_logits = std::move(logits);
  return OkStatus();
}

Status ModelRunner::launch(std::span<const RunnerSeq> batch, std::span<const TokenFeed> feeds,
                           std::vector<int32_t>* sample_index) {
  std::vector<SeqStepInput> inputs;
  inputs.reserve(batch.size());
  std::vector<DeviceSampleRow> rows;
  Launched l;
  l.batch_size = batch.size();
  sample_index->assign(batch.size(), -1);
  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    const RunnerSeq& s = batch[i];
    inputs.push_back(s.input);
    const int64_t n = s.input.logits_rows();
    if (n == 0) continue;
    if (n != 1 || !s.samples() || !s.prompt_targets.empty() || s.input.want_hidden || needs_host_logits(*s.params, s.ctx))
      return FailedPrecondition("async step: sequence " + std::to_string(i) +
                                " needs its logits on the host; such steps run synchronously");
    (*sample_index)[i] = static_cast<int32_t>(rows.size());
    rows.push_back(device_sample_row(*s.params, s.ctx, row));
    l.sample_seq.push_back(i);
    row += n;
  }
  RETURN_IF_ERROR(exec_.launch_step(inputs, rows, feeds));
  launched_.push_back(std::move(l));
  return OkStatus();
}

Status ModelRunner::collect(RunnerOutput* out) {
  if (launched_.empty()) return FailedPrecondition("async step: nothing launched to collect");
  const Launched l = std::move(launched_.front());
  launched_.pop_front();
  out->samples.assign(l.batch_size, SampleResult{});
  std::vector<int32_t> tokens;
  RETURN_IF_ERROR(exec_.collect_step(&tokens));
  const int64_t V = exec_.vocab_size();
  if (tokens.size() != l.sample_seq.size())
    return Internal("async step: the model returned " + std::to_string(tokens.size()) + " tokens for " +
                    std::to_string(l.sample_seq.size()) + " draws");
  for (size_t j = 0; j < tokens.size(); ++j) {
    if (tokens[j] < 0 || tokens[j] >= V)
      return Internal("device sampling returned token " + std::to_string(tokens[j]) + ", outside the vocabulary");
    out->samples[l.sample_seq[j]].token = tokens[j];
  }
  return OkStatus();
}

void ModelRunner::sample_on_host(std::span<const RunnerSeq> batch, const std::vector<std::pair<size_t, int64_t>>& rows,
                                 const std::vector<float>& logits, RunnerOutput* out) const {
  const int64_t V = exec_.vocab_size();
  auto sample_one = [&](size_t j) {
    const RunnerSeq& s = batch[rows[j].first];
    const float* base = logits.data() + rows[j].second * V;
    out->samples[rows[j].first] = sample_token(std::span<const float>(base, V), *s.params, s.ctx);
  };
  // Plain sampling is independent per sequence (the sampler is pure; each sequence has its own
  // seed) and costs a pass over the vocabulary each: spread it over the thread pool, which
  // matters at large batches of large vocabularies.
  if (rows.size() >= 8) {
    default_thread_pool().parallel_for(static_cast<int64_t>(rows.size()), [&](int64_t b, int64_t e, int) {
      for (int64_t j = b; j < e; ++j) sample_one(static_cast<size_t>(j));
    });
  } else {
    for (size_t j = 0; j < rows.size(); ++j) sample_one(j);
  }
}

Status ModelRunner::pool_embeddings(std::span<const RunnerSeq> batch, const std::vector<float>& hidden,
                                    RunnerOutput* out) const {
  const int64_t H = exec_.hidden_size();
  int64_t rows = 0;
  for (const RunnerSeq& s : batch) rows += s.input.want_hidden ? s.input.logits_rows() : 0;
  if (H <= 0 || static_cast<int64_t>(hidden.size()) != rows * H)
    return Internal("the model returned " + std::to_string(hidden.size()) + " hidden values; the step needs " +
                    std::to_string(rows) + " rows of " + std::to_string(H));
  int64_t row = 0;
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].input.want_hidden) continue;
    row += batch[i].input.logits_rows();
    out->embeddings[i] = pool_last_token(std::span<const float>(hidden).subspan(static_cast<size_t>((row - 1) * H),
                                                                                 static_cast<size_t>(H)));
  }
  return OkStatus();
}

void ModelRunner::score_prompts(std::span<const RunnerSeq> batch, const std::vector<std::pair<size_t, int64_t>>& rows,
                                const std::vector<float>& logits, RunnerOutput* out) const {
  const int64_t V = exec_.vocab_size();
  for (const auto& [i, first] : rows) {
    const RunnerSeq& s = batch[i];
    std::vector<PromptLogprob>& dst = out->prompt_logprobs[i];
    dst.resize(s.prompt_targets.size());
    // Rows are independent: spread long prompts over the thread pool.
    default_thread_pool().parallel_for(static_cast<int64_t>(dst.size()), [&](int64_t b, int64_t e, int) {
      for (int64_t k = b; k < e; ++k) {
        const float* base = logits.data() + (first + k) * V;
        dst[k] = score_prompt_token(std::span<const float>(base, V), s.prompt_targets[k], s.prompt_top);
      }
    });
  }
}

}  // namespace lancet
