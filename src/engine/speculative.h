// Speculative decoding in the engine (docs/SPECULATIVE.md): before each step, decoding
// sequences get up to k draft tokens (from a draft model or n-gram lookup); the scheduler
// gives them 1 + k slots; the target scores all k + 1 positions in one forward pass; verify()
// keeps the accepted prefix plus one target token (spec_verify.h: the target distribution is
// preserved exactly), and the engine rolls num_computed (and the KV blocks past the kept
// tokens) back. The policy (spec_policy.h) picks k each step from measured costs and
// acceptance, down to 0 when the batch is large enough that drafts cost more than they save.
// Everything here is engine-level, over ModelExecutor, so it runs on every backend.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/draft_proposer.h"
#include "runner/model_executor.h"
#include "engine/sequence.h"
#include "engine/spec_policy.h"
#include "engine/spec_verify.h"
#include "engine/speculative_config.h"

namespace lancet {

struct SpecStats {
  int64_t num_drafts = 0;        // verifications of a sequence with at least one draft
  int64_t draft_tokens = 0;      // drafts verified
  int64_t accepted_tokens = 0;   // drafts accepted
  std::vector<int64_t> accepted_per_pos;  // [k]: accepted drafts by position
  int32_t current_k = 0;         // the policy's last choice
  double acceptance_estimate = 0;
};

struct SpeculatorOptions {
  int64_t max_num_batched_tokens = 2048;  // also caps the draft's catch-up per step
  int64_t max_model_len = 8192;
  BlockManagerConfig draft_kv;            // the draft's block manager (method draft)
  double draft_cost_ratio = 1.0;          // draft / target cost per pass, until measured
};

class Speculator {
 public:
  // draft: the draft model (method draft; null otherwise), not owned.
  Speculator(const SpeculativeConfig& config, ModelExecutor* draft, const SpeculatorOptions& options);

  // Before scheduling: clears every running sequence's drafts and proposes new ones for those
  // decoding (all context computed but the last token). A draft-model failure leaves the
  // sequences without drafts and is returned (the step goes on without speculation).
  Status propose(std::span<Sequence* const> running, std::span<const int32_t> eos_token_ids);
  // After the target pass: verifies the first `num_drafts` of seq->spec_tokens against
  // rows [num_drafts + 1, vocab]. Does not change seq->tokens.
  VerifyResult verify(Sequence* seq, int32_t num_drafts, std::span<const float> rows, int64_t vocab,
                      std::span<const int32_t> eos_token_ids);
  // After the engine appended verify()'s tokens to seq->tokens: rolls the draft's KV back to
  // the accepted drafts.
  void on_tokens_appended(Sequence* seq, int32_t num_accepted);
  // Every target forward pass: tokens in it and its wall time (for the cost model).
  void observe_target_step(int64_t tokens, double seconds) { policy_.observe_target(tokens, seconds); }
  // The sequence ended or was preempted.
  void release(SeqId id);

  const SpeculativeConfig& config() const { return config_; }
  SpecStats stats() const;
  SpecPolicy& policy() { return policy_; }

 private:
  SpeculativeConfig config_;
  SpeculatorOptions options_;
  SpecPolicy policy_;
  std::unique_ptr<DraftModelProposer> drafter_;
  SpecStats stats_;
};

}  // namespace lancet
