// CompletionSession: prompt encoding, context-length check, submission, event collection and
// streaming for one chat or completions request (see completion_session.h).
#include "server/completion_session.h"

#include <algorithm>
#include <cstdio>
#include <ctime>

#include "core/logging.h"
#include "engine/request_checks.h"
#include "server/sse.h"

namespace lancet::server {
namespace {

// Silence before a ": keep-alive" comment (lets proxies and clients see the stream is alive).
constexpr std::chrono::milliseconds kKeepalive{2000};

double seconds(CompletionSession::Clock::duration d) { return std::chrono::duration<double>(d).count(); }

ApiError from_status(const Status& st, const std::string& param) {
  switch (st.code()) {
    case StatusCode::kFailedPrecondition:
      return server_error(503, st.message(), "service_unavailable");
    case StatusCode::kResourceExhausted:
      return server_error(429, st.message(), "rate_limit_error");
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kNotFound:
    case StatusCode::kUnimplemented:
      return bad_request(st.message(), param);
    default:
      return server_error(500, st.message(), "internal_error");
  }
}

}  // namespace

CompletionSession::CompletionSession(ServingModel* model, Metrics* metrics, ApiRequest request, double timeout_s)
    : model_(model), metrics_(metrics), req_(std::move(request)), timeout_s_(timeout_s), start_(Clock::now()) {
  deadline_ = timeout_s_ > 0 ? start_ + std::chrono::duration_cast<Clock::duration>(
                                            std::chrono::duration<double>(timeout_s_))
                             : Clock::time_point::max();
  next_client_check_ = start_;
  meta_.id = new_response_id(chat() ? "chatcmpl-" : "cmpl-");
  meta_.created = static_cast<int64_t>(std::time(nullptr));
  meta_.model = req_.lora ? req_.lora->name : model_->name();
}

CompletionSession::~CompletionSession() {
  for (auto& s : streams_)
    if (s && !s->done()) s->cancel();
  if (guard_ && metrics_) metrics_->observe_guard_seconds(guard_seconds_);
  if (streams_.empty() || !metrics_) return;
  RequestObservation obs;
  if (have_first_token_) obs.ttft_s = seconds(first_token_ - start_);
  obs.itl_s = std::move(itl_);
  obs.e2e_s = seconds(Clock::now() - start_);
  for (int64_t len : prompt_lens_) obs.prompt_tokens += len;
  for (const Choice& c : choices_) obs.generation_tokens += c.tokens;
  // vLLM's phases: queued until first scheduled, prefill until the first token, decode until
  // the last; inference = prefill + decode. Absent for a phase the request never reached.
  if (first_scheduled_ != Clock::time_point{}) {
    obs.queue_s = seconds(first_scheduled_ - start_);
    if (have_first_token_) {
      obs.prefill_s = seconds(first_token_ - first_scheduled_);
      obs.decode_s = seconds(last_token_ - first_token_);
      obs.inference_s = seconds(last_token_ - first_scheduled_);
    }
  }
  obs.params_n = req_.params.n;
  obs.params_max_tokens = max_tokens_;
  obs.finish_reason = "abort";
  if (!choices_.empty() && choices_[0].finished) obs.finish_reason = choices_[0].finish_reason;
  metrics_->record(obs);
}

std::optional<ApiError> CompletionSession::encode_prompts(std::vector<std::vector<int32_t>>* prompts) {
  const std::string param = chat() ? "messages" : "prompt";
  if (chat()) {
    const bool tools = req_.tools.given() || has_tool_turns(req_.messages);
    const ChatEnding ending{req_.add_generation_prompt, req_.continue_final_message};
    auto ids = tools ? model_->encode_chat_with_tools(req_.messages, req_.tools.tools_json, ending)
                     : model_->encode_chat(req_.messages, ending);
    if (!ids.ok()) return bad_request("messages: " + ids.status().message(), param);
    prompts->push_back(std::move(*ids));
  } else {
    for (const std::string& text : req_.text_prompts) {
      if (!model_->has_tokenizer())
        return bad_request("this model has no tokenizer; send the prompt as token ids", param);
      auto ids = model_->encode(text, /*add_special_tokens=*/true);
      if (!ids.ok()) return bad_request(ids.status().message(), param);
      prompts->push_back(std::move(*ids));
    }
    for (auto& ids : req_.token_prompts) {
      const Status st = check_token_ids(ids, model_->vocab_size());
      if (!st.ok()) return bad_request(st.message(), param);
      prompts->push_back(std::move(ids));
    }
  }
  for (const auto& ids : *prompts)
    if (ids.empty()) return bad_request("the prompt is empty", param);
  return std::nullopt;
}

void CompletionSession::count_hits(const std::vector<guard::Hit>& hits, size_t from, const char* where) {
  for (size_t i = from; i < hits.size(); ++i) {
    if (!guard_counted_.emplace(hits[i].rule, where).second || !metrics_) continue;
    const guard::GuardRules::Rule& r = guard_->rules()[static_cast<size_t>(hits[i].rule)];
    metrics_->count_guard_match(r.id, guard::action_name(r.action), where);
  }
}

std::optional<ApiError> CompletionSession::guard_prompts() {
  std::vector<std::string> texts;
  if (chat()) {
    std::string all;
    for (const auto& m : req_.messages) {
      if (!m.contains("content") || !m["content"].is_string()) continue;
      if (!all.empty()) all += '\n';
      all += m["content"].get<std::string>();
    }
    texts.push_back(std::move(all));
  } else {
    texts = req_.text_prompts;
    if (model_->has_tokenizer())
      for (const auto& ids : req_.token_prompts) texts.push_back(model_->decode(ids));
  }
  const Clock::time_point t0 = Clock::now();
  std::optional<ApiError> err;
  for (const std::string& t : texts) {
    const guard::Verdict v = guard::scan_text(*guard_, t);
    count_hits(v.hits, 0, "prompt");
    if (v.block && !err) {
      const std::string& id = guard_->rules()[static_cast<size_t>(v.block->rule)].id;
      err = ApiError{400, "the prompt was blocked by content rule '" + id + "'", "invalid_request_error",
                     chat() ? "messages" : "prompt", "content_filter"};
    }
  }
  guard_seconds_ += seconds(Clock::now() - t0);
  return err;
}

void CompletionSession::guard_output(size_t prompt, Choice& c, bool last, ChunkFields* delta) {
  const Clock::time_point t0 = Clock::now();
  const size_t seen = static_cast<size_t>(c.guard->bytes_seen());
  c.guard->feed(std::string_view(c.text).substr(seen));
  if (last) c.guard->finish();
  count_hits(c.guard->hits(), c.hits_counted, "output");
  c.hits_counted = c.guard->hits().size();
  guard_seconds_ += seconds(Clock::now() - t0);
  if (const auto& block = c.guard->block()) {
    c.text.resize(static_cast<size_t>(block->start));
    delta->content = c.text.substr(std::min(c.sent, c.text.size()));
    c.sent = c.text.size();
    c.finished = true;
    c.finish_reason = "content_filter";
    delta->finish_reason = c.finish_reason;
    // The engine request ends (and frees its KV) once none of its choices is still wanted.
    const size_t n = static_cast<size_t>(req_.params.n);
    bool all = true;
    for (size_t i = prompt * n; i < (prompt + 1) * n; ++i) all = all && choices_[i].finished;
    if (all) streams_[prompt]->cancel();
    return;
  }
  const size_t release = last ? c.text.size() : static_cast<size_t>(c.guard->safe_end());
  if (release > c.sent) {
    delta->content = c.text.substr(c.sent, release - c.sent);
    c.sent = release;
  }
}

// The guard model on what the rules passed: a chat request's messages as its conversation, each
// completion prompt as one user turn (token-id prompts decoded first). A guard that cannot
// answer lets the prompt through, counted as "error" and logged: the rules still apply.
std::optional<ApiError> CompletionSession::classify_prompts() {
  std::vector<nlohmann::ordered_json> conversations;
  auto user_turn = [](const std::string& text) {
    return nlohmann::ordered_json::array({{{"role", "user"}, {"content", text}}});
  };
  if (chat()) {
    conversations.push_back(req_.messages);
  } else {
    for (const std::string& t : req_.text_prompts) conversations.push_back(user_turn(t));
    if (model_->has_tokenizer())
      for (const auto& ids : req_.token_prompts) conversations.push_back(user_turn(model_->decode(ids)));
  }
  for (const auto& conv : conversations) {
    const Clock::time_point t0 = Clock::now();
    auto v = guard_model_->classify(conv);
    if (!v.ok()) {
      LOG_WARN("guard model '" << guard_model_->name() << "': " << v.status().message() << "; the prompt passes");
      if (metrics_) metrics_->count_guard_model("error", {}, seconds(Clock::now() - t0));
      continue;
    }
    if (metrics_) metrics_->count_guard_model(verdict_name(v->kind), v->categories, v->seconds);
    if (v->kind != GuardVerdict::Kind::kUnsafe) continue;
    std::string cats;
    for (const std::string& c : v->categories) cats += (cats.empty() ? "" : ", ") + c;
    return ApiError{400,
                    "the prompt was blocked by the guard model" + (cats.empty() ? "" : " (categories " + cats + ")"),
                    "invalid_request_error", chat() ? "messages" : "prompt", "content_filter"};
  }
  return std::nullopt;
}

std::optional<ApiError> CompletionSession::submit() {
  if (guard_)
    if (auto e = guard_prompts()) return e;
  if (guard_model_)
    if (auto e = classify_prompts()) return e;
  std::vector<std::vector<int32_t>> prompts;
  if (auto e = encode_prompts(&prompts)) return e;
  const int64_t max_len = model_->max_model_len();
  const std::string param = chat() ? "messages" : "prompt";
  std::vector<GenerationRequest> gens;
  for (auto& ids : prompts) {
    // truncate_prompt_tokens keeps the last K tokens (left truncation, as vLLM does).
    const int64_t keep = req_.truncate_prompt_tokens;
    const bool truncated = keep > 0 && static_cast<int64_t>(ids.size()) > keep;
    if (truncated) {
      truncated_ += static_cast<int64_t>(ids.size()) - keep;
      ids.erase(ids.begin(), ids.end() - keep);
    }
    const int64_t len = static_cast<int64_t>(ids.size());
    GenerationRequest g;
    g.params = req_.params;
    g.lora = req_.lora;
    g.priority = priority_;
    int64_t max_tokens = req_.max_tokens_set ? req_.params.max_tokens : (chat() ? max_len - len : 16);
    if (!req_.max_tokens_set) max_tokens = std::min<int64_t>(max_tokens, std::max<int64_t>(max_len - len, 1));
    const Status fits = check_context_length(len, max_tokens, max_len, param);
    if (!fits.ok()) return ApiError{400, fits.message(), "invalid_request_error", param, "context_length_exceeded"};
    g.params.max_tokens = static_cast<int32_t>(max_tokens);
    if (gens.empty()) max_tokens_ = max_tokens;
    g.params.min_tokens = std::min(g.params.min_tokens, g.params.max_tokens);
    prompt_lens_.push_back(len);
    if (req_.echo) {
      const size_t i = prompt_ids_.size();
      echo_text_.push_back(i < req_.text_prompts.size() && !truncated ? req_.text_prompts[i] : model_->decode(ids));
    }
    prompt_ids_.push_back(ids);
    g.prompt = std::move(ids);
    gens.push_back(std::move(g));
  }
  for (const auto& g : gens) {
    auto s = model_->engine().submit(g);
    if (!s.ok()) {
      for (auto& prev : streams_) prev->cancel();
      streams_.clear();
      return from_status(s.status(), param);
    }
    streams_.push_back(std::move(*s));
  }
  cached_.assign(streams_.size(), 0);
  prompt_lp_.assign(streams_.size(), {});
  choices_.resize(streams_.size() * static_cast<size_t>(req_.params.n));
  if (guard_)
    for (Choice& c : choices_) c.guard = std::make_unique<guard::GuardScanner>(guard_);
  if (chat() && req_.tools.active()) {
    for (Choice& c : choices_) {
      if (req_.stream && req_.tools.enforced()) c.args_stream = std::make_unique<CallArgumentsStream>();
      else c.tool_stream = std::make_unique<ToolCallStream>(req_.tools.enforced());
    }
  }
  return std::nullopt;
}

void CompletionSession::apply(size_t prompt, const TokenEvent& ev, ChunkFields* delta) {
  const size_t idx = prompt * static_cast<size_t>(req_.params.n) + static_cast<size_t>(ev.index);
  assert(idx < choices_.size());
  Choice& c = choices_[idx];
  delta->index = static_cast<int32_t>(idx);
  if (c.finished) return;  // cut by the content rules; the engine request is ending
  const Clock::time_point now = Clock::now();
  cached_[prompt] = std::max<int64_t>(cached_[prompt], ev.cached_prompt_tokens);
  c.spec_draft_tokens = std::max<int64_t>(c.spec_draft_tokens, ev.spec_draft_tokens);
  c.spec_accepted_tokens = std::max<int64_t>(c.spec_accepted_tokens, ev.spec_accepted_tokens);
  if (!ev.prompt_logprobs.empty()) prompt_lp_[prompt] = ev.prompt_logprobs;
  const size_t text_offset = c.text.size();
  if (ev.first_scheduled != Clock::time_point{} &&
      (first_scheduled_ == Clock::time_point{} || ev.first_scheduled < first_scheduled_))
    first_scheduled_ = ev.first_scheduled;
  // Echo: the prompt text (and its tokens' logprobs) comes before the choice's first output.
  std::string echo;
  std::vector<TokenLogprobInfo> fresh;  // this event's logprob entries
  if (req_.echo && !c.echoed) {
    c.echoed = true;
    echo = echo_text_[prompt];
    if (req_.want_logprobs) fresh = echo_logprobs(prompt);
  }
  if (ev.token >= 0) {
    if (!have_first_token_) {
      have_first_token_ = true;
      first_token_ = now;
    }
    if (c.tokens > 0) itl_.push_back(seconds(now - c.last_token));
    c.last_token = now;
    last_token_ = now;
    ++c.tokens;
    if (req_.want_logprobs) {
      TokenLogprobInfo info{token_string(ev.token), ev.logprob, {}};
      for (const TokenLogprob& t : ev.top_logprobs) info.top.push_back({token_string(t.token), t.logprob});
      fresh.push_back(std::move(info));
    }
  }
  if (!fresh.empty()) {
    delta->logprobs = chat() ? chat_logprobs_json(fresh) : completion_logprobs_json(fresh, text_offset);
    c.logprobs.insert(c.logprobs.end(), std::make_move_iterator(fresh.begin()), std::make_move_iterator(fresh.end()));
  }
  c.text += echo;
  c.text += ev.text;
  if (c.guard) {
    guard_output(prompt, c, ev.finished, delta);
  } else {
    delta->content = echo + ev.text;
  }
  if (c.tool_stream) delta->content = c.tool_stream->feed(delta->content);
  if (c.args_stream) stream_arguments(c, delta);
  if (c.finished) {  // cut by the content rules: what was held is plain content
    if (c.tool_stream) delta->content += c.tool_stream->finish();
    if (c.args_stream && !c.args_stream->started()) delta->content = c.text;
    return;
  }
  if (ev.finished) {
    c.finished = true;
    c.finish_reason = finish_reason_name(ev.finish_reason);
    if (c.tool_stream || c.args_stream) finish_tool_calls(c, delta);
    delta->finish_reason = c.finish_reason;
    if (ev.finish_reason == FinishReason::kError) model_error_ = true;
  }
}

CompletionSession::Next CompletionSession::next_event(size_t p, TokenEvent* ev, const Writer* keepalive) {
  Clock::time_point last_event = Clock::now();
  for (;;) {
    // Checked before every event too: tokens arriving back to back never delay the deadline
    // or the client check.
    const Clock::time_point now = Clock::now();
    if (now >= deadline_) return Next::kTimedOut;
    if (client_gone_ && now >= next_client_check_) {
      if (client_gone_()) return Next::kClientGone;
      next_client_check_ = now + std::chrono::milliseconds(kClientCheckMs);
    }
    if (keepalive && now - last_event >= kKeepalive) {
      if (!(*keepalive)(sse_comment("keep-alive"))) return Next::kClientGone;
      last_event = now;
    }
    Clock::time_point wake = deadline_;
    if (client_gone_) wake = std::min(wake, next_client_check_);
    if (keepalive) wake = std::min(wake, last_event + kKeepalive);
    switch (streams_[p]->next_until(ev, wake)) {
      case RequestStream::Wait::kEvent:
        return Next::kEvent;
      case RequestStream::Wait::kEnded:
        return Next::kEnded;
      case RequestStream::Wait::kTimedOut:
        break;
    }
  }
}

void CompletionSession::stream_arguments(Choice& c, ChunkFields* delta) {
  const CallArgumentsStream::Piece p = c.args_stream->feed(delta->content);
  delta->content.clear();
  if (p.name_ready) {
    c.call_id = new_response_id("chatcmpl-tool-");
    delta->tool_calls = tool_call_header_json(0, ToolCall{c.call_id, p.name, ""});
  }
  if (p.arguments.empty()) return;
  if (p.name_ready) delta->tool_calls[0]["function"]["arguments"] = p.arguments;
  else delta->tool_calls = tool_call_arguments_json(0, p.arguments);
}

// The end of a streamed enforced call: the rest of its arguments. A call cut short (length)
// keeps its finish_reason, as OpenAI's truncated calls do; output that never began a call
// (cut before the name) is content.
void CompletionSession::finish_streamed_call(Choice& c, ChunkFields* delta) {
  const std::string rest = c.args_stream->finish();
  auto calls = c.finish_reason == "error" ? std::nullopt : parse_tool_calls(c.text, req_.tools.names());
  if (!c.args_stream->started()) {
    if (!calls) delta->content = c.text;
    return;
  }
  if (!rest.empty() && delta->tool_calls.is_null()) delta->tool_calls = tool_call_arguments_json(0, rest);
  else if (!rest.empty()) delta->tool_calls[0]["function"]["arguments"] =
      delta->tool_calls[0]["function"]["arguments"].get<std::string>() + rest;
  c.calls_streamed = true;
  if (!calls) return;
  calls->resize(1);
  (*calls)[0].id = c.call_id;
  c.calls = std::move(*calls);
  c.finish_reason = "tool_calls";
}

void CompletionSession::finish_tool_calls(Choice& c, ChunkFields* delta) {
  if (c.args_stream) return finish_streamed_call(c, delta);
  const std::string held = c.tool_stream->finish();
  auto calls = c.finish_reason == "error" ? std::nullopt : parse_tool_calls(c.text, req_.tools.names());
  if (!calls) {
    delta->content += held;
    return;
  }
  if (!req_.tools.parallel && calls->size() > 1) calls->resize(1);
  for (ToolCall& t : *calls) t.id = new_response_id("chatcmpl-tool-");
  c.calls = std::move(*calls);
  c.finish_reason = "tool_calls";
}

bool CompletionSession::write_tool_calls(const Choice& c, int32_t index,
                                         const std::function<std::string(const ChunkFields&)>& chunk,
                                         const Writer& write) {
  for (size_t i = 0; i < c.calls.size(); ++i) {
    ChunkFields header;
    header.index = index;
    header.tool_calls = tool_call_header_json(static_cast<int32_t>(i), c.calls[i]);
    ChunkFields args;
    args.index = index;
    args.tool_calls = tool_call_arguments_json(static_cast<int32_t>(i), c.calls[i].arguments);
    if (!write(chunk(header)) || !write(chunk(args))) return false;
  }
  return true;
}

void CompletionSession::cancel_all() {
  for (auto& s : streams_) s->cancel();
}

std::string CompletionSession::token_string(int32_t id) const {
  // Without a tokenizer (token-id models) or when asked, tokens are named by id, as vLLM does.
  if (req_.tokens_as_ids || !model_->has_tokenizer()) return "token_id:" + std::to_string(id);
  return model_->token_text(id);
}

std::vector<TokenLogprobInfo> CompletionSession::echo_logprobs(size_t prompt) const {
  const std::vector<int32_t>& ids = prompt_ids_[prompt];
  const std::vector<PromptLogprob>& lp = prompt_lp_[prompt];
  std::vector<TokenLogprobInfo> out;
  if (lp.size() + 1 != ids.size()) return out;
  for (size_t i = 0; i < ids.size(); ++i) {
    TokenLogprobInfo info;
    info.token = token_string(ids[i]);
    info.null_logprob = i == 0;
    if (i > 0) {
      info.logprob = lp[i - 1].logprob;
      const size_t k = std::min(lp[i - 1].top.size(), static_cast<size_t>(std::max(req_.top_logprobs, 0)));
      for (size_t j = 0; j < k; ++j) info.top.push_back({token_string(lp[i - 1].top[j].token), lp[i - 1].top[j].logprob});
    }
    out.push_back(std::move(info));
  }
  return out;
}

Json CompletionSession::prompt_logprobs_of(size_t prompt) const {
  const std::vector<int32_t>& ids = prompt_ids_[prompt];
  const std::vector<PromptLogprob>& lp = prompt_lp_[prompt];
  if (lp.size() + 1 != ids.size()) return nullptr;
  std::vector<PromptPosition> positions(lp.size());
  for (size_t i = 0; i < lp.size(); ++i) {
    positions[i].actual = {lp[i].token, lp[i].logprob, lp[i].rank, token_string(lp[i].token)};
    const size_t k = std::min(lp[i].top.size(), static_cast<size_t>(std::max(req_.prompt_logprobs, 0)));
    for (size_t j = 0; j < k; ++j) {
      const TokenLogprob& t = lp[i].top[j];
      positions[i].top.push_back({t.token, t.logprob, static_cast<int32_t>(j + 1), token_string(t.token)});
    }
  }
  return prompt_logprobs_json(positions);
}

Usage CompletionSession::usage() const {
  Usage u;
  for (int64_t len : prompt_lens_) u.prompt_tokens += len;
  for (const Choice& c : choices_) {
    u.completion_tokens += c.tokens;
    u.spec_draft_tokens += c.spec_draft_tokens;
    u.spec_accepted_tokens += c.spec_accepted_tokens;
  }
  for (int64_t c : cached_) u.cached_tokens += c;
  if (req_.truncate_prompt_tokens > 0) u.truncated_prompt_tokens = truncated_;
  return u;
}

ApiError CompletionSession::timeout_error() const {
  char secs[32];
  std::snprintf(secs, sizeof(secs), "%g", timeout_s_);
  return ApiError{408,
                  std::string("the request did not finish within the server's timeout (--timeout ") + secs +
                      " s); it was aborted",
                  "timeout_error", "", "timeout"};
}

std::optional<ApiError> CompletionSession::collect(Json* response) {
  for (size_t p = 0; p < streams_.size(); ++p) {
    TokenEvent ev;
    Next next;
    while ((next = next_event(p, &ev, nullptr)) == Next::kEvent) {
      ChunkFields unused;
      apply(p, ev, &unused);
    }
    if (next == Next::kTimedOut) {
      timed_out_ = true;
      cancel_all();
      return timeout_error();
    }
    if (next == Next::kClientGone) {
      cancel_all();
      return ApiError{499, "the client closed the connection", "client_closed_request", "", ""};
    }
  }
  if (model_error_) return server_error(500, "the model failed while generating this request", "internal_error");
  std::vector<ChoiceResult> results;
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    // A stream ends without a choice's final event only when the engine stopped under it.
    results.push_back({static_cast<int32_t>(i), c.text, c.logprobs, c.finished ? c.finish_reason : "abort", c.calls});
    if (req_.prompt_logprobs >= 0) {
      results.back().with_prompt_logprobs = true;
      results.back().prompt_logprobs = prompt_logprobs_of(i / static_cast<size_t>(req_.params.n));
    }
  }
  *response = chat() ? chat_response_json(meta_, results, req_.want_logprobs, usage())
                     : completion_response_json(meta_, results, req_.want_logprobs, usage());
  return std::nullopt;
}

