// SamplingParams validation: each message names the field, as the API reports it.
#include "runner/sampling_params.h"

#include <cmath>

namespace lancet {

Status SamplingParams::validate(int64_t vocab_size, int32_t max_logprobs) const {
  if (!std::isfinite(temperature) || temperature < 0.0f || temperature > 100.0f)
    return InvalidArgument("temperature must be in [0, 100], got " + std::to_string(temperature));
  if (top_k < -1) return InvalidArgument("top_k must be -1, 0 or positive");
  if (!(top_p > 0.0f && top_p <= 1.0f)) return InvalidArgument("top_p must be in (0, 1]");
  if (!(min_p >= 0.0f && min_p <= 1.0f)) return InvalidArgument("min_p must be in [0, 1]");
  if (!(repetition_penalty > 0.0f && repetition_penalty <= 10.0f))
    return InvalidArgument("repetition_penalty must be in (0, 10]");
  if (!(presence_penalty >= -2.0f && presence_penalty <= 2.0f))
    return InvalidArgument("presence_penalty must be in [-2, 2]");
  if (!(frequency_penalty >= -2.0f && frequency_penalty <= 2.0f))
    return InvalidArgument("frequency_penalty must be in [-2, 2]");
  for (const auto& [tok, bias] : logit_bias) {
    if (tok < 0 || tok >= vocab_size)
      return InvalidArgument("logit_bias token " + std::to_string(tok) + " is outside the vocabulary");
    if (!(bias >= -100.0f && bias <= 100.0f))
      return InvalidArgument("logit_bias values must be in [-100, 100]");
  }
  for (int32_t t : stop_token_ids) {
    if (t < 0 || t >= vocab_size)
      return InvalidArgument("stop_token_ids entry " + std::to_string(t) + " is outside the vocabulary");
  }
  if (max_tokens < 1) return InvalidArgument("max_tokens must be at least 1");
  if (min_tokens < 0 || min_tokens > max_tokens)
    return InvalidArgument("min_tokens must be in [0, max_tokens]");
  if (logprobs > max_logprobs)
    return InvalidArgument("logprobs must be at most " + std::to_string(max_logprobs));
  if (prompt_logprobs < -1 || prompt_logprobs > max_logprobs)
    return InvalidArgument("prompt_logprobs must be in [0, " + std::to_string(max_logprobs) + "]");
  if (n < 1 || n > 128) return InvalidArgument("n must be in [1, 128]");
  for (const auto& s : stop) {
    if (s.empty()) return InvalidArgument("stop strings must not be empty");
  }
  return OkStatus();
}

}  // namespace lancet
