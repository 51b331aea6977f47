// Scheduler implementation (see scheduler.h for the policy).
#include "engine/scheduler.h"

#include <algorithm>
#include <cassert>
#include <limits>

namespace lancet {

const char* finish_reason_name(FinishReason r) {
  switch (r) {
    case FinishReason::kNone: return "none";
    case FinishReason::kStop: return "stop";
    case FinishReason::kLength: return "length";
    case FinishReason::kAbort: return "abort";
    case FinishReason::kError: return "error";
  }
  return "none";
}

Scheduler::Scheduler(const SchedulerConfig& config, KvCacheManager* kv,
                     std::unique_ptr<SchedulingPolicy> policy)
    : config_(config), kv_(kv), policy_(policy ? std::move(policy)
                                               : std::make_unique<FcfsPriorityPolicy>()) {}

void Scheduler::insert_waiting(Sequence* seq) {
  auto it = std::upper_bound(waiting_.begin(), waiting_.end(), seq,
                             [&](const Sequence* a, const Sequence* b) { return policy_->before(*a, *b); });
  waiting_.insert(it, seq);
}

void Scheduler::add(Sequence* seq) {
  seq->status = SeqStatus::kWaiting;
  seq->num_computed = 0;
  insert_waiting(seq);
}

void Scheduler::remove(Sequence* seq) {
  auto w = std::find(waiting_.begin(), waiting_.end(), seq);
  if (w != waiting_.end()) waiting_.erase(w);
  auto r = std::find(running_.begin(), running_.end(), seq);
  if (r != running_.end()) running_.erase(r);
  kv_->free(seq->id);
}

void Scheduler::preempt(Sequence* seq) {
  auto r = std::find(running_.begin(), running_.end(), seq);
  assert(r != running_.end());
  running_.erase(r);
  kv_->free(seq->id);
  seq->num_computed = 0;
  seq->num_preemptions++;
  seq->status = SeqStatus::kWaiting;
  total_preemptions_++;
  insert_waiting(seq);
}

SchedulerOutput Scheduler::schedule() {
  SchedulerOutput out;
  Allowance left;
  left.budget = config_.max_num_batched_tokens;
  left.low_left = config_.low_priority_prefill_tokens > 0 ? config_.low_priority_prefill_tokens
                                                          : std::numeric_limits<int64_t>::max();
  left.timed = config_.max_step_ms > 0 && cost_ && cost_->fitted();
  if (left.timed) left.ms_left = config_.max_step_ms - cost_->step_ms();
  if (config_.max_step_ms > 0 && cost_ && !left.timed) left.cold_left = cost_->cold_chunk(config_.max_step_ms);
  preempt_for_waiting(&out, left.budget);
  schedule_running(&out, &left);
  // Nothing new is admitted in a step that had to preempt for a running sequence's blocks.
  if (static_cast<int64_t>(out.preempted.size()) == out.num_priority_preempted) admit_waiting(&out, &left);
  out.num_batched_tokens = config_.max_num_batched_tokens - left.budget;
  return out;
}

int32_t Scheduler::best_prompt_priority() const {
  int32_t best = std::numeric_limits<int32_t>::max();
  if (!waiting_.empty()) best = waiting_.front()->priority;  // sorted: the front is the best
  for (const Sequence* seq : running_)
    if (seq->num_tokens_with_inflight() - seq->num_computed > 1) best = std::min(best, seq->priority);
  return best;
}

void Scheduler::preempt_for_waiting(SchedulerOutput* out, int64_t budget) {
  while (!waiting_.empty()) {
    const Sequence* w = waiting_.front();
    Sequence* victim = nullptr;
    for (Sequence* cand : running_)
      if (cand->priority > w->priority && (!victim || policy_->before(*victim, *cand))) victim = cand;
    if (!victim) return;
    const bool slots_full = static_cast<int64_t>(running_.size()) >= config_.max_num_seqs;
    int64_t first_chunk = std::min(w->num_tokens_with_inflight() - w->num_computed, budget);
    if (config_.long_prefill_token_threshold > 0 && first_chunk > 1)
      first_chunk = std::min(first_chunk, config_.long_prefill_token_threshold);
    // Without prefix-cache hits counted: it may preempt one victim more than needed.
    const bool blocks_short = kv_->blocks_needed(w->id, w->num_computed + first_chunk) > kv_->num_free_blocks();
    if (!slots_full && !blocks_short) return;
    preempt(victim);
    out->preempted.push_back(victim);
    out->num_priority_preempted++;
  }
}

int64_t Scheduler::prompt_chunk(const Sequence& seq, int64_t want, const Allowance& left) const {
  int64_t n = std::min(want, left.budget);
  if (want > 1 && config_.long_prefill_token_threshold > 0) n = std::min(n, config_.long_prefill_token_threshold);
  if (want > 1 && seq.priority > kInteractivePriority) n = std::min(n, left.low_left);
  if (want > 1 && left.cold_left >= 0) n = std::min(n, left.cold_left);
  if (want > 1 && left.timed && n > 0) {
    const int64_t fits = cost_->max_chunk(seq.num_computed, n, left.ms_left);
    n = left.chunk_given ? fits : std::max(fits, std::min(n, kMinTimedChunk));
  }
  return n;
}

void Scheduler::charge(const Sequence& seq, int64_t want, int64_t n, Allowance* left) const {
  left->budget -= n;
  if (want > 1 && seq.priority > kInteractivePriority) left->low_left -= n;
  if (want > 1 && left->cold_left >= 0) left->cold_left -= n;
  if (!left->timed) return;
  // A decode with drafts computes like a short chunk.
  left->ms_left -= n > 1 ? cost_->chunk_ms(seq.num_computed, n) : cost_->decode_row_ms(seq.num_computed + 1);
  if (want > 1) left->chunk_given = true;
}

void Scheduler::schedule_running(SchedulerOutput* out_ptr, Allowance* left) {
  SchedulerOutput& out = *out_ptr;
  // 1. Running sequences, decodes before prompt chunks, each group oldest first; the victim of
  //    a preemption is the running sequence the policy would schedule last that is not already
  //    part of this step.
  std::vector<Sequence*> snapshot;
  snapshot.reserve(running_.size());
  // Lower-priority sequences wait while a higher-priority prompt has tokens to compute.
  const int32_t prompt_priority = best_prompt_priority();
  for (Sequence* seq : running_)
    if (seq->num_tokens_with_inflight() - seq->num_computed <= 1 && seq->priority <= prompt_priority)
      snapshot.push_back(seq);
  for (Sequence* seq : running_)
    if (seq->num_tokens_with_inflight() - seq->num_computed > 1 && seq->priority <= prompt_priority)
      snapshot.push_back(seq);
  for (Sequence* seq : snapshot) {
    if (left->budget <= 0) break;
    if (seq->status != SeqStatus::kRunning) continue;  // preempted earlier in this loop
    // Asynchronous scheduling: a sequence whose last token is in flight has nothing left to
    // compute (its length ends it when the token arrives).
    if (seq->num_inflight > 0 && seq->num_tokens_with_inflight() >= seq->token_limit(config_.max_model_len)) continue;
    const int64_t want = seq->num_tokens_with_inflight() - seq->num_computed;
    const int64_t n = prompt_chunk(*seq, want, *left);
    if (n <= 0) continue;  // nothing to compute, or no low-priority prompt tokens (or time) left
    // Drafts ride along with a decode when budget and free blocks allow; never preempt for them.
    if (want == 1 && !seq->spec_tokens.empty() && left->budget > 1) {
      const int64_t spec = std::min<int64_t>(static_cast<int64_t>(seq->spec_tokens.size()), left->budget - 1);
      if (kv_->allocate(seq->id, seq->num_computed + 1 + spec)) {
        out.scheduled.push_back({seq, 1 + spec, spec});
        charge(*seq, want, 1 + spec, left);
        continue;
      }
    }
    if (!allocate_or_preempt(seq, n, &out)) break;  // the pool cannot hold even these tokens now
    out.scheduled.push_back({seq, n, 0});
    charge(*seq, want, n, left);
  }
}

bool Scheduler::allocate_or_preempt(Sequence* seq, int64_t n, SchedulerOutput* out) {
  while (true) {
    if (kv_->allocate(seq->id, seq->num_computed + n)) return true;
    Sequence* victim = nullptr;
    for (Sequence* cand : running_) {
      const bool in_step = std::any_of(out->scheduled.begin(), out->scheduled.end(),
                                       [&](const ScheduledSeq& s) { return s.seq == cand; });
      if (in_step) continue;
      if (!victim || policy_->before(*victim, *cand)) victim = cand;
    }
    if (!victim) return false;
    preempt(victim);
    out->preempted.push_back(victim);
    if (victim == seq) return false;
  }
}

void Scheduler::admit_waiting(SchedulerOutput* out_ptr, Allowance* left) {
  SchedulerOutput& out = *out_ptr;
  // With reserve_whole_length: the blocks the running sequences may still take, up to their
  // whole lengths (their allocations of this step already made).
  int64_t growth = 0;
  if (config_.reserve_whole_length)
    for (const Sequence* r : running_) growth += kv_->blocks_needed(r->id, r->token_limit(config_.max_model_len));
  // 2. Waiting sequences, in policy order, while budget, sequence slots and blocks allow.
  while (!waiting_.empty() && left->budget > 0 && static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
    Sequence* seq = waiting_.front();
    const bool matched_now = seq->num_computed == 0;
    int64_t local_hits = 0;
    if (matched_now && !seq->scores_prompt()) {
      local_hits = seq->num_cached_prompt = kv_->match_prefix(seq->id, seq->tokens);
      if (extend_prefix_) seq->num_cached_prompt += extend_prefix_(*seq);
      seq->num_computed = seq->num_cached_prompt;
    }
    const int64_t want = seq->num_tokens_with_inflight() - seq->num_computed;
    const int64_t n = prompt_chunk(*seq, want, *left);
    const int64_t limit = seq->token_limit(config_.max_model_len);
    const bool reserved = !config_.reserve_whole_length || running_.empty() ||
                          growth + kv_->blocks_needed(seq->id, limit) <= kv_->num_free_blocks();
    if (n <= 0 || !reserved || !kv_->allocate(seq->id, seq->num_computed + n)) {
      kv_->free(seq->id);  // give the prefix hits back; retry next step
      seq->num_computed = 0;
      break;
    }
    if (config_.reserve_whole_length) growth += kv_->blocks_needed(seq->id, limit);
    // Counted once admitted (a failed allocation retries the match next step), and for new
    // requests only, as vLLM does: a preempted one recomputes its own earlier blocks.
    if (matched_now && seq->num_preemptions == 0) kv_->count_prefix_query(seq->num_tokens(), local_hits);
    waiting_.pop_front();
    seq->status = SeqStatus::kRunning;
    running_.push_back(seq);
    out.scheduled.push_back({seq, n, 0});
    charge(*seq, want, n, left);
  }
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.scheduled) {
    // A row whose every known token was computed before this step feeds only the token in
    // flight (asynchronous scheduling): its known tokens were keyed when the last of them
    // arrived (commit_known), so there is nothing to key now.
    const bool only_inflight = s.num_spec_tokens == 0 && s.seq->num_computed >= s.seq->num_tokens();
    s.seq->num_computed += s.num_new_tokens;
    // Only known tokens are keyed: with a token in flight its block is committed when the
    // token arrives (commit_known).
    if (!only_inflight) commit_known(s.seq);
    if (s.num_spec_tokens > 0) kv_->truncate(s.seq->id, s.seq->num_tokens());
  }
}

void Scheduler::commit_known(Sequence* seq) {
  kv_->commit(seq->id, seq->tokens, std::min(seq->num_computed, seq->num_tokens()));
}

}  // namespace lancet
