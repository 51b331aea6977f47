// Prompt logprobs (vLLM's prompt_logprobs, and the prompt side of echo with logprobs): how
// likely each prompt token was given the tokens before it, its rank, and the top-N
// alternatives. Scored from the raw logits of the position before the token (vLLM's default
// raw_logprobs mode: no logit_bias, penalties or temperature), with the same normalizer as
// the sampler's logprobs, so a prompt token scores what generating it would have reported.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/sampler.h"

namespace lancet {

struct PromptLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t rank = 0;               // 1 + the number of tokens with a higher logit
  std::vector<TokenLogprob> top;  // top_n alternatives, best first (ties: lower id first)
};

// logits: [vocab], the row of the position before `token`.
PromptLogprob score_prompt_token(std::span<const float> logits, int32_t token, int32_t top_n);

}  // namespace lancet
