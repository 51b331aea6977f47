// Engine step loop.
#include "engine/engine.h"

#include <algorithm>
#include <chrono>

#include "core/logging.h"
#include "engine/kv_tier_loader.h"
#include "engine/request_checks.h"

namespace lancet {
namespace {

// An embedding request: one choice, no prompt logprobs, a prompt of at most max_len tokens
// (nothing is generated), and a model that returns hidden states.
Status check_embed_request(const GenerationRequest& req, int64_t hidden_size, int64_t max_len) {
  if (hidden_size <= 0) return Unimplemented("this model does not return embeddings");
  if (req.params.n != 1) return InvalidArgument("an embedding request has one choice (n = 1)");
  if (req.params.prompt_logprobs >= 0) return InvalidArgument("an embedding request has no prompt logprobs");
  const int64_t len = static_cast<int64_t>(req.prompt.size());
  if (len > max_len)
    return OutOfRange("This model's maximum context length is " + std::to_string(max_len) + " tokens. However, the input has " +
                      std::to_string(len) + " tokens.");
  return OkStatus();
}

}  // namespace

Engine::Engine(const EngineConfig& config, ModelExecutor* model, ModelExecutor* draft)
    : config_(config), model_(model), runner_(std::make_unique<ModelRunner>(*model)) {
  BlockManagerConfig kvc;
  kvc.num_blocks = model->num_blocks();
  kvc.block_size = model->block_size();
  kvc.enable_prefix_caching = config.enable_prefix_caching;
  kvc.salt = kv_cache_salt(config.model_id, config.kv_dtype, "");
  kv_ = std::make_unique<KvCacheManager>(kvc);
  kv_->set_salt_source([this](SeqId id, BlockHash* salt) {
    auto it = seqs_.find(id);
    if (it == seqs_.end() || !it->second->lora) return false;
    *salt = it->second->lora_salt;
    return true;
  });
  scheduler_ = std::make_unique<Scheduler>(config.scheduler, kv_.get());
  scheduler_->set_cost_model(&step_cost_);
  if (config.speculative.enabled() && (config.speculative.method == SpecMethod::kNgram || draft)) {
    SpeculatorOptions so;
    so.max_num_batched_tokens = config.scheduler.max_num_batched_tokens;
    so.max_model_len = config.scheduler.max_model_len;
    so.draft_kv = config.draft_kv;
    so.draft_cost_ratio = config.draft_cost_ratio;
    if (draft) {
      so.draft_kv.num_blocks = draft->num_blocks();
      so.draft_kv.block_size = draft->block_size();
    }
    spec_ = std::make_unique<Speculator>(config.speculative, draft, so);
  }
  async_ = config.async_scheduling && !spec_;
}

Engine::~Engine() = default;

void Engine::set_kv_tier(KvTier* tier) {
  kv_tier_ = tier;
  if (!tier) {
    kv_->set_block_listener(nullptr);
    scheduler_->set_prefix_extension(nullptr);
    return;
  }
  kv_->set_block_listener([tier](BlockId b, const BlockHash& key) { tier->store(b, key); });
  scheduler_->set_prefix_extension(
      [this](const Sequence& s) { return load_prefix_from_tier(*kv_tier_, *model_, *kv_, s.id, s.tokens); });
}

StatusOr<int64_t> Engine::add_request(const GenerationRequest& req) {
  if (req.prompt.empty()) return InvalidArgument("the prompt is empty");
  const int64_t vocab = model_->vocab_size();
  RETURN_IF_ERROR(check_token_ids(req.prompt, vocab).with_context("prompt"));
  RETURN_IF_ERROR(req.params.validate(vocab, config_.max_logprobs));
  if (req.embed) RETURN_IF_ERROR(check_embed_request(req, model_->hidden_size(), config_.scheduler.max_model_len));
  if (req.lora && (req.lora->slot < 0 || req.lora->slot >= model_->lora_slots()))
    return InvalidArgument("LoRA adapter '" + req.lora->name + "' names slot " + std::to_string(req.lora->slot) +
                           "; the model has " + std::to_string(model_->lora_slots()));
  const int64_t total = static_cast<int64_t>(req.prompt.size()) + (req.embed ? 0 : req.params.max_tokens);
  if (!req.embed)
    RETURN_IF_ERROR(check_context_length(static_cast<int64_t>(req.prompt.size()), req.params.max_tokens,
                                         config_.scheduler.max_model_len));
  if (KvCacheManager::blocks_for(total, model_->block_size()) > kv_->num_blocks()) {
    return OutOfRange("the request needs " + std::to_string(total) +
                      " tokens of KV cache; the cache holds " +
                      std::to_string(kv_->num_blocks() * model_->block_size()));
  }
  const int64_t rid = next_request_++;
  std::uniform_int_distribution<uint64_t> dist;
  std::mt19937_64 gen(seed_source_());
  const uint64_t base_seed = req.params.seed ? *req.params.seed : gen();
  const bool host_steps = needs_host_steps(req);
  auto& ids = requests_[rid];
  for (int32_t i = 0; i < req.params.n; ++i) {
    auto seq = std::make_unique<Sequence>();
    seq->id = next_seq_++;
    seq->request_id = rid;
    seq->index = i;
    seq->priority = req.priority;
    seq->embed = req.embed;
    seq->arrival = arrivals_++;
    seq->tokens = req.prompt;
    seq->prompt_len = static_cast<int64_t>(req.prompt.size());
    seq->params = req.params;
    if (req.lora) {
      seq->lora = req.lora;
      seq->lora_salt = kv_cache_salt(config_.model_id, config_.kv_dtype, req.lora->id);
    }
    if (req.params.constraint) seq->constraint = req.params.constraint->clone();
    seq->seed = base_seed + static_cast<uint64_t>(i) * 0x9e3779b97f4a7c15ull;
    seq->host_steps = host_steps;
    num_host_seqs_ += host_steps ? 1 : 0;
    ids.push_back(seq->id);
    // Choices after the first wait until the first has computed the prompt, then find its
    // full blocks in the prefix cache instead of computing them again.
    if (i == 0 || !config_.enable_prefix_caching) scheduler_->add(seq.get());
    else followers_[ids.front()].push_back(seq->id);
    seqs_[seq->id] = std::move(seq);
  }
  return rid;
}

void Engine::abort(int64_t request_id) {
  std::lock_guard<std::mutex> lock(abort_mu_);
  pending_aborts_.push_back(request_id);
}

bool Engine::has_work() const {
  if (!scheduler_->idle() || inflight_) return true;
  std::lock_guard<std::mutex> lock(const_cast<std::mutex&>(abort_mu_));
  return !pending_aborts_.empty();
}

void Engine::release_followers(SeqId leader) {
  auto it = followers_.find(leader);
  if (it == followers_.end()) return;
  for (SeqId f : it->second) {
    auto s = seqs_.find(f);
    if (s != seqs_.end() && !s->second->finished()) scheduler_->add(s->second.get());
  }
  followers_.erase(it);
}

void Engine::finish(Sequence* seq, FinishReason reason, std::vector<TokenEvent>* events, bool emit) {
  release_followers(seq->id);
  seq->status = SeqStatus::kFinished;
  seq->finish = reason;
  scheduler_->remove(seq);
  num_host_seqs_ -= seq->host_steps ? 1 : 0;
  if (spec_) spec_->release(seq->id);
  if (emit) {
    TokenEvent ev;
    ev.request_id = seq->request_id;
    ev.index = seq->index;
    ev.finished = true;
    ev.finish_reason = reason;
    ev.prompt_tokens = static_cast<int32_t>(seq->prompt_len);
    ev.cached_prompt_tokens = static_cast<int32_t>(seq->num_cached_prompt);
    ev.first_scheduled = seq->first_scheduled;
    ev.spec_draft_tokens = static_cast<int32_t>(seq->spec_draft_tokens);
    ev.spec_accepted_tokens = static_cast<int32_t>(seq->spec_accepted_tokens);
    events->push_back(std::move(ev));
  }
  const int64_t rid = seq->request_id;
  const SeqId sid = seq->id;
  auto& ids = requests_[rid];
  ids.erase(std::remove(ids.begin(), ids.end(), sid), ids.end());
  if (ids.empty()) requests_.erase(rid);
  seqs_.erase(sid);  // seq is dangling after this
}

void Engine::finish_sequences(std::span<const SequenceKey> keys) {
  for (const SequenceKey& k : keys) {
    auto it = requests_.find(k.request_id);
    if (it == requests_.end()) continue;  // every choice has ended
    for (SeqId sid : it->second) {
      Sequence* seq = seqs_.at(sid).get();
      if (seq->index != k.index) continue;
      finish(seq, FinishReason::kStop, nullptr, /*emit=*/false);  // erases sid from it->second
      break;
    }
  }
}

void Engine::apply_aborts(std::vector<TokenEvent>* events) {
  std::vector<int64_t> aborts;
  {
    std::lock_guard<std::mutex> lock(abort_mu_);
    aborts.swap(pending_aborts_);
  }
  for (int64_t rid : aborts) {
    auto it = requests_.find(rid);
    if (it == requests_.end()) continue;  // already finished
    const std::vector<SeqId> ids = it->second;
    for (SeqId sid : ids) finish(seqs_.at(sid).get(), FinishReason::kAbort, events, true);
  }
}

void Engine::constrain_row(Sequence* seq) const {
  std::vector<uint32_t>& bits = seq->allowed_tokens;
  seq->constraint->allowed_tokens(runner_->vocab_size(), &bits);
  bool any = false;
  for (uint32_t w : bits) any |= w != 0;
  // End tokens while the document is whole; and when nothing can follow (a grammar the
  // vocabulary cannot spell further), so that the sequence still ends.
  if (seq->constraint->complete() || !any) {
    for (int32_t e : config_.eos_token_ids)
      if (e >= 0 && static_cast<size_t>(e >> 5) < bits.size()) bits[static_cast<size_t>(e >> 5)] |= 1u << (e & 31);
  }
}

FinishReason Engine::emit_token(Sequence* seq, SampleResult r, std::vector<TokenEvent>* events) {
  // seq->tokens already holds r.token; num_output() counts it.
  counters_.generation_tokens++;
  TokenEvent ev;
  ev.request_id = seq->request_id;
  ev.index = seq->index;
  ev.token = r.token;
  ev.logprob = r.logprob;
  ev.top_logprobs = std::move(r.top_logprobs);
  ev.prompt_tokens = static_cast<int32_t>(seq->prompt_len);
  ev.cached_prompt_tokens = static_cast<int32_t>(seq->num_cached_prompt);
  ev.first_scheduled = seq->first_scheduled;
  ev.spec_draft_tokens = static_cast<int32_t>(seq->spec_draft_tokens);
  ev.spec_accepted_tokens = static_cast<int32_t>(seq->spec_accepted_tokens);
  if (seq->params.prompt_logprobs >= 0 && seq->index == 0 && seq->num_output() == 1)
    ev.prompt_logprobs = std::move(seq->prompt_logprobs);

  FinishReason reason = FinishReason::kNone;
  const bool past_min = seq->num_output() >= seq->params.min_tokens;
  const bool is_eos = std::find(config_.eos_token_ids.begin(), config_.eos_token_ids.end(), r.token) !=
                      config_.eos_token_ids.end();
  // Structured outputs: the document advances by the token; a whole document that nothing
  // may follow ends the sequence (as does a token the constraint refuses: never sampled, but
  // the sequence must not go on outside the grammar).
  bool constraint_ends = false;
  if (seq->constraint && !is_eos) constraint_ends = !seq->constraint->accept(r.token) || seq->constraint->done();
  const bool is_stop_id = std::find(seq->params.stop_token_ids.begin(), seq->params.stop_token_ids.end(),
                                    r.token) != seq->params.stop_token_ids.end();
  // Stop strings are the output side's: it may still end the sequence at this token
  // (finish_sequences), or turn a kLength here into a stop.
  if (constraint_ends || (seq->constraint && is_eos)) {
    reason = FinishReason::kStop;
  } else if (past_min && ((is_eos && !seq->params.ignore_eos) || is_stop_id)) {
    reason = FinishReason::kStop;
  } else if (seq->num_output() >= seq->params.max_tokens || seq->num_tokens() >= config_.scheduler.max_model_len) {
    reason = FinishReason::kLength;
  }
  if (reason != FinishReason::kNone) {
    ev.finished = true;
    ev.finish_reason = reason;
    ev.stop_keeps_token = constraint_ends;
  }
  events->push_back(std::move(ev));
  return reason;
}

StatusOr<std::vector<TokenEvent>> Engine::step() {
  // Wall time of the whole step and of the model passes in it (target and draft): the rest is
  // the engine's host work (EngineStats: step_seconds - model_seconds).
  const Timer step_timer{&counters_.step_seconds};
  std::vector<TokenEvent> events;
  events.reserve(static_cast<size_t>(scheduler_->num_running()) + 1);  // one per running sequence, mostly
  apply_aborts(&events);
  if (async_) {
    if (num_host_seqs_ == 0) {
      step_async(&events);
      return events;
    }
    // A synchronous step needs every token on the host: the in-flight step first.
    if (inflight_) (void)collect_inflight(&events);
  }
  if (spec_) {
    const Timer draft_timer{&counters_.model_seconds};
    Status st = spec_->propose(scheduler_->running(), config_.eos_token_ids);
    // Drafting is an optimisation: without drafts the step is a plain decode step.
    if (!st.ok() && counters_.spec_errors++ == 0)
      LOG_WARN("speculative drafting failed (continuing without): " << st.to_string());
  }
  SchedulerOutput out = scheduler_->schedule();
  counters_.preemptions = scheduler_->total_preemptions();
  for (Sequence* p : out.preempted) {
    if (spec_) spec_->release(p->id);
    p->spec_tokens.clear();
    p->spec_dists.clear();
  }
  if (out.empty()) return events;
  const auto scheduled_at = std::chrono::steady_clock::now();
  for (const ScheduledSeq& s : out.scheduled)
    if (s.seq->first_scheduled == std::chrono::steady_clock::time_point{}) s.seq->first_scheduled = scheduled_at;
  BatchStorage storage;
  const std::vector<RunnerSeq> batch = runner_batch(out, &storage);
  // The step cost model is fitted only when steps are timed (before the step moves num_computed).
  const bool timed = config_.scheduler.max_step_ms > 0;
  StepFeatures features;
  if (timed)
    for (const ScheduledSeq& s : out.scheduled) features.add_chunk(s.seq->num_computed, s.num_new_tokens);
  RunnerOutput ro;
  Status st;
  {
    const Timer model_timer{&counters_.model_seconds};
    st = runner_->execute(batch, &ro);
    const double seconds = model_timer.seconds();
    if (spec_) spec_->observe_target_step(out.num_batched_tokens, seconds);
    if (timed && st.ok()) {
      log_timed_step(features, step_cost_, 1e3 * seconds);
      step_cost_.observe(features, 1e3 * seconds);
    }
  }
  counters_.steps++;
  counters_.iteration_tokens.observe(static_cast<double>(out.num_batched_tokens));
  if (!st.ok()) {
    // The step's sequences end with finish_reason error; everything else carries on.
    for (const ScheduledSeq& s : out.scheduled) finish(s.seq, FinishReason::kError, &events, true);
    last_error_ = st;
    return events;
  }
  keep_prompt_logprobs(batch, out, &ro);
  update(out, take_results(out, batch, &ro), &events);
  finish_embeddings(batch, out, &ro, &events);
  return events;
}

void Engine::add_prompt_rows(const Sequence& seq, RunnerSeq* r, std::vector<int32_t>* offsets) const {
  SeqStepInput& in = r->input;
  const int64_t n = static_cast<int64_t>(in.tokens.size());
  // Position p = start + j scores prompt token p + 1.
  const int64_t m = std::clamp<int64_t>(seq.prompt_len - 1 - in.start_pos, 0, n);
  for (int64_t j = 0; j < m; ++j) offsets->push_back(static_cast<int32_t>(j));
  if (in.need_logits && (offsets->empty() || offsets->back() != n - 1)) offsets->push_back(static_cast<int32_t>(n - 1));
  in.logits_offsets = *offsets;
  r->prompt_targets = std::span<const int32_t>(seq.tokens).subspan(static_cast<size_t>(in.start_pos + 1),
                                                                     static_cast<size_t>(m));
  r->prompt_top = seq.params.prompt_logprobs;
}

void Engine::finish_embeddings(std::span<const RunnerSeq> batch, const SchedulerOutput& out, RunnerOutput* ro,
                               std::vector<TokenEvent>* events) {
  for (size_t i = 0; i < batch.size(); ++i) {
    if (!batch[i].input.want_hidden) continue;
    Sequence* seq = out.scheduled[i].seq;
    TokenEvent ev;
    ev.request_id = seq->request_id;
    ev.index = seq->index;
    ev.finished = true;
    ev.finish_reason = FinishReason::kStop;
    ev.prompt_tokens = static_cast<int32_t>(seq->prompt_len);
    ev.cached_prompt_tokens = static_cast<int32_t>(seq->num_cached_prompt);
    ev.first_scheduled = seq->first_scheduled;
    ev.embedding = std::move(ro->embeddings[i]);
    events->push_back(std::move(ev));
    finish(seq, FinishReason::kStop, nullptr, /*emit=*/false);
  }
}

void Engine::keep_prompt_logprobs(std::span<const RunnerSeq> batch, const SchedulerOutput& out, RunnerOutput* ro) {
  for (size_t i = 0; i < batch.size(); ++i) {
    std::vector<PromptLogprob>& rows = ro->prompt_logprobs[i];
    if (rows.empty()) continue;
    Sequence* seq = out.scheduled[i].seq;
    seq->prompt_logprobs.resize(static_cast<size_t>(seq->prompt_len - 1));
    const size_t start = static_cast<size_t>(batch[i].input.start_pos);
    for (size_t k = 0; k < rows.size(); ++k) seq->prompt_logprobs[start + k] = std::move(rows[k]);
  }
}

std::vector<RunnerSeq> Engine::runner_batch(const SchedulerOutput& out, BatchStorage* storage,
                                            std::vector<TokenFeed>* feeds) {
  const size_t n = out.scheduled.size();
  std::vector<RunnerSeq> batch(n);
  storage->spec_inputs.resize(n);
  storage->prompt_offsets.resize(n);
  if (feeds) {
    // fed_inputs never grows past this, so the spans into it stay valid.
    size_t fed = 0;
    for (const ScheduledSeq& s : out.scheduled)
      if (s.num_spec_tokens == 0 && s.seq->num_computed + s.num_new_tokens > s.seq->num_tokens())
        fed += static_cast<size_t>(s.num_new_tokens);
    storage->fed_inputs.reserve(fed);
    feeds->reserve(n);
  }
  int64_t flat = 0;  // the step's new tokens before sequence i
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    const ScheduledSeq& s = out.scheduled[i];
    Sequence* seq = s.seq;
    RunnerSeq& r = batch[i];
    SeqStepInput& in = r.input;
    in.start_pos = seq->num_computed;
    in.block_table = kv_->block_table(seq->id);
    in.lora_slot = seq->lora ? seq->lora->slot : -1;
    if (s.num_spec_tokens > 0) {
      std::vector<int32_t>& t = storage->spec_inputs[i];
      t.push_back(seq->tokens.back());
      t.insert(t.end(), seq->spec_tokens.begin(), seq->spec_tokens.begin() + s.num_spec_tokens);
      in.tokens = t;
      in.need_logits = true;
      in.num_logits = static_cast<int32_t>(t.size());
      r.verify = true;
    } else {
      const int64_t end = seq->num_computed + s.num_new_tokens;
      if (end > seq->num_tokens() && feeds) {
        // The last new token is in flight (only the last can be: at most one per sequence
        // when it is scheduled): a placeholder the device overwrites with the previous step's
        // draw.
        std::vector<int32_t>& t = storage->fed_inputs;
        const size_t at = t.size();
        t.insert(t.end(), seq->tokens.begin() + seq->num_computed, seq->tokens.end());
        t.push_back(0);
        in.tokens = std::span<const int32_t>(t).subspan(at);
        feeds->push_back({static_cast<int32_t>(flat + s.num_new_tokens - 1), seq->inflight_sample});
      } else {
        in.tokens = std::span<const int32_t>(seq->tokens).subspan(seq->num_computed, s.num_new_tokens);
      }
      in.need_logits = end == seq->num_tokens_with_inflight();
      r.embed = seq->embed;
      in.want_hidden = seq->embed && in.need_logits;
      if (seq->scores_prompt()) add_prompt_rows(*seq, &r, &storage->prompt_offsets[i]);
    }
    r.params = &seq->params;
    r.ctx.prompt_tokens = std::span<const int32_t>(seq->tokens).first(seq->prompt_len);
    r.ctx.output_tokens = std::span<const int32_t>(seq->tokens).subspan(seq->prompt_len);
    r.ctx.eos_token_ids = config_.eos_token_ids;
    r.ctx.seed = seq->seed;
    r.ctx.pending_outputs = seq->num_inflight;
    if (seq->constraint && !r.verify && r.samples()) {
      constrain_row(seq);
      r.ctx.allowed_tokens = seq->allowed_tokens;
    }
    if (seq->num_computed < seq->prompt_len)
      counters_.prompt_tokens_computed += std::min(s.num_new_tokens, seq->prompt_len - seq->num_computed);
    flat += static_cast<int64_t>(in.tokens.size());
  }
  return batch;
}

