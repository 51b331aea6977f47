// ModelExecutor's default asynchronous steps: each step runs when it is launched and its
// tokens wait on the host for collect_step (executors that keep tokens on the device override
// both: runner/llama_executor.cc).
#include "runner/model_executor.h"

#include <algorithm>
#include <string>

#include "runner/sampler.h"

namespace lancet {

int32_t draw_sample_row(std::span<const float> logits, const DeviceSampleRow& row) {
  SamplingParams p;
  p.temperature = row.temperature;
  p.top_k = row.top_k;
  p.top_p = row.top_p;
  p.min_p = row.min_p;
  if (!row.allowed) return draw_token(logits, p, row.seed, row.counter);
  std::vector<float> x(logits.begin(), logits.end());
  mask_refused_tokens(x, std::span<const uint32_t>(row.allowed, static_cast<size_t>(std::max(row.allowed_words, 0))));
  return draw_token(x, p, row.seed, row.counter);
}

Status check_token_feeds(std::span<const TokenFeed> feeds, int64_t num_tokens, int64_t num_samples) {
  std::vector<uint8_t> fed(static_cast<size_t>(std::max<int64_t>(num_tokens, 0)), 0);
  for (const TokenFeed& f : feeds) {
    if (f.token < 0 || f.token >= num_tokens || fed[f.token])
      return InvalidArgument("async step: fed token " + std::to_string(f.token) + " outside the step's " +
                             std::to_string(num_tokens) + " tokens or fed twice");
    if (f.sample < 0 || f.sample >= num_samples)
      return InvalidArgument("async step: fed from sample " + std::to_string(f.sample) + "; the previous step drew " +
                             std::to_string(num_samples));
    fed[f.token] = 1;
  }
  return OkStatus();
}

Status ModelExecutor::launch_step(std::span<const SeqStepInput> batch, std::span<const DeviceSampleRow> rows,
                                  std::span<const TokenFeed> feeds) {
  if (emulated_pending_.size() >= 2) return FailedPrecondition("async step: two steps are already launched");
  // The fed inputs, with the previous step's tokens in place.
  int64_t num_tokens = 0;
  for (const SeqStepInput& s : batch) num_tokens += static_cast<int64_t>(s.tokens.size());
  RETURN_IF_ERROR(check_token_feeds(feeds, num_tokens, static_cast<int64_t>(emulated_last_.size())));
  std::vector<int32_t> flat;
  flat.reserve(static_cast<size_t>(num_tokens));
  for (const SeqStepInput& s : batch) flat.insert(flat.end(), s.tokens.begin(), s.tokens.end());
  for (const TokenFeed& f : feeds) flat[f.token] = emulated_last_[f.sample];
  std::vector<SeqStepInput> inputs(batch.begin(), batch.end());
  size_t at = 0;
  for (SeqStepInput& s : inputs) {
    s.tokens = std::span<const int32_t>(flat).subspan(at, s.tokens.size());
    at += s.tokens.size();
  }
  std::vector<int32_t> tokens;
  if (supports_device_sampling()) {
    std::vector<float> host_logits;
    RETURN_IF_ERROR(execute_sampled(inputs, rows, &tokens, &host_logits));
  } else {
    std::vector<float> logits;
    RETURN_IF_ERROR(execute(inputs, &logits));
    const int64_t V = vocab_size();
    tokens.resize(rows.size());
    for (size_t i = 0; i < rows.size(); ++i) {
      const int64_t r = rows[i].row;
      if (r < 0 || (r + 1) * V > static_cast<int64_t>(logits.size()))
        return InvalidArgument("async step: row " + std::to_string(r) + " outside the step's logits");
      tokens[i] = draw_sample_row(std::span<const float>(logits).subspan(static_cast<size_t>(r * V), V), rows[i]);
    }
  }
  if (tokens.size() != rows.size())
    return Internal("async step: " + std::to_string(tokens.size()) + " tokens for " + std::to_string(rows.size()) +
                    " rows");
  emulated_last_ = tokens;
  emulated_pending_.push_back(std::move(tokens));
  return OkStatus();
}

Status ModelExecutor::collect_step(std::vector<int32_t>* tokens) {
  if (emulated_pending_.empty()) return FailedPrecondition("async step: nothing launched to collect");
  *tokens = std::move(emulated_pending_.front());
  emulated_pending_.pop_front();
  return OkStatus();
}

}  // namespace lancet
