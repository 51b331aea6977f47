// EmbeddingSession: encoding, length checks, submission and collection for /v1/embeddings
// (see embedding_session.h).
#include "server/embedding_session.h"

#include <algorithm>
#include <cstdio>

#include "engine/request_checks.h"

namespace lancet::server {
namespace {

constexpr std::chrono::milliseconds kClientCheck{100};

ApiError from_status(const Status& st) {
  switch (st.code()) {
    case StatusCode::kFailedPrecondition: return server_error(503, st.message(), "service_unavailable");
    case StatusCode::kResourceExhausted: return server_error(429, st.message(), "rate_limit_error");
    case StatusCode::kInvalidArgument:
    case StatusCode::kOutOfRange:
    case StatusCode::kNotFound:
    case StatusCode::kUnimplemented: return bad_request(st.message(), "input");
    default: return server_error(500, st.message(), "internal_error");
  }
}

}  // namespace

EmbeddingSession::EmbeddingSession(ServingModel* model, EmbeddingRequest request, double timeout_s)
    : model_(model), req_(std::move(request)), timeout_s_(timeout_s) {
  deadline_ = timeout_s_ > 0 ? Clock::now() + std::chrono::duration_cast<Clock::duration>(
                                                  std::chrono::duration<double>(timeout_s_))
                             : Clock::time_point::max();
}

EmbeddingSession::~EmbeddingSession() { cancel_all(); }

void EmbeddingSession::cancel_all() {
  for (auto& s : streams_)
    if (s && !s->done()) s->cancel();
}

std::optional<ApiError> EmbeddingSession::encode(std::vector<std::vector<int32_t>>* inputs) const {
  for (const std::string& text : req_.texts) {
    if (!model_->has_tokenizer())
      return bad_request("this model has no tokenizer; send the input as token ids", "input");
    auto ids = model_->encode(text, /*add_special_tokens=*/true);
    if (!ids.ok()) return bad_request(ids.status().message(), "input");
    inputs->push_back(std::move(*ids));
  }
  for (const auto& ids : req_.token_inputs) {
    const Status st = check_token_ids(ids, model_->vocab_size());
    if (!st.ok()) return bad_request(st.message(), "input");
    inputs->push_back(ids);
  }
  const int64_t max_len = model_->max_model_len();
  for (size_t i = 0; i < inputs->size(); ++i) {
    const int64_t len = static_cast<int64_t>((*inputs)[i].size());
    if (len == 0) return bad_request("input " + std::to_string(i) + " is empty", "input");
    if (len > max_len)
      return ApiError{400,
                      "This model's maximum context length is " + std::to_string(max_len) + " tokens. However, input " +
                          std::to_string(i) + " has " + std::to_string(len) + " tokens. Please reduce its length.",
                      "invalid_request_error", "input", "context_length_exceeded"};
  }
  return std::nullopt;
}

std::optional<ApiError> EmbeddingSession::submit(std::vector<std::vector<int32_t>> inputs) {
  for (auto& ids : inputs) {
    prompt_tokens_ += static_cast<int64_t>(ids.size());
    GenerationRequest g;
    g.prompt = std::move(ids);
    g.params.temperature = 0;
    g.params.max_tokens = 1;
    g.embed = true;
    g.lora = req_.lora;
    auto s = model_->engine().submit(g);
    if (!s.ok()) {
      cancel_all();
      return from_status(s.status());
    }
    streams_.push_back(std::move(*s));
  }
  return std::nullopt;
}

std::optional<ApiError> EmbeddingSession::wait(size_t i, std::vector<float>* embedding) {
  TokenEvent ev;
  for (;;) {
    const Clock::time_point now = Clock::now();
    if (now >= deadline_) {
      char secs[32];
      std::snprintf(secs, sizeof(secs), "%g", timeout_s_);
      return ApiError{408, std::string("the request did not finish within the server's timeout (--timeout ") + secs +
                               " s); it was aborted",
                      "timeout_error", "", "timeout"};
    }
    if (client_gone_ && client_gone_())
      return ApiError{499, "the client closed the connection", "client_closed_request", "", ""};
    switch (streams_[i]->next_until(&ev, std::min(deadline_, now + kClientCheck))) {
      case RequestStream::Wait::kEvent:
        if (!ev.embedding.empty()) *embedding = std::move(ev.embedding);
        if (ev.finished && ev.finish_reason == FinishReason::kError)
          return server_error(500, "the model failed while embedding this request", "internal_error");
        break;
      case RequestStream::Wait::kEnded:
        if (embedding->empty()) return server_error(500, "the engine ended the request without an embedding", "internal_error");
        return std::nullopt;
      case RequestStream::Wait::kTimedOut:
        break;
    }
  }
}

std::optional<ApiError> EmbeddingSession::run(Json* response) {
  std::vector<std::vector<int32_t>> inputs;
  if (auto e = encode(&inputs)) return e;
  if (auto e = submit(std::move(inputs))) return e;
  std::vector<std::vector<float>> embeddings(streams_.size());
  for (size_t i = 0; i < streams_.size(); ++i) {
    if (auto e = wait(i, &embeddings[i])) {
      cancel_all();
      return e;
    }
  }
  *response = embeddings_response_json(req_.lora ? req_.lora->name : model_->name(), embeddings, req_.base64, prompt_tokens_);
  return std::nullopt;
}

}  // namespace lancet::server
