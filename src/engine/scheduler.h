// The scheduler decides each step which sequences run and how many tokens each computes,
// within a token budget (max_num_batched_tokens) and a sequence cap (max_num_seqs):
//   1. running sequences first: decodes (1 token plus their speculative drafts) before
//      unfinished prompts (a chunk each), each group in order, so a long prompt being prefilled
//      never holds back the next token of the other streams; drafts are dropped before
//      anything is preempted for them; a prompt's chunk is capped at
//      long_prefill_token_threshold when that is set, leaving budget for new arrivals;
//      when blocks run out, the policy's victim (the newest, lowest-priority running sequence)
//      is preempted: its blocks are freed and it goes back to the waiting queue to be
//      recomputed later (with prefix caching, its full blocks are usually still cached);
//   2. then waiting sequences in the policy's order, prefix-cache hits first, with chunked
//      prefill: a long prompt takes whatever budget is left and continues next step; with
//      reserve_whole_length, only while the cache can hold every running sequence and the
//      new one to their whole lengths (no preemption for blocks).
// With max_step_ms, prompt chunks are also cut to what the step cost model predicts fits in
// that time beside the step's decodes (the first chunk of a step keeps kMinTimedChunk tokens).
// Priorities (lower value first; the server's batch requests run at kBatchPriority): before
// step 1, a waiting sequence that finds no sequence slot or too few free blocks for its first
// chunk preempts running sequences of a strictly lower priority (newest first) until it fits,
// and it is admitted in the same step. While a sequence of a higher priority has prompt tokens
// to compute (waiting or running), running lower-priority sequences compute nothing: their
// rows would lengthen the step that makes the higher-priority first token. Sequences of a
// priority above kInteractivePriority compute at most low_priority_prefill_tokens prompt tokens
// per step in all, so a step that a new interactive request has to wait for stays short.
// Out of capacity is a plain outcome (a sequence waits), never an error.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <vector>

#include "engine/sequence.h"
#include "engine/step_cost_model.h"
#include "kv/kv_cache_manager.h"

