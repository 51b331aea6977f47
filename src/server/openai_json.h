// The OpenAI API's JSON, and the only place in lancet that knows it: request bodies of
// /v1/chat/completions and /v1/completions are parsed and validated into ApiRequest (OpenAI
// semantics plus the vLLM extras top_k, min_p, repetition_penalty, min_tokens,
// stop_token_ids, ignore_eos), and responses, stream chunks, usage, logprobs, /v1/models and
// the error envelope are built here. Nothing in this file touches the engine or HTTP.
//
// Parsing is defensive: the body is untrusted. Nesting depth is checked before parsing,
// every number is range-checked before it is converted, every list is bounded, and any
// problem is an ApiError (400) naming the field; unknown fields are ignored, as OpenAI does.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/lora_ref.h"
#include "runner/sampling_params.h"
#include "server/api_error.h"
#include "server/tool_calls.h"
#include "structured/output_format.h"

namespace lancet::server {

// Bounds on what one request may ask for; memory use must not depend on the values sent.
struct RequestLimits {
  int32_t max_n = 128;               // choices per prompt
  int32_t max_choices = 256;         // n x prompts
  int32_t max_prompts = 256;         // entries of a completions prompt list
  int32_t max_stop = 16;             // stop strings
  size_t max_stop_length = 256;      // bytes per stop string
  int32_t max_stop_token_ids = 256;
  int32_t max_logit_bias = 1024;     // entries
  int32_t max_logprobs = 20;         // top_logprobs / logprobs (--max-logprobs)
  int32_t max_messages = 4096;
  int32_t max_json_depth = 64;       // nesting of the request body
  int64_t max_tokens_limit = 1 << 20;  // absolute cap before the context-length check
};

enum class ApiKind { kChat, kCompletion };

struct ApiRequest {
  ApiKind kind = ApiKind::kChat;
  std::string model;  // "" when absent (the served model is meant)
  // The LoRA adapter `model` names (server/model_names.h); null: the base model.
  std::shared_ptr<const LoraRef> lora;
  // Chat: messages normalized to [{role, content: string}] for the chat template; assistant
  // messages may add tool_calls (arguments as objects), tool messages tool_call_id.
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  bool add_generation_prompt = true;
  bool continue_final_message = false;  // vLLM's: the final message left open (ChatEnding)
  // Completions: either text prompts or token-id prompts (never both).
  std::vector<std::string> text_prompts;
  std::vector<std::vector<int32_t>> token_prompts;
  bool echo = false;  // completions: the prompt text starts each choice's text
  // vLLM's prompt_logprobs: -1 = off; k >= 0: each prompt token's logprob, rank and top k.
  int32_t prompt_logprobs = -1;
  // vLLM's truncate_prompt_tokens: 0 = off; K >= 1 keeps each prompt's last K tokens.
  int64_t truncate_prompt_tokens = 0;
  // max_tokens stays as parsed; max_tokens_set says whether the client gave one (otherwise the
  // rest of the context is the budget, as vLLM does).
  SamplingParams params;
  bool max_tokens_set = false;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  bool continuous_usage = false;   // stream_options.continuous_usage_stats (vLLM)
  bool want_logprobs = false;      // chat: logprobs; completions: logprobs != null
  int32_t top_logprobs = 0;        // alternatives per position
  bool tokens_as_ids = false;      // return_tokens_as_token_ids (vLLM): logprob tokens as "token_id:N"
  std::string user;
  // Structured outputs: response_format json_object / json_schema, or vLLM's guided_json /
  // guided_choice; output_format_field names the field it came from (for errors about it).
  std::optional<structured::OutputFormat> output_format;
  std::string output_format_field;
  // Chat tool calling: tools, tool_choice, parallel_tool_calls (tool_calls.h).
  ToolRequest tools;

