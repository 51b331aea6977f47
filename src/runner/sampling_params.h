// Per-request sampling settings (the OpenAI/vLLM knobs). Validated once when a request arrives;
// the sampler trusts them afterwards.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "runner/token_constraint.h"

namespace lancet {

struct SamplingParams {
  float temperature = 1.0f;  // 0 = greedy
  int32_t top_k = 0;         // 0 or -1 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  float repetition_penalty = 1.0f;  // HF/vLLM semantics: divides positive, multiplies negative
  float presence_penalty = 0.0f;    // OpenAI semantics, over generated tokens
  float frequency_penalty = 0.0f;
  std::map<int32_t, float> logit_bias;  // token id -> bias added to the logit
  std::optional<uint64_t> seed;         // per-request RNG; reproducible whatever the batch
  int32_t max_tokens = 16;
  int32_t min_tokens = 0;
  std::vector<int32_t> stop_token_ids;  // besides the model's eos ids
  std::vector<std::string> stop;        // stop strings (matched on text by the output side)
  bool include_stop_str_in_output = false;  // a matched stop string ends the text (vLLM's flag)
  bool ignore_eos = false;
  int32_t logprobs = -1;  // -1 = none; k >= 0: logprob of the sampled token + top k
  // -1 = none; k >= 0: each prompt token's logprob and rank + top k alternatives (vLLM's
  // prompt_logprobs; the engine then computes the whole prompt, without prefix-cache hits).
  int32_t prompt_logprobs = -1;
  int32_t n = 1;
  // Structured outputs: the allowed tokens follow this constraint, given in its start state
  // (each sequence works on its own clone); the sequence ends when the document is done.
  // Such rows are sampled on the host. Null: unconstrained.
  std::shared_ptr<const TokenConstraint> constraint;

  bool greedy() const { return temperature <= 0.0f; }
  // Checks ranges against the model (vocab size) and server limits.
  Status validate(int64_t vocab_size, int32_t max_logprobs = 20) const;
};

}  // namespace lancet