Engine::StepResults Engine::take_results(SchedulerOutput& out, std::span<const RunnerSeq> batch,
                                         RunnerOutput* ro) {
  // Each sequence that read logits: its sampled token, or the verified run of its drafts.
  const int64_t vocab = runner_->vocab_size();
  StepResults results;
  results.flat.reserve(out.scheduled.size());
  results.start.reserve(out.scheduled.size() + 1);
  for (size_t i = 0; i < out.scheduled.size(); ++i) {
    results.start.push_back(results.flat.size());
    ScheduledSeq& s = out.scheduled[i];
    if (!batch[i].verify && !batch[i].samples()) continue;
    if (!batch[i].verify) {
      results.flat.push_back(std::move(ro->samples[i]));
      continue;
    }
    const float* base = ro->verify_logits.data() + ro->verify_row[i] * vocab;
    const int32_t nd = static_cast<int32_t>(s.num_spec_tokens);
    VerifyResult v = spec_->verify(s.seq, nd, std::span<const float>(base, (nd + 1) * vocab), vocab,
                                   config_.eos_token_ids);
    s.num_new_tokens = 1 + v.num_accepted;
    for (SampleResult& r : v.tokens) results.flat.push_back(std::move(r));
  }
  results.start.push_back(results.flat.size());
  return results;
}

