// One completion request in flight, between the HTTP handler and the AsyncEngine: encodes the
// prompts (chat template or text or token ids), enforces the context length, submits one
// engine request per prompt, and turns TokenEvents into the OpenAI response (collect()) or
// into SSE chunks (stream()). Waiting for events ends at the request's deadline (--timeout,
// counted from its arrival, however fast tokens flow) or when the client is gone; either
// aborts the request. The destructor cancels whatever is still running (its KV blocks are
// freed within one engine step) and reports the request's latencies to Metrics.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "guard/guard_scanner.h"
#include "server/guard_model.h"
#include "server/metrics.h"
#include "server/openai_json.h"
#include "server/serving_model.h"
#include "server/tool_call_parser.h"

namespace lancet::server {

class CompletionSession {
 public:
  using Clock = std::chrono::steady_clock;
  // Writes one SSE frame; false when the client is gone.
  using Writer = std::function<bool(const std::string&)>;

  // True once the client has closed its connection (checked every kClientCheckMs while waiting).
  using ClientGone = std::function<bool()>;
  static constexpr int64_t kClientCheckMs = 100;

  CompletionSession(ServingModel* model, Metrics* metrics, ApiRequest request, double timeout_s);
  ~CompletionSession();
  CompletionSession(const CompletionSession&) = delete;
  CompletionSession& operator=(const CompletionSession&) = delete;

  // Content rules (docs/GUARD.md): a blocked prompt fails submit() with 400 "content_filter";
  // output is released only up to what the rules have cleared, and a blocked output ends its
  // choice with finish_reason "content_filter", cut before the match.
  void set_guard(const guard::GuardRules* rules) { guard_ = rules; }
  // The guard model (--guard-model): classifies each prompt the rules let through; unsafe is a
  // 400 content_filter.
  void set_guard_model(const GuardModel* guard) { guard_model_ = guard; }
  // The engine priority of the request's sequences (engine/scheduler.h: lower runs first;
  // the Batch API's requests run at kBatchPriority). Before submit().
  void set_priority(int32_t priority) { priority_ = priority; }
  // Without one, a gone client is noticed only when a stream write fails.
  void set_client_gone(ClientGone check) { client_gone_ = std::move(check); }
  // Encodes, checks and submits. Errors: 400 bad prompt / too long, 503 shutting down, 429
  // engine full.
  std::optional<ApiError> submit();
  // Non-streaming: waits for every choice and returns the response body, or an error: 408
  // past the deadline, 499 when the client went away (nobody reads it; it is counted).
  std::optional<ApiError> collect(Json* response);
  // Streaming: writes every chunk, the usage chunk when asked, and [DONE]. Returns false when
  // the client went away (the destructor then cancels).
  bool stream(const Writer& write);

 private:
  struct Choice {
    std::string text;
    std::vector<TokenLogprobInfo> logprobs;
    std::string finish_reason;
    int64_t tokens = 0;
    // Speculative decoding, cumulative for this choice (events carry running totals).
    int64_t spec_draft_tokens = 0;
    int64_t spec_accepted_tokens = 0;
    Clock::time_point last_token;
    bool finished = false;
    std::unique_ptr<guard::GuardScanner> guard;  // null without rules
    size_t sent = 0;                             // bytes of text released to the client
    size_t hits_counted = 0;
    bool echoed = false;  // echo: the prompt text has been put before the output
    // Tool mode (tools given, tool_choice not "none"): output held while it may be a call,
    // and the calls it parsed into at the end.
    std::unique_ptr<ToolCallStream> tool_stream;
    std::vector<ToolCall> calls;
    // Streaming a required / named call: its arguments go out as they are sampled.
    std::unique_ptr<CallArgumentsStream> args_stream;
    std::string call_id;        // the streamed call's id (sent with its header)
    bool calls_streamed = false;  // the calls' deltas are already out
  };
  std::optional<ApiError> encode_prompts(std::vector<std::vector<int32_t>>* prompts);
  // Applies one event to its choice; fills the stream delta for it.
  void apply(size_t prompt, const TokenEvent& ev, ChunkFields* delta);
  enum class Next { kEvent, kEnded, kTimedOut, kClientGone };
  // Next event of prompt p, woken by the event's push; in between it wakes only for the
  // deadline, the client check and (streaming, `keepalive` set) keep-alive comments.
  Next next_event(size_t p, TokenEvent* ev, const Writer* keepalive);
  void cancel_all();
  // At a choice's end in tool mode: its output as tool calls (finish_reason "tool_calls"),
  // or the held text released as content.
  void finish_tool_calls(Choice& c, ChunkFields* delta);
  // Streaming an enforced call: the delta's new output as the call's header / arguments.
  void stream_arguments(Choice& c, ChunkFields* delta);
  void finish_streamed_call(Choice& c, ChunkFields* delta);
  // Streaming: the header and arguments chunks of a choice's calls.
  bool write_tool_calls(const Choice& c, int32_t index, const std::function<std::string(const ChunkFields&)>& chunk,
                        const Writer& write);
  // The prompt texts through the rules; the first block is the error.
  std::optional<ApiError> guard_prompts();
  std::optional<ApiError> classify_prompts();
  // Output text of a choice through its scanner; fills delta->content with what is cleared.
  void guard_output(size_t prompt, Choice& c, bool last, ChunkFields* delta);
  void count_hits(const std::vector<guard::Hit>& hits, size_t from, const char* where);
  std::string token_string(int32_t id) const;
  // Echo with logprobs: the prompt tokens' entries (the first with a null logprob); empty
  // when the prompt was not scored (the request ended first).
  std::vector<TokenLogprobInfo> echo_logprobs(size_t prompt) const;
  // prompt_logprobs of prompt p as vLLM sends it (null when it was not scored).
  Json prompt_logprobs_of(size_t prompt) const;
  Usage usage() const;
  bool chat() const { return req_.kind == ApiKind::kChat; }
  ApiError timeout_error() const;

  ServingModel* model_;
  Metrics* metrics_;
  ApiRequest req_;
  double timeout_s_;
  Clock::time_point start_;
  Clock::time_point deadline_;  // time_point::max() without a timeout
  ClientGone client_gone_;
  Clock::time_point next_client_check_;
  Clock::time_point first_token_{};
  bool have_first_token_ = false;
  Clock::time_point last_token_{};
  Clock::time_point first_scheduled_{};  // earliest over the request's sequences; unset: never scheduled
  int64_t max_tokens_ = 0;  // the effective max_tokens of the first prompt
  ResponseMeta meta_;
  std::vector<std::shared_ptr<RequestStream>> streams_;  // one per prompt
  std::vector<int64_t> prompt_lens_;
  std::vector<int64_t> cached_;  // per prompt
  // Per prompt: its ids as submitted, the text echo puts first, and the prompt logprobs
  // (choice 0's first event carries them).
  std::vector<std::vector<int32_t>> prompt_ids_;
  std::vector<std::string> echo_text_;
  std::vector<std::vector<PromptLogprob>> prompt_lp_;
  int64_t truncated_ = 0;  // prompt tokens dropped by truncate_prompt_tokens
  std::vector<Choice> choices_;  // prompt * n + index
  std::vector<double> itl_;
  bool model_error_ = false;
  bool timed_out_ = false;
  const guard::GuardRules* guard_ = nullptr;
  const GuardModel* guard_model_ = nullptr;
  int32_t priority_ = 0;
  double guard_seconds_ = 0;
  std::set<std::pair<int32_t, std::string>> guard_counted_;  // (rule, where) once per request
};

}  // namespace lancet::server