  int32_t num_prompts() const {
    return kind == ApiKind::kChat ? 1
                                  : static_cast<int32_t>(text_prompts.size() + token_prompts.size());
  }
};

// Parses a body; on failure returns the ApiError (status 400) and leaves *out unspecified.
std::optional<ApiError> parse_chat_request(std::string_view body, const RequestLimits& limits,
                                           ApiRequest* out);
std::optional<ApiError> parse_completion_request(std::string_view body, const RequestLimits& limits,
                                                 ApiRequest* out);
// Parses a JSON object body with the depth check; used by /tokenize and /detokenize too.
std::optional<ApiError> parse_json_object(std::string_view body, const RequestLimits& limits,
                                          nlohmann::json* out);

// /tokenize: {"prompt": str} or {"messages": [...], "tools"?}, optional "add_special_tokens" (default
// true), "add_generation_prompt", "continue_final_message". /detokenize: {"tokens": [ids]}.
struct TokenizeRequest {
  std::optional<std::string> prompt;
  nlohmann::ordered_json messages;  // null unless given
  nlohmann::ordered_json tools = nullptr;  // with messages: the tools list, as in a chat request
  bool add_special_tokens = true;
  bool add_generation_prompt = true;
  bool continue_final_message = false;
};
std::optional<ApiError> parse_tokenize_request(std::string_view body, const RequestLimits& limits,
                                               TokenizeRequest* out);
std::optional<ApiError> parse_detokenize_request(std::string_view body, const RequestLimits& limits,
                                                 std::vector<int32_t>* tokens);

// ---- Responses ----

struct TopLogprob {
  std::string token;  // the token's text (may be a partial UTF-8 character)
  float logprob = 0.0f;
};
struct TokenLogprobInfo {
  std::string token;
  float logprob = 0.0f;
  std::vector<TopLogprob> top;
  bool null_logprob = false;  // echo: the first prompt token has no logprob (null in the JSON)
};

struct ChoiceResult {
  int32_t index = 0;
  std::string text;
  std::vector<TokenLogprobInfo> logprobs;  // used when the request wanted logprobs
  std::string finish_reason;               // "stop", "length", "abort", "error", "tool_calls"
  std::vector<ToolCall> tool_calls;        // chat: when set, the message is these calls (content null)
  // vLLM's prompt_logprobs (prompt_logprobs_json), sent when with_prompt_logprobs: on each
  // completions choice, at the top of a chat response (from the first choice).
  bool with_prompt_logprobs = false;
  nlohmann::ordered_json prompt_logprobs = nullptr;
};

// One prompt token as vLLM's prompt_logprobs reports it, and its top alternatives.
struct PromptTokenInfo {
  int32_t token = -1;
  float logprob = 0.0f;
  int32_t rank = 0;
  std::string text;  // decoded_token
};
struct PromptPosition {
  PromptTokenInfo actual;
  std::vector<PromptTokenInfo> top;
};

struct Usage {
  int64_t prompt_tokens = 0;
  int64_t completion_tokens = 0;
  int64_t cached_tokens = 0;
  // Speculative decoding: draft tokens verified and accepted for this request (reported only
  // when some were drafted).
  int64_t spec_draft_tokens = 0;
  int64_t spec_accepted_tokens = 0;
  // truncate_prompt_tokens: prompt tokens dropped (over all prompts); -1 when not asked.
  int64_t truncated_prompt_tokens = -1;
};

struct ResponseMeta {
  std::string id;  // "chatcmpl-..." or "cmpl-..."
  int64_t created = 0;
  std::string model;
};

// A fresh id with the given prefix ("chatcmpl-", "cmpl-").
std::string new_response_id(std::string_view prefix);

using Json = nlohmann::ordered_json;

Json usage_json(const Usage& usage);
Json chat_logprobs_json(const std::vector<TokenLogprobInfo>& entries);
// text_offset_start: offset of the first token's text within the choice's text.
Json completion_logprobs_json(const std::vector<TokenLogprobInfo>& entries, size_t text_offset_start);

// positions: prompt tokens 1.. (the first has none): [null, {"id": {"logprob", "rank",
// "decoded_token"}}, ...], the actual token first, then its alternatives.
Json prompt_logprobs_json(const std::vector<PromptPosition>& positions);

Json chat_response_json(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                        bool with_logprobs, const Usage& usage);
Json completion_response_json(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                              bool with_logprobs, const Usage& usage);

// One stream chunk for one choice. role: sent in the first chat chunk of a choice. content may
// be empty; finish_reason "" -> null; logprobs null when absent. usage: with include_usage every
// chunk carries "usage": null (or the running usage with continuous usage stats).
struct ChunkFields {
  int32_t index = 0;
  bool role = false;
  std::string content;
  Json logprobs = nullptr;
  std::string finish_reason;
  Json tool_calls = nullptr;  // chat: the delta's "tool_calls" (tool_call_delta_json) when set
};
// Stream deltas of one tool call: the header (index, id, type, name, "" arguments) and then
// an arguments fragment.
Json tool_call_header_json(int32_t index, const ToolCall& call);
Json tool_call_arguments_json(int32_t index, const std::string& fragment);
Json chat_chunk_json(const ResponseMeta& meta, const ChunkFields& f, const Json* usage);
Json completion_chunk_json(const ResponseMeta& meta, const ChunkFields& f, const Json* usage);
// The final usage chunk: "choices": [] and the usage.
Json usage_chunk_json(const ResponseMeta& meta, bool chat, const Usage& usage);

// GET /v1/models: the served model, then each LoRA adapter (name, path) with the model as its
// parent, as vLLM lists them.
Json models_json(const std::string& model_name, int64_t max_model_len, int64_t created,
                 const std::vector<std::pair<std::string, std::string>>& adapters = {});
// POST /v1/load_lora_adapter {"lora_name", "lora_path"} and /v1/unload_lora_adapter
// {"lora_name"} (vLLM's bodies; lora_int_id is accepted and unused).
std::optional<ApiError> parse_lora_adapter_request(std::string_view body, const RequestLimits& limits, bool want_path,
                                                   std::string* name, std::string* path);
Json error_json(const ApiError& err);

// Serializes with invalid UTF-8 replaced by U+FFFD (token texts can hold partial characters).
std::string dump_json(const Json& j);
std::string dump_json(const nlohmann::json& j);

}  // namespace lancet::server