void Engine::update(const SchedulerOutput& out, StepResults results, std::vector<TokenEvent>* events) {
  // Append the new tokens first, so that num_computed (lowered to the verified tokens: the
  // rejected drafts' KV is rolled back) and the prefix-cache keys see the final token list.
  for (size_t i = 0; i < results.size(); ++i)
    for (const SampleResult& r : results.of(i)) out.scheduled[i].seq->tokens.push_back(r.token);
  scheduler_->on_step_done(out);
  for (size_t i = 0; i < results.size(); ++i) {
    const ScheduledSeq& s = out.scheduled[i];
    if (results.of(i).empty()) continue;
    if (s.num_spec_tokens > 0) spec_->on_tokens_appended(s.seq, static_cast<int32_t>(s.num_new_tokens - 1));
    s.seq->spec_tokens.clear();
    s.seq->spec_dists.clear();
  }
  for (const ScheduledSeq& s : out.scheduled)
    if (s.seq->num_computed >= s.seq->prompt_len) release_followers(s.seq->id);
  // Events, token by token: a stop (EOS, stop id, max_tokens, context) inside an accepted run
  // ends the sequence at that token; the tokens after it are dropped. (The output side cuts a
  // run at a stop string the same way, dropping the events after it.)
  for (size_t i = 0; i < results.size(); ++i) {
    Sequence* seq = out.scheduled[i].seq;
    const std::span<SampleResult> produced_results = results.of(i);
    const int64_t produced = static_cast<int64_t>(produced_results.size());
    const int64_t first = seq->num_tokens() - produced;
    FinishReason reason = FinishReason::kNone;
    for (int64_t j = 0; j < produced && reason == FinishReason::kNone; ++j) {
      // emit_token sees the sequence as it was right after this token.
      std::vector<int32_t> later(seq->tokens.begin() + first + j + 1, seq->tokens.end());
      seq->tokens.resize(first + j + 1);
      reason = emit_token(seq, std::move(produced_results[j]), events);
      seq->tokens.insert(seq->tokens.end(), later.begin(), later.end());
    }
    if (reason != FinishReason::kNone) finish(seq, reason, events, false);
  }
}

EngineStats Engine::stats() const {
  EngineStats s = counters_;
  s.num_running = scheduler_->num_running();
  s.num_waiting = scheduler_->num_waiting();
  s.kv_usage = kv_->usage();
  s.num_blocks = kv_->num_blocks();
  s.num_free_blocks = kv_->num_free_blocks();
  s.prefix_queries = kv_->prefix_query_tokens();
  s.prefix_hits = kv_->prefix_hit_tokens();
  s.preemptions = scheduler_->total_preemptions();
  s.block_size = kv_->block_size();
  s.kv_dtype = config_.kv_dtype;
  s.enable_prefix_caching = config_.enable_prefix_caching;
  if (kv_tier_) s.kv_offload = kv_tier_->stats();
  if (spec_) {
    const SpecStats ss = spec_->stats();
    s.spec_enabled = true;
    s.spec_num_drafts = ss.num_drafts;
    s.spec_draft_tokens = ss.draft_tokens;
    s.spec_accepted_tokens = ss.accepted_tokens;
    s.spec_accepted_per_pos = ss.accepted_per_pos;
    s.spec_current_k = ss.current_k;
    s.spec_acceptance_estimate = ss.acceptance_estimate;
  }
  return s;
}

}  // namespace lancet
