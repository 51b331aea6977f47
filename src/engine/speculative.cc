// Speculator: proposal dispatch, verification bookkeeping and statistics.
#include "engine/speculative.h"

#include <algorithm>

#include "engine/ngram_proposer.h"

namespace lancet {

Speculator::Speculator(const SpeculativeConfig& config, ModelExecutor* draft, const SpeculatorOptions& options)
    : config_(config),
      options_(options),
      policy_(SpecPolicyConfig{.max_k = config.num_speculative_tokens,
                               .draft_model = config.method == SpecMethod::kDraft,
                               .adaptive = config.adaptive,
                               .disable_by_batch_size = config.disable_by_batch_size,
                               .draft_cost_ratio = options.draft_cost_ratio}) {
  if (config.method == SpecMethod::kDraft && draft)
    drafter_ = std::make_unique<DraftModelProposer>(draft, options.draft_kv, options.max_num_batched_tokens);
  stats_.accepted_per_pos.assign(std::max(config.num_speculative_tokens, 0), 0);
}

void Speculator::release(SeqId id) {
  if (drafter_) drafter_->release(id);
}

Status Speculator::propose(std::span<Sequence* const> running, std::span<const int32_t> eos) {
  std::vector<DraftRequest> reqs;
  for (Sequence* seq : running) {
    seq->spec_tokens.clear();
    seq->spec_dists.clear();
    const bool decoding = seq->status == SeqStatus::kRunning && seq->num_output() > 0 &&
                          seq->num_computed == seq->num_tokens() - 1;
    // Drafts are not verified against a structured-output constraint: such sequences decode
    // one token a step.
    if (seq->constraint) continue;
    if (decoding) reqs.push_back({seq, 0});
  }
  const int32_t k = policy_.choose_k(static_cast<int64_t>(reqs.size()));
  stats_.current_k = k;
  if (k == 0 || reqs.empty()) return OkStatus();
  for (DraftRequest& r : reqs) {
    const Sequence* seq = r.seq;
    // No drafts past what the request may still produce: the step yields up to k + 1 tokens,
    // and they must fit max_tokens and the context.
    const int64_t left = std::min<int64_t>(seq->params.max_tokens - seq->num_output(),
                                           options_.max_model_len - seq->num_tokens()) - 1;
    r.k = static_cast<int32_t>(std::clamp<int64_t>(left, 0, k));
  }
  if (config_.method == SpecMethod::kNgram) {
    for (const DraftRequest& r : reqs) {
      if (r.k > 0)
        r.seq->spec_tokens =
            ngram_propose(r.seq->tokens, config_.prompt_lookup_min, config_.prompt_lookup_max, r.k);
    }
    return OkStatus();
  }
  if (!drafter_) return OkStatus();
  Status st = drafter_->propose(reqs, eos, &policy_);
  if (!st.ok()) {
    for (const DraftRequest& r : reqs) {
      r.seq->spec_tokens.clear();
      r.seq->spec_dists.clear();
      drafter_->release(r.seq->id);
    }
  }
  return st;
}

VerifyResult Speculator::verify(Sequence* seq, int32_t nd, std::span<const float> rows, int64_t vocab,
                                std::span<const int32_t> eos) {
  VerifyInput in;
  in.logits = rows;
  in.vocab = vocab;
  in.drafts = std::span<const int32_t>(seq->spec_tokens).first(nd);
  if (!seq->spec_dists.empty()) in.draft_dists = std::span<const TokenDistribution>(seq->spec_dists).first(nd);
  in.params = &seq->params;
  in.prompt_tokens = std::span<const int32_t>(seq->tokens).first(seq->prompt_len);
  in.output_tokens = std::span<const int32_t>(seq->tokens).subspan(seq->prompt_len);
  in.eos_token_ids = eos;
  in.seed = seq->seed;
  in.force_acceptance_rate = config_.force_acceptance_rate;
  VerifyResult r = verify_drafts(in);
  const int32_t a = r.num_accepted;
  stats_.num_drafts++;
  stats_.draft_tokens += nd;
  stats_.accepted_tokens += a;
  for (int32_t j = 0; j < a && j < static_cast<int32_t>(stats_.accepted_per_pos.size()); ++j)
    stats_.accepted_per_pos[j]++;
  seq->spec_draft_tokens += nd;
  seq->spec_accepted_tokens += a;
  policy_.observe_acceptance(a < nd ? a + 1 : nd, a);
  return r;
}

void Speculator::on_tokens_appended(Sequence* seq, int32_t num_accepted) {
  if (drafter_) drafter_->on_verified(seq, num_accepted);
}

SpecStats Speculator::stats() const {
  SpecStats s = stats_;
  s.acceptance_estimate = policy_.acceptance();
  return s;
}

}  // namespace lancet
