// A sequence: one stream of tokens being generated (a request with n > 1 has n sequences).
// There is no prefill or decode phase: a sequence has num_tokens (prompt + output so far) and
// num_computed (tokens whose KV is in the cache); each step computes some of the difference.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <memory>
#include <vector>

#include "runner/prompt_logprobs.h"
#include "runner/sampler.h"
#include "runner/sampling_params.h"
#include "kv/kv_cache_manager.h"
#include "engine/lora_ref.h"

namespace lancet {

enum class SeqStatus { kWaiting, kRunning, kFinished };
enum class FinishReason { kNone, kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason r);  // "stop", "length", "abort", "error"

struct Sequence {
  SeqId id = 0;
  int64_t request_id = 0;
  int32_t index = 0;  // which of the request's n choices
  int32_t priority = 0;  // lower runs first (vLLM semantics); ties by arrival
  bool embed = false;    // an embedding request: pooled when the prompt is computed, no output
  uint64_t arrival = 0;  // monotonic arrival counter
  std::vector<int32_t> tokens;  // prompt followed by output
  // The LoRA adapter it is computed with (null: the base model) and the prefix-cache salt
  // that goes with it (KvCacheManager::set_salt_source).
  std::shared_ptr<const LoraRef> lora;
  BlockHash lora_salt;
  int64_t prompt_len = 0;
  int64_t num_computed = 0;
  int64_t num_cached_prompt = 0;  // prompt tokens served from the prefix cache (last admission)
  int32_t num_preemptions = 0;
  std::chrono::steady_clock::time_point first_scheduled{};  // unset until first scheduled
  SeqStatus status = SeqStatus::kWaiting;
  FinishReason finish = FinishReason::kNone;
  SamplingParams params;
  uint64_t seed = 0;
  // Speculative decoding: drafts proposed for the next step (verified there, then cleared),
  // the draft's distribution at each (empty: deterministic drafts), and this sequence's
  // acceptance counts.
  std::vector<int32_t> spec_tokens;
  std::vector<TokenDistribution> spec_dists;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  // Prompt logprobs (params.prompt_logprobs >= 0, choice 0 only): [prompt_len - 1], entry i
  // scores prompt token i + 1; filled as the prompt's chunks are computed, handed to the
  // first token's event.
  std::vector<PromptLogprob> prompt_logprobs;
  // Structured outputs: this sequence's constraint state (a clone of params.constraint, fed
  // every accepted token) and the allowed-token bits of the row being sampled.
  std::shared_ptr<TokenConstraint> constraint;
  std::vector<uint32_t> allowed_tokens;
  // Asynchronous scheduling (engine/engine_async.cc): tokens sampled by launched steps and not
  // yet known on the host (0 or 1 when a step is scheduled; 2 between the launch of a step and
  // the collection of the one before), the draw index of the last launched one (the next
  // step's TokenFeed::sample), and whether the request needs the host every step (its steps
  // then run synchronously).
  int32_t num_inflight = 0;
  int32_t inflight_sample = -1;
  bool host_steps = false;

  // True while the prompt's rows must be scored: the whole prompt is then computed (no
  // prefix-cache hits), since a cached position has no logits.
  bool scores_prompt() const { return params.prompt_logprobs >= 0 && index == 0 && num_output() == 0; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
  // The tokens the scheduler plans with: the known ones and those in flight.
  int64_t num_tokens_with_inflight() const { return num_tokens() + num_inflight; }
  // The most tokens the sequence can reach (prompt + max_tokens, within the context).
  int64_t token_limit(int64_t max_model_len) const {
    return std::min<int64_t>(prompt_len + params.max_tokens, max_model_len);
  }
  int64_t num_output() const { return num_tokens() - prompt_len; }
  bool finished() const { return status == SeqStatus::kFinished; }
};

}  // namespace lancet
