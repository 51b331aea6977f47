// The engine step loop (DESIGN.md §2): schedule -> runner.execute (runner/model_runner.h:
// step metadata, forward, device/host sampling) -> verify drafts -> update (append, stop rules
// on token ids: end tokens, stop token ids, max_tokens, the context; events, frees). Token ids
// only: text, and the stop strings that need it, are the output side's (output/, called by
// AsyncEngine's loop through engine/output_stage.h). Synchronous and single-threaded (step()
// and finish_sequences() are called by one thread); abort() may be called from any thread and
// takes effect at the next step, which frees the sequence's blocks. AsyncEngine
// (async_engine.h) runs this loop on a thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <unordered_map>
#include <memory>
#include <mutex>
#include <random>
#include <span>
#include <string>
#include <vector>

#include "core/histogram.h"
#include "runner/model_executor.h"
#include "runner/model_runner.h"
#include "runner/sampler.h"
#include "engine/kv_tier.h"
#include "engine/lora_ref.h"
#include "engine/inflight_step.h"
#include "engine/scheduler.h"
#include "engine/sequence.h"
#include "engine/speculative.h"

namespace lancet {

struct EngineConfig {
  SchedulerConfig scheduler;
  bool enable_prefix_caching = true;
  std::vector<int32_t> eos_token_ids;  // the model's (generation_config) end tokens
  int32_t max_logprobs = 20;
  std::string model_id = "model";      // salts prefix-cache keys
  std::string kv_dtype = "f32";
  SpeculativeConfig speculative;       // off unless enabled (method draft needs a draft executor)
  BlockManagerConfig draft_kv;         // the draft model's block manager (num_blocks, block_size)
  double draft_cost_ratio = 1.0;       // draft / target weights: the draft's cost before it is measured
  // Asynchronous scheduling (engine/engine_async.cc): step N+1 is scheduled and launched
  // before step N's tokens reach the host; they feed N+1's inputs on the device, and the host
  // appends them, checks stops and emits their events one step later. Steps run
  // synchronously while a sequence needs the host every step (see needs_host_steps), and
  // always with speculative decoding.
  bool async_scheduling = false;
};

struct GenerationRequest {
  std::vector<int32_t> prompt;
  // The engine reads everything but `stop` and `include_stop_str_in_output`: stop strings
  // are matched on text, by the output side.
  SamplingParams params;
  int32_t priority = 0;
  // An embedding (pooling) request: the prompt is computed and no token is generated; the
  // final event carries the embedding (runner/pooling.h). n must be 1; sampling is unused.
  bool embed = false;
  // A LoRA adapter (engine/lora_ref.h) to compute it with; null: the base model.
  std::shared_ptr<const LoraRef> lora;
};

// One sequence of a request: its choice `index` (n > 1).
struct SequenceKey {
  int64_t request_id = 0;
  int32_t index = 0;
};

// One generated token (or the end) of one sequence.
struct TokenEvent {
  int64_t request_id = 0;
  int32_t index = 0;  // choice index (n > 1)
  int32_t token = -1;  // -1 when the event only reports the end (abort)
  float logprob = 0.0f;
  std::vector<TokenLogprob> top_logprobs;
  // Text released by this event: set by the output side (engine/output_stage.h) before the
  // event reaches its RequestStream; the engine leaves it empty.
  std::string text;
  bool finished = false;
  FinishReason finish_reason = FinishReason::kNone;
  // A stop at a token that is part of the output (a structured-output document completed by
  // it), unlike an end token or stop token id, which add no text.
  bool stop_keeps_token = false;
  int32_t prompt_tokens = 0;
  int32_t cached_prompt_tokens = 0;
  // When the engine first scheduled this sequence (its queue time ends there; a preemption
  // does not move it). Default-constructed when it never was (an abort while waiting).
  std::chrono::steady_clock::time_point first_scheduled{};
  // Speculative decoding, this sequence so far (set on every event): drafts verified and accepted.
  int32_t spec_draft_tokens = 0;
  int32_t spec_accepted_tokens = 0;
  // Prompt logprobs (params.prompt_logprobs >= 0): on choice 0's first token event only,
  // [prompt_len - 1], entry i scoring prompt token i + 1 (the first token has none).
  std::vector<PromptLogprob> prompt_logprobs;
  // Embedding requests: on the final event (finish reason stop), [hidden_size], unit length.
  std::vector<float> embedding;
};


// vLLM's buckets for tokens per engine step.
inline const std::vector<double> kIterationTokenBuckets = {1, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096, 8192, 16384};

struct EngineStats {
  int64_t num_running = 0;
  int64_t num_waiting = 0;
  double kv_usage = 0.0;
  int64_t num_blocks = 0;
  int64_t num_free_blocks = 0;
  int64_t prefix_queries = 0;  // tokens (vLLM's vllm:prefix_cache_queries)
  int64_t prefix_hits = 0;     // tokens taken from the prefix cache
  int64_t preemptions = 0;
  int64_t steps = 0;
  // Steps launched asynchronously (before the previous step's tokens reached the host).
  int64_t async_steps = 0;
  // Wall seconds in step() (steps that ran a model pass or found nothing to run), and the
  // part spent in model passes (the target's execute and the draft's proposals). The
  // difference is the engine's host work: scheduling, block tables, sampling bookkeeping on
  // device-sampled rows (all of sampling otherwise), stop checks on token ids.
  double step_seconds = 0;
  double model_seconds = 0;
  // Wall seconds of AsyncEngine's output thread (detokenization, stop strings, routing events
  // to their streams), which runs beside the loop's steps; zero from a bare Engine.
  double output_seconds = 0;
  int64_t prompt_tokens_computed = 0;
  int64_t generation_tokens = 0;
  // Tokens computed per step that ran a model pass (prompt + generated + draft tokens), in
  // vLLM's vllm:iteration_tokens_total buckets.
  Histogram iteration_tokens{kIterationTokenBuckets};
  // The cache's configuration (vllm:cache_config_info).
  int32_t block_size = 0;
  std::string kv_dtype;
  bool enable_prefix_caching = false;
  // Speculative decoding (zero when off); names follow vLLM's spec_decode metrics.
  bool spec_enabled = false;
  int64_t spec_num_drafts = 0;
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  std::vector<int64_t> spec_accepted_per_pos;
  int32_t spec_current_k = 0;
  double spec_acceptance_estimate = 0;
  int64_t spec_errors = 0;  // draft-model failures (those steps ran without drafts)
  // The shared prefix-KV tier (--kv-offload; enabled false without one).
  KvTierStats kv_offload;
};

// Whether a request's steps need the host every step, so that its steps run synchronously
// under asynchronous scheduling: host logits (logprobs, logit_bias, penalties, min_tokens
// masking, a structured-output mask that follows the previous token), prompt logprobs, or an
// embedding.
bool needs_host_steps(const GenerationRequest& req);

class Engine {
 public:
  // draft: the draft model for speculative method draft (not owned; null otherwise).
  Engine(const EngineConfig& config, ModelExecutor* model, ModelExecutor* draft = nullptr);
  ~Engine();

