// Asynchronous scheduling (EngineConfig::async_scheduling), as vLLM v1 does it: the step
// loop schedules and launches step N+1 while the device still runs step N, and only then
// waits for step N's tokens.
//
//  - A sequence that samples in step N has one token in flight (Sequence::num_inflight); the
//    scheduler plans with it (num_tokens_with_inflight), so the sequence decodes in step N+1
//    with that token as its input, which the device writes from step N's draws (TokenFeed)
//    without the host seeing it. num_computed moves when a step is launched; only known tokens
//    are keyed in the prefix cache (a block is committed when its last token arrives).
//  - Step N's tokens are appended, checked against the stop rules (end tokens, stop ids,
//    max_tokens, the context) and emitted after step N+1 was launched; the output side (text,
//    stop strings) sees them then. A sequence that ended at step N has run step N+1 as well:
//    it is finished, and its blocks freed, when its end is seen, and its step-N+1 token is
//    dropped when that step is collected. A sequence whose last allowed token is in flight is
//    not scheduled again. Aborts free blocks at the next step as before.
//  - Greedy and seeded draws depend only on the logits and (seed, output position), so the
//    tokens are those of synchronous steps; the in-flight token counts in the position.
//  - Requests that need the host every step (needs_host_steps) make the engine run
//    synchronous steps while any of them is waiting or running: the in-flight step is
//    collected first, then the step runs as without async scheduling. Speculative decoding
//    turns it off altogether.
#include <chrono>

#include "engine/engine.h"

namespace lancet {

bool needs_host_steps(const GenerationRequest& req) {
  const SamplingParams& p = req.params;
  return req.embed || p.prompt_logprobs >= 0 || p.constraint || p.logprobs >= 0 || !p.logit_bias.empty() ||
         p.repetition_penalty != 1.0f || p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f ||
         p.min_tokens > 0;
}

void Engine::step_async(std::vector<TokenEvent>* events) {
  SchedulerOutput out = scheduler_->schedule();
  counters_.preemptions = scheduler_->total_preemptions();
  std::unique_ptr<InflightStep> launched;
  if (!out.empty()) launched = launch_async(out, events);
  if (inflight_ && !collect_inflight(events).ok() && launched) {
    // The step just launched read its fed tokens from the failed one: its sequences end too.
    // (It is still collected next step, with nobody left to take its tokens.)
    for (const InflightStep::Seq& e : launched->seqs) {
      auto it = seqs_.find(e.id);
      if (it != seqs_.end()) finish(it->second.get(), FinishReason::kError, events, true);
    }
  }
  if (!launched) last_collect_ = {};  // nothing queued behind: the next collect measures no step
  inflight_ = std::move(launched);
}

std::unique_ptr<InflightStep> Engine::launch_async(SchedulerOutput& out, std::vector<TokenEvent>* events) {
  const auto now = std::chrono::steady_clock::now();
  for (const ScheduledSeq& s : out.scheduled)
    if (s.seq->first_scheduled == std::chrono::steady_clock::time_point{}) s.seq->first_scheduled = now;
  BatchStorage storage;
  std::vector<TokenFeed> feeds;
  const std::vector<RunnerSeq> batch = runner_batch(out, &storage, &feeds);
  auto step = std::make_unique<InflightStep>();
  step->timed = config_.scheduler.max_step_ms > 0;
  if (step->timed)
    for (const ScheduledSeq& s : out.scheduled) step->features.add_chunk(s.seq->num_computed, s.num_new_tokens);
  std::vector<int32_t> sample_index;
  Status st;
  {
    const Timer model_timer{&counters_.model_seconds};
    st = runner_->launch(batch, feeds, &sample_index);
  }
  step->launched_at = std::chrono::steady_clock::now();
  counters_.steps++;
  counters_.iteration_tokens.observe(static_cast<double>(out.num_batched_tokens));
  if (!st.ok()) {
    for (const ScheduledSeq& s : out.scheduled) finish(s.seq, FinishReason::kError, events, true);
    last_error_ = st;
    return nullptr;
  }
  counters_.async_steps++;
  scheduler_->on_step_done(out);
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    Sequence* seq = out.scheduled[i].seq;
    const bool samples = sample_index[i] >= 0;
    step->seqs.push_back({seq->id, samples});
    if (samples) {
      seq->num_inflight++;
      seq->inflight_sample = sample_index[i];
    }
  }
  // n > 1: the other choices may start once the prompt's blocks are computed (queued on the
  // device before anything they run).
  for (const ScheduledSeq& s : out.scheduled)
    if (s.seq->num_computed >= s.seq->prompt_len) release_followers(s.seq->id);
  return step;
}

Status Engine::collect_inflight(std::vector<TokenEvent>* events) {
  const std::unique_ptr<InflightStep> step = std::move(inflight_);
  RunnerOutput ro;
  Status st;
  {
    const Timer model_timer{&counters_.model_seconds};
    st = runner_->collect(&ro);
  }
  const auto now = std::chrono::steady_clock::now();
  // A step launched before the previous one was collected ran right behind it on the device:
  // the time between the two collects is its own.
  if (st.ok() && step->timed && last_collect_ != std::chrono::steady_clock::time_point{} &&
      step->launched_at < last_collect_) {
    const double ms = 1e3 * std::chrono::duration<double>(now - last_collect_).count();
    log_timed_step(step->features, step_cost_, ms);
    step_cost_.observe(step->features, ms);
  }
  last_collect_ = now;
  // The step's sequences first, with the end of each token list fetched ahead: a thousand
  // sequences' lookups and appends then overlap their cache misses instead of taking them in turn.
  std::vector<Sequence*> live(step->seqs.size(), nullptr);
  for (size_t i = 0; i < step->seqs.size(); ++i) {
    auto it = seqs_.find(step->seqs[i].id);
    if (it == seqs_.end()) continue;  // ended since the launch: its token is dropped
    live[i] = it->second.get();
    __builtin_prefetch(live[i]->tokens.data() + live[i]->tokens.size(), 1);
  }
  for (size_t i = 0; i < step->seqs.size(); ++i) {
    const InflightStep::Seq& e = step->seqs[i];
    Sequence* seq = live[i];  // finishing one sequence below never ends another
    if (!seq) continue;
    if (e.samples) seq->num_inflight--;
    if (!st.ok()) {
      finish(seq, FinishReason::kError, events, true);
      continue;
    }
    if (!e.samples) continue;
    seq->tokens.push_back(ro.samples[i].token);
    scheduler_->commit_known(seq);
    const FinishReason reason = emit_token(seq, std::move(ro.samples[i]), events);
    if (reason != FinishReason::kNone) finish(seq, reason, events, false);
  }
  if (!st.ok()) last_error_ = st;
  return st;
}

}  // namespace lancet
