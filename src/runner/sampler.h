// Token sampling from one sequence's last-position logits on the host, and the reference of
// device sampling: backends that have it (CUDA: backend/cuda/sampling.cu) draw a request's
// token from the same distribution with the same uniform when the request needs nothing but
// temperature, top-k, top-p and min-p; the engine (engine.cc) sends every other row (logprobs,
// logit_bias, penalties, min_tokens masking, speculative verification) through this file.
//
// Order, as vLLM applies it: logit_bias, min_tokens (eos masked), repetition penalty (prompt +
// output), presence/frequency penalties (output only), the structured-output mask; logprobs
// are reported from these processed logits before temperature; then temperature, top-k,
// top-p, min-p, and a draw.
// Randomness is counter-based: the draw for output position i of a request uses only
// (seed, i), so a seeded request gives the same tokens alone or in any batch.
#pragma once

#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include "runner/sampling_params.h"

namespace lancet {

struct TokenLogprob {
  int32_t token = -1;
  float logprob = 0.0f;
};

struct SampleResult {
  int32_t token = -1;
  float logprob = 0.0f;                  // of the sampled token (when params.logprobs >= 0)
  std::vector<TokenLogprob> top_logprobs;  // params.logprobs entries, best first
};

struct SampleContext {
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;  // generated so far
  std::span<const int32_t> eos_token_ids;  // masked while fewer than min_tokens are out
  uint64_t seed = 0;                       // the request's seed (or one drawn at arrival)
  // Asynchronous scheduling: tokens already sampled and not yet known on the host (not in
  // output_tokens); they count in the draw's output position.
  int64_t pending_outputs = 0;
  // Structured outputs (runner/token_constraint.h): [ceil(vocab / 32)] words, bit t set = token
  // t allowed; every other token is masked to -inf after the penalties. Empty: no constraint.
  std::span<const uint32_t> allowed_tokens;
};

// Uniform in [0, 1) from (seed, counter): splitmix64-style mixing, no state
// (backend/counter_uniform.h, shared with the device sampler).
double counter_uniform(uint64_t seed, uint64_t counter);

// logits: [vocab] (copied; the caller's buffer is not changed).
SampleResult sample_token(std::span<const float> logits, const SamplingParams& params,
                          const SampleContext& ctx);

// The pieces of sample_token, for speculative verification, which needs the distribution a
// token is drawn from and not only a draw.
// logits: [vocab] -> [vocab] after logit_bias, min_tokens masking and the penalties.
std::vector<float> process_logits(std::span<const float> logits, const SamplingParams& params,
                                  const SampleContext& ctx);
// The distribution sample_token draws from (temperature, top-k, top-p, min-p applied to the
// processed logits): candidates best first, probabilities summing to 1. Greedy: the argmax
// with probability 1.
struct TokenDistribution {
  std::vector<int32_t> tokens;
  std::vector<double> probs;
  double prob_of(int32_t token) const;  // 0 for a token outside the candidates
};
TokenDistribution sampling_distribution(std::span<const float> processed, const SamplingParams& params);
// The token sample_token draws from processed logits for output position `counter` of a
// request with `seed` (greedy: the argmax). Device sampling's reference.
int32_t draw_token(std::span<const float> processed, const SamplingParams& params, uint64_t seed, uint64_t counter);
// A SampleResult for `token` with its logprob fields filled from the processed logits.
SampleResult sample_result_for(std::span<const float> processed, int32_t token, const SamplingParams& params);

// Structured outputs: x[t] = -inf for every token t whose bit in `allowed` (bit t & 31 of word
// t >> 5) is clear, or that lies past its words.
void mask_refused_tokens(std::span<float> x /*[vocab]*/, std::span<const uint32_t> allowed);

// Index of the largest value; ties go to the lowest index.
int32_t argmax(std::span<const float> logits);

}  // namespace lancet