  // Validates and queues a request; returns its id. Bad input (empty prompt, prompt +
  // max_tokens past max_model_len, params out of range) is an InvalidArgument.
  StatusOr<int64_t> add_request(const GenerationRequest& req);
  // Thread-safe; the request's sequences end with finish_reason abort at the next step.
  void abort(int64_t request_id);
  // Runs one step; returns the events it produced. A model failure ends the step's sequences
  // with finish_reason error (reported as events; last_error() says why); the engine stays
  // usable for everything else.
  StatusOr<std::vector<TokenEvent>> step();
  bool has_work() const;
  // Ends these sequences now, finish reason stop, without an event (the output side has
  // already given each its final one: a stop string completed); their blocks are free when it
  // returns. Sequences that have already ended are skipped. Called between steps by the
  // thread that calls step().
  void finish_sequences(std::span<const SequenceKey> seqs);
  EngineStats stats() const;
  // The shared prefix-KV tier (not owned; outlives the engine): computed blocks are stored
  // in it, and admission loads the blocks after a local prefix-cache miss from it. Set before
  // the first step; needs prefix caching.
  void set_kv_tier(KvTier* tier);
  const EngineConfig& config() const { return config_; }
  const Status& last_error() const { return last_error_; }

 private:
  void finish(Sequence* seq, FinishReason reason, std::vector<TokenEvent>* events, bool emit);
  void apply_aborts(std::vector<TokenEvent>* events);
  // Appends one sampled token's event and applies the stop rules on token ids; returns the
  // finish reason (kNone to go on).
  FinishReason emit_token(Sequence* seq, SampleResult r, std::vector<TokenEvent>* events);
  // Fills seq->allowed_tokens from its constraint for the row it samples this step.
  void constrain_row(Sequence* seq) const;
  // Queues the choices that waited for `leader` to compute their shared prompt.
  void release_followers(SeqId leader);
  // What a step's runner batch points into, kept for the step.
  struct BatchStorage {
    std::vector<std::vector<int32_t>> spec_inputs;     // [last token, drafts...] of a verifying sequence
    std::vector<int32_t> fed_inputs;                   // new tokens whose last is in flight (a stand-in id), in turn
    std::vector<std::vector<int32_t>> prompt_offsets;  // logits rows of a sequence that scores its prompt
  };
  // The step, after scheduling: the scheduled sequences as the runner reads them, the runner's
  // tokens and verified draft runs per sequence, and the update (append, stop rules, events,
  // frees). Under asynchronous scheduling a sequence's last new token may be in flight: its
  // input ends in a stand-in id that the device replaces with the sampled token (the inputs in
  // fed_inputs, one array for the step), and `feeds` names where (null: synchronous step).
  std::vector<RunnerSeq> runner_batch(const SchedulerOutput& out, BatchStorage* storage,
                                      std::vector<TokenFeed>* feeds = nullptr);
  // A prompt chunk of a sequence that scores its prompt: logits rows at every position whose
  // next token is a prompt token, plus the last when it samples. offsets holds the rows.
  void add_prompt_rows(const Sequence& seq, RunnerSeq* r, std::vector<int32_t>* offsets) const;
  // Ends the embedding sequences whose prompt this step completed, with their embedding.
  void finish_embeddings(std::span<const RunnerSeq> batch, const SchedulerOutput& out, RunnerOutput* ro,
                         std::vector<TokenEvent>* events);
  // Keeps the prompt rows the runner scored in the sequence.
  void keep_prompt_logprobs(std::span<const RunnerSeq> batch, const SchedulerOutput& out, RunnerOutput* ro);
  // The step's new tokens, sequence by sequence in one array (no allocation per sequence):
  // scheduled sequence i's are of(i), none when it read no logits.
  struct StepResults {
    std::vector<SampleResult> flat;
    std::vector<size_t> start;  // [sequences + 1] offsets into flat
    size_t size() const { return start.empty() ? 0 : start.size() - 1; }
    std::span<SampleResult> of(size_t i) { return {flat.data() + start[i], start[i + 1] - start[i]}; }
  };
  StepResults take_results(SchedulerOutput& out, std::span<const RunnerSeq> batch, RunnerOutput* ro);
  void update(const SchedulerOutput& out, StepResults results, std::vector<TokenEvent>* events);
  // Wall time of a scope, added to *total on exit.
  struct Timer {
    double* total;
    std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
    double seconds() const { return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(); }
    ~Timer() { *total += seconds(); }
  };
  // Asynchronous scheduling (engine_async.cc).
  // Schedules and launches the next step, then collects the one launched before it.
  void step_async(std::vector<TokenEvent>* events);
  std::unique_ptr<InflightStep> launch_async(SchedulerOutput& out, std::vector<TokenEvent>* events);
  // The in-flight step's tokens: appended, stop rules, events; sequences that ended since its
  // launch drop theirs. A failure ends its sequences with finish_reason error.
  Status collect_inflight(std::vector<TokenEvent>* events);

