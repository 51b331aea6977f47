// Draft-model proposer (see draft_proposer.h).
#include "engine/draft_proposer.h"

#include <algorithm>
#include <chrono>

#include "engine/spec_verify.h"

namespace lancet {
namespace {

double seconds_since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The draft's next token after `drafts` (appended to the sequence's output): the argmax for
// greedy requests (the target will verify by exact match), else a draw from the draft's
// distribution under the request's sampling settings, which is kept for rejection sampling.
void draft_next(std::span<const float> row, Sequence* seq, std::span<const int32_t> eos) {
  std::vector<int32_t> out(seq->tokens.begin() + seq->prompt_len, seq->tokens.end());
  out.insert(out.end(), seq->spec_tokens.begin(), seq->spec_tokens.end());
  SampleContext ctx;
  ctx.prompt_tokens = std::span<const int32_t>(seq->tokens).first(seq->prompt_len);
  ctx.output_tokens = out;
  ctx.eos_token_ids = eos;
  ctx.seed = seq->seed;
  const std::vector<float> x = process_logits(row, seq->params, ctx);
  if (seq->params.greedy()) {
    seq->spec_tokens.push_back(argmax(x));
    return;
  }
  TokenDistribution d = sampling_distribution(x, seq->params);
  const double u = counter_uniform(seq->seed ^ kSpecDraftSalt, out.size());
  double cum = 0;
  int32_t tok = d.tokens.back();
  for (size_t i = 0; i < d.tokens.size(); ++i) {
    cum += d.probs[i];
    if (u < cum) {
      tok = d.tokens[i];
      break;
    }
  }
  seq->spec_tokens.push_back(tok);
  seq->spec_dists.push_back(std::move(d));
}

}  // namespace

DraftModelProposer::DraftModelProposer(ModelExecutor* draft, const BlockManagerConfig& kv, int64_t max_catchup_tokens)
    : draft_(draft), kv_(kv), max_catchup_(std::max<int64_t>(max_catchup_tokens, 1)) {}

void DraftModelProposer::release(SeqId id) {
  kv_.free(id);
  states_.erase(id);
}

void DraftModelProposer::on_verified(Sequence* seq, int32_t accepted) {
  auto it = states_.find(seq->id);
  if (it == states_.end()) return;
  State& st = it->second;
  // Draft KV exists for drafts 1..proposed-1 (the last draft was never fed back).
  st.computed = st.base + std::min(accepted, std::max(st.proposed - 1, 0));
  st.computed = std::min(st.computed, seq->num_tokens());
  st.proposed = 0;
  kv_.commit(seq->id, seq->tokens, st.computed);
}

std::vector<DraftModelProposer::Item> DraftModelProposer::plan(std::span<const DraftRequest> reqs) {
  std::vector<Item> items;
  int64_t budget = max_catchup_;
  for (const DraftRequest& r : reqs) {
    Sequence* seq = r.seq;
    seq->spec_tokens.clear();
    seq->spec_dists.clear();
    if (r.k <= 0 || budget <= 0) continue;
    State& st = states_[seq->id];
    st.proposed = 0;
    if (!kv_.has(seq->id)) st.computed = kv_.match_prefix(seq->id, seq->tokens);
    const int64_t need = seq->num_tokens() - st.computed;
    if (need <= 0) {  // cannot happen (the last token never has draft KV); start over if it does
      release(seq->id);
      continue;
    }
    const int64_t n = std::min(need, budget);
    const bool drafting = n == need;
    const int64_t total = drafting ? seq->num_tokens() + r.k - 1 : st.computed + n;
    if (!kv_.allocate(seq->id, total)) {
      release(seq->id);  // the draft cache is full: this sequence decodes without drafts
      continue;
    }
    budget -= n;
    items.push_back({seq, r.k, st.computed, n, drafting});
  }
  return items;
}

// Round 0: catch up on the context; drafting sequences get the first draft.
Status DraftModelProposer::catch_up(const std::vector<Item>& items, std::span<const int32_t> eos, SpecPolicy* policy) {
  const int64_t vocab = draft_->vocab_size();
  std::vector<float> logits;
  std::vector<SeqStepInput> batch;
  for (const Item& it : items) {
    SeqStepInput in;
    in.tokens = std::span<const int32_t>(it.seq->tokens).subspan(it.start, it.n);
    in.start_pos = it.start;
    in.block_table = kv_.block_table(it.seq->id);
    in.need_logits = it.drafting;
    batch.push_back(in);
  }
  const auto t0 = std::chrono::steady_clock::now();
  RETURN_IF_ERROR(draft_->execute(batch, &logits));
  if (policy) policy->observe_draft(static_cast<int64_t>(items.size()), seconds_since(t0));
  size_t row = 0;
  for (const Item& it : items) {
    State& st = states_[it.seq->id];
    st.computed = it.start + it.n;
    if (!it.drafting) {
      kv_.commit(it.seq->id, it.seq->tokens, st.computed);
      continue;
    }
    draft_next(std::span<const float>(logits).subspan(row * vocab, vocab), it.seq, eos);
    ++row;
  }
  return OkStatus();
}

Status DraftModelProposer::propose(std::span<const DraftRequest> reqs, std::span<const int32_t> eos,
                                   SpecPolicy* policy) {
  const std::vector<Item> items = plan(reqs);
  if (items.empty()) return OkStatus();
  RETURN_IF_ERROR(catch_up(items, eos, policy));
  const int64_t vocab = draft_->vocab_size();
  std::vector<float> logits;
  // Rounds 1..k-1: feed the previous draft back, one token per sequence.
  int32_t max_k = 0;
  for (const Item& it : items)
    if (it.drafting) max_k = std::max(max_k, it.k);
  for (int32_t j = 1; j < max_k; ++j) {
    std::vector<SeqStepInput> batch;
    std::vector<Sequence*> in_round;
    for (const Item& it : items) {
      if (!it.drafting || it.k <= j) continue;
      SeqStepInput in;
      in.tokens = std::span<const int32_t>(it.seq->spec_tokens).subspan(j - 1, 1);
      in.start_pos = it.seq->num_tokens() + j - 1;
      in.block_table = kv_.block_table(it.seq->id);
      in.need_logits = true;
      batch.push_back(in);
      in_round.push_back(it.seq);
    }
    const auto t0 = std::chrono::steady_clock::now();
    RETURN_IF_ERROR(draft_->execute(batch, &logits));
    if (policy) policy->observe_draft(static_cast<int64_t>(batch.size()), seconds_since(t0));
    for (size_t i = 0; i < in_round.size(); ++i)
      draft_next(std::span<const float>(logits).subspan(i * vocab, vocab), in_round[i], eos);
  }
  for (const Item& it : items) {
    if (!it.drafting) continue;
    State& st = states_[it.seq->id];
    st.base = it.seq->num_tokens();
    st.proposed = static_cast<int32_t>(it.seq->spec_tokens.size());
    kv_.commit(it.seq->id, it.seq->tokens, st.computed);
  }
  return OkStatus();
}

}  // namespace lancet