namespace lancet {

// Priorities the server uses: interactive requests at 0, the Batch API's at kBatchPriority.
inline constexpr int32_t kInteractivePriority = 0;
inline constexpr int32_t kBatchPriority = 10;

struct SchedulerConfig {
  int64_t max_num_batched_tokens = 2048;
  int64_t max_num_seqs = 64;
  int64_t max_model_len = 8192;
  // Most tokens one running prompt computes per step (0 = no cap beyond the budget).
  int64_t long_prefill_token_threshold = 0;
  // Prompt tokens per step for all sequences of a priority above kInteractivePriority together
  // (0 = no cap beyond the budget).
  int64_t low_priority_prefill_tokens = 0;
  // Admission under a full cache. false (max-utilization): a waiting sequence is admitted when
  // its first chunk fits; when blocks run out, a running sequence is preempted and recomputed
  // later. true (guaranteed-no-evict): admission reserves each sequence's whole length
  // (token_limit: prompt + max_tokens within max_model_len), so a sequence is admitted only
  // when the free blocks cover what the running ones may still grow by plus its own length;
  // running sequences are then never preempted for blocks (drafts aside) and new ones wait
  // instead. A sequence is always admitted into an empty engine, so none waits forever.
  bool reserve_whole_length = false;
  // A time budget per step (ms; 0 = none): once the step cost model (set_cost_model) is
  // fitted, prompt chunks are cut so that the step's predicted time stays within it, beside
  // the decodes it runs; the first prompt chunk of a step always gets at least
  // kMinTimedChunk tokens, so a long prompt keeps moving however many streams decode. Until
  // the model is fitted, a step's prompt tokens are bounded by StepCostModel::cold_chunk.
  double max_step_ms = 0;
};

// Ordering policy over sequences: which waiting sequence goes first and which running one is
// preempted. Small objects over the pool (DESIGN.md §8.4).
class SchedulingPolicy {
 public:
  virtual ~SchedulingPolicy() = default;
  // True if a should be scheduled before b.
  virtual bool before(const Sequence& a, const Sequence& b) const = 0;
};

// First come, first served with a priority field (lower value first).
class FcfsPriorityPolicy : public SchedulingPolicy {
 public:
  bool before(const Sequence& a, const Sequence& b) const override {
    if (a.priority != b.priority) return a.priority < b.priority;
    return a.arrival < b.arrival;
  }
};

struct ScheduledSeq {
  Sequence* seq = nullptr;
  int64_t num_new_tokens = 0;  // tokens computed this step: [num_computed, num_computed + n)
  // Of those, draft tokens (seq->spec_tokens[0, n)) after the sequence's last token. The
  // engine lowers num_new_tokens to the verified ones before on_step_done.
  int64_t num_spec_tokens = 0;
};

struct SchedulerOutput {
  std::vector<ScheduledSeq> scheduled;
  std::vector<Sequence*> preempted;  // preempted during this call
  // Of those, preempted for a waiting sequence of a higher priority (they do not stop
  // admissions in this step, unlike preemptions for a running sequence's blocks).
  int64_t num_priority_preempted = 0;
  int64_t num_batched_tokens = 0;
  bool empty() const { return scheduled.empty(); }
};

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager* kv,
            std::unique_ptr<SchedulingPolicy> policy = nullptr);

  const SchedulerConfig& config() const { return config_; }
  // The model that max_step_ms predicts step times with (not owned; null: token budget only).
  void set_cost_model(const StepCostModel* model) { cost_ = model; }
  // At admission, after the local prefix-cache lookup: more cached tokens from elsewhere (the
  // shared KV tier, engine/kv_tier_loader.h), already in the sequence's block table. Counted
  // as cached, but not as prefix-cache hits (the tier counts its own).
  using PrefixExtension = std::function<int64_t(const Sequence&)>;
  void set_prefix_extension(PrefixExtension f) { extend_prefix_ = std::move(f); }
  // Queues a sequence (status waiting). The scheduler does not own it.
  void add(Sequence* seq);
  // Removes a sequence wherever it is and frees its blocks (abort or finish).
  void remove(Sequence* seq);
  SchedulerOutput schedule();
  // After the step: advances num_computed of every scheduled sequence and registers full
  // blocks with the prefix cache. Sequences that ran drafts give back the blocks past their
  // tokens (the rejected drafts' KV).
  void on_step_done(const SchedulerOutput& out);
  // Registers seq's full blocks of known tokens with the prefix cache (after a token in
  // flight arrived).
  void commit_known(Sequence* seq);

  const std::vector<Sequence*>& running() const { return running_; }
  int64_t num_waiting() const { return static_cast<int64_t>(waiting_.size()); }
  int64_t num_running() const { return static_cast<int64_t>(running_.size()); }
  bool idle() const { return waiting_.empty() && running_.empty(); }
  int64_t total_preemptions() const { return total_preemptions_; }

 private:
  // What one step may still take: tokens (max_num_batched_tokens), low-priority prompt tokens
  // (low_priority_prefill_tokens) and, with max_step_ms and a fitted cost model, time.
  struct Allowance {
    int64_t budget = 0;
    int64_t low_left = 0;
    bool timed = false;
    double ms_left = 0;
    bool chunk_given = false;  // a prompt chunk is in the step (the minimum chunk is used)
    int64_t cold_left = -1;    // prompt tokens left before the cost model is fitted (-1: no bound)
  };
  // schedule()'s two phases: running sequences (preempting for them), then admissions.
  void schedule_running(SchedulerOutput* out, Allowance* left);
  void admit_waiting(SchedulerOutput* out, Allowance* left);
  // Blocks for seq's next n tokens, preempting what the policy schedules last (not in this
  // step) until they fit; false when they cannot (seq itself may have been preempted).
  bool allocate_or_preempt(Sequence* seq, int64_t n, SchedulerOutput* out);
  // Priority preemption: makes room (a slot, the first chunk's blocks) for the first waiting
  // sequence by preempting running ones of a strictly lower priority.
  void preempt_for_waiting(SchedulerOutput* out, int64_t budget);
  // The best (lowest) priority among sequences with prompt tokens left to compute.
  int32_t best_prompt_priority() const;
  // Tokens seq may compute now: at most `want` and the budget; for prompt chunks the
  // long-prefill threshold, for a low-priority prompt what is left of
  // low_priority_prefill_tokens, and in a timed step what fits in the time left.
  int64_t prompt_chunk(const Sequence& seq, int64_t want, const Allowance& left) const;
  // Takes seq's n tokens off the allowance.
  void charge(const Sequence& seq, int64_t want, int64_t n, Allowance* left) const;
  void preempt(Sequence* seq);
  void insert_waiting(Sequence* seq);

  SchedulerConfig config_;
  KvCacheManager* kv_;
  std::unique_ptr<SchedulingPolicy> policy_;
  PrefixExtension extend_prefix_;
  const StepCostModel* cost_ = nullptr;
  std::deque<Sequence*> waiting_;  // kept sorted by the policy
  std::vector<Sequence*> running_;  // in admission order
  int64_t total_preemptions_ = 0;
};

}  // namespace lancet