  EngineConfig config_;
  ModelExecutor* model_;
  std::unique_ptr<ModelRunner> runner_;  // over model_
  std::unique_ptr<KvCacheManager> kv_;
  std::unique_ptr<Scheduler> scheduler_;
  StepCostModel step_cost_;  // with max_step_ms: fitted to the target's passes, times the steps
  KvTier* kv_tier_ = nullptr;
  std::unique_ptr<Speculator> spec_;  // null when speculative decoding is off
  // Looked up for every sequence of every step: hashed, not ordered (nothing walks them in order).
  std::unordered_map<SeqId, std::unique_ptr<Sequence>> seqs_;
  std::unordered_map<int64_t, std::vector<SeqId>> requests_;
  std::map<SeqId, std::vector<SeqId>> followers_;  // n > 1: choices waiting for choice 0's prompt
  int64_t next_request_ = 1;
  SeqId next_seq_ = 1;
  uint64_t arrivals_ = 0;
  std::mutex abort_mu_;
  std::vector<int64_t> pending_aborts_;
  std::random_device seed_source_;
  EngineStats counters_;
  Status last_error_;
  bool async_ = false;            // config_.async_scheduling without speculative decoding
  int64_t num_host_seqs_ = 0;     // live sequences with host_steps
  std::unique_ptr<InflightStep> inflight_;
  std::chrono::steady_clock::time_point last_collect_{};  // when the last in-flight step was collected
};

}  // namespace lancet