bool CompletionSession::stream(const Writer& write) {
  const Json null_usage = nullptr;
  auto usage_field = [&](Json* holder) -> const Json* {
    if (!req_.include_usage) return nullptr;
    if (req_.continuous_usage) {
      *holder = usage_json(usage());
      return holder;
    }
    return &null_usage;
  };
  auto chunk = [&](const ChunkFields& f) {
    Json u;
    const Json* up = usage_field(&u);
    return sse_data(chat() ? chat_chunk_json(meta_, f, up) : completion_chunk_json(meta_, f, up));
  };
  if (chat()) {
    for (size_t i = 0; i < choices_.size(); ++i) {
      ChunkFields f;
      f.index = static_cast<int32_t>(i);
      f.role = true;
      if (!write(chunk(f))) return false;
    }
  }
  for (size_t p = 0; p < streams_.size(); ++p) {
    TokenEvent ev;
    Next next;
    while ((next = next_event(p, &ev, &write)) == Next::kEvent) {
      ChunkFields d;
      apply(p, ev, &d);
      // Held-back partial characters send nothing; a token-id model (no tokenizer, so no text)
      // still sends one chunk per token, so clients see tokens as they are made.
      const bool untexted_token = ev.token >= 0 && !model_->has_tokenizer();
      if (d.content.empty() && d.finish_reason.empty() && d.logprobs.is_null() && d.tool_calls.is_null() &&
          !untexted_token)
        continue;
      const Choice& c = choices_[static_cast<size_t>(d.index)];
      if (!d.finish_reason.empty() && !c.calls.empty() && !c.calls_streamed &&
          !write_tool_calls(c, d.index, chunk, write))
        return false;
      if (!write(chunk(d))) return false;
    }
    if (next == Next::kClientGone) return false;
    if (next == Next::kTimedOut) {
      // Headers went out with 200: the stream ends with the error event and [DONE].
      timed_out_ = true;
      cancel_all();
      return write(sse_error(timeout_error())) && write(sse_done());
    }
  }
  if (model_error_ &&
      !write(sse_error(server_error(500, "the model failed while generating this request", "internal_error"))))
    return false;
  if (req_.include_usage && !write(sse_data(usage_chunk_json(meta_, chat(), usage())))) return false;
  return write(sse_done());
}

}  // namespace lancet::server
