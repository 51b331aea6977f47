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
  int64_t budget = config_.max_num_batched_tokens;
  int64_t low_left = config_.low_priority_prefill_tokens > 0 ? config_.low_priority_prefill_tokens
                                                             : std::numeric_limits<int64_t>::max();
  preempt_for_waiting(&out, budget);
  schedule_running(&out, &budget, &low_left);
  // Nothing new is admitted in a step that had to preempt for a running sequence's blocks.
  if (static_cast<int64_t>(out.preempted.size()) == out.num_priority_preempted) admit_waiting(&out, &budget, &low_left);
  out.num_batched_tokens = config_.max_num_batched_tokens - budget;
  return out;
}

int32_t Scheduler::best_prompt_priority() const {
  int32_t best = std::numeric_limits<int32_t>::max();
  if (!waiting_.empty()) best = waiting_.front()->priority;  // sorted: the front is the best
  for (const Sequence* seq : running_)
    if (seq->num_tokens() - seq->num_computed > 1) best = std::min(best, seq->priority);
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
    int64_t first_chunk = std::min(w->num_tokens() - w->num_computed, budget);
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

int64_t Scheduler::prompt_chunk(const Sequence& seq, int64_t want, int64_t budget, int64_t low_left) const {
  int64_t n = std::min(want, budget);
  if (want > 1 && config_.long_prefill_token_threshold > 0) n = std::min(n, config_.long_prefill_token_threshold);
  if (want > 1 && seq.priority > kInteractivePriority) n = std::min(n, low_left);
  return n;
}

void Scheduler::schedule_running(SchedulerOutput* out_ptr, int64_t* budget_ptr, int64_t* low_left_ptr) {
  SchedulerOutput& out = *out_ptr;
  int64_t& budget = *budget_ptr;
  // 1. Running sequences, decodes before prompt chunks, each group oldest first; the victim of
  //    a preemption is the running sequence the policy would schedule last that is not already
  //    part of this step.
  std::vector<Sequence*> snapshot;
  snapshot.reserve(running_.size());
  // Lower-priority sequences wait while a higher-priority prompt has tokens to compute.
  const int32_t prompt_priority = best_prompt_priority();
  for (Sequence* seq : running_)
    if (seq->num_tokens() - seq->num_computed <= 1 && seq->priority <= prompt_priority) snapshot.push_back(seq);
  for (Sequence* seq : running_)
    if (seq->num_tokens() - seq->num_computed > 1 && seq->priority <= prompt_priority) snapshot.push_back(seq);
  int64_t& low_left = *low_left_ptr;
  for (Sequence* seq : snapshot) {
    if (budget <= 0) break;
    if (seq->status != SeqStatus::kRunning) continue;  // preempted earlier in this loop
    const int64_t want = seq->num_tokens() - seq->num_computed;
    const int64_t n = prompt_chunk(*seq, want, budget, low_left);
    if (n <= 0) continue;  // nothing to compute, or no low-priority prompt tokens left
    // Drafts ride along with a decode when budget and free blocks allow; never preempt for them.
    if (want == 1 && !seq->spec_tokens.empty() && budget > 1) {
      const int64_t spec = std::min<int64_t>(static_cast<int64_t>(seq->spec_tokens.size()), budget - 1);
      if (kv_->allocate(seq->id, seq->num_computed + 1 + spec)) {
        out.scheduled.push_back({seq, 1 + spec, spec});
        budget -= 1 + spec;
        continue;
      }
    }
    if (!allocate_or_preempt(seq, n, &out)) break;  // the pool cannot hold even these tokens now
    out.scheduled.push_back({seq, n, 0});
    budget -= n;
    if (want > 1 && seq->priority > kInteractivePriority) low_left -= n;
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

void Scheduler::admit_waiting(SchedulerOutput* out_ptr, int64_t* budget_ptr, int64_t* low_left_ptr) {
  SchedulerOutput& out = *out_ptr;
  int64_t& budget = *budget_ptr;
  int64_t& low_left = *low_left_ptr;
  // 2. Waiting sequences, in policy order, while budget, sequence slots and blocks allow.
  {
    while (!waiting_.empty() && budget > 0 &&
           static_cast<int64_t>(running_.size()) < config_.max_num_seqs) {
      Sequence* seq = waiting_.front();
      const bool matched_now = seq->num_computed == 0;
      if (matched_now && !seq->scores_prompt()) {
        seq->num_cached_prompt = kv_->match_prefix(seq->id, seq->tokens);
        seq->num_computed = seq->num_cached_prompt;
      }
      const int64_t want = seq->num_tokens() - seq->num_computed;
      const int64_t n = prompt_chunk(*seq, want, budget, low_left);
      if (n <= 0 || !kv_->allocate(seq->id, seq->num_computed + n)) {
        kv_->free(seq->id);  // give the prefix hits back; retry next step
        seq->num_computed = 0;
        break;
      }
      // Counted once admitted (a failed allocation retries the match next step), and for new
      // requests only, as vLLM does: a preempted one recomputes its own earlier blocks.
      if (matched_now && seq->num_preemptions == 0) kv_->count_prefix_query(seq->num_tokens(), seq->num_cached_prompt);
      waiting_.pop_front();
      seq->status = SeqStatus::kRunning;
      running_.push_back(seq);
      out.scheduled.push_back({seq, n, 0});
      budget -= n;
      if (want > 1 && seq->priority > kInteractivePriority) low_left -= n;
    }
  }
}

void Scheduler::on_step_done(const SchedulerOutput& out) {
  for (const ScheduledSeq& s : out.scheduled) {
    s.seq->num_computed += s.num_new_tokens;
    kv_->commit(s.seq->id, s.seq->tokens, s.seq->num_computed);
    if (s.num_spec_tokens > 0) kv_->truncate(s.seq->id, s.seq->num_tokens());
  }
}

}  // namespace lancet
