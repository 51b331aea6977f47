// Response side of the OpenAI JSON: completions, chat completions, their stream chunks,
// usage, logprobs (chat and legacy completions layouts), /v1/models and the error envelope.
// Field order follows OpenAI's responses so diffs against them read easily.
#include <atomic>
#include <cmath>
#include <chrono>
#include <cstdio>
#include <random>

#include "server/openai_json.h"

namespace lancet::server {
namespace {

Json null_or(const std::string& s) { return s.empty() ? Json(nullptr) : Json(s); }

// The fields every completion response and chunk starts with.
Json envelope(const ResponseMeta& meta, const char* object) {
  Json out;
  out["id"] = meta.id;
  out["object"] = object;
  out["created"] = meta.created;
  out["model"] = meta.model;
  return out;
}

Json bytes_json(const std::string& s) {
  Json b = Json::array();
  for (unsigned char c : s) b.push_back(static_cast<int>(c));
  return b;
}

// JSON has no -inf; a token the sampler ruled out is reported with OpenAI's floor value.
double finite_logprob(float lp) { return std::isfinite(lp) ? static_cast<double>(lp) : -9999.0; }

}  // namespace

std::string new_response_id(std::string_view prefix) {
  static std::atomic<uint64_t> counter{0};
  thread_local std::mt19937_64 rng(std::random_device{}() ^
                                   static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count()));
  char buf[40];
  std::snprintf(buf, sizeof(buf), "%016llx%08llx", static_cast<unsigned long long>(rng()),
                static_cast<unsigned long long>(counter.fetch_add(1) & 0xffffffffull));
  return std::string(prefix) + buf;
}

Json usage_json(const Usage& u) {
  Json j;
  j["prompt_tokens"] = u.prompt_tokens;
  j["total_tokens"] = u.prompt_tokens + u.completion_tokens;
  j["completion_tokens"] = u.completion_tokens;
  j["prompt_tokens_details"] = {{"cached_tokens", u.cached_tokens}};
  // An extension field: prompt tokens that truncate_prompt_tokens dropped (prompt_tokens
  // counts the tokens kept).
  if (u.truncated_prompt_tokens >= 0) j["truncated_prompt_tokens"] = u.truncated_prompt_tokens;
  // An extension field (clients ignore unknown usage fields): per-request speculation counts.
  if (u.spec_draft_tokens > 0)
    j["speculative"] = {{"draft_tokens", u.spec_draft_tokens}, {"accepted_tokens", u.spec_accepted_tokens}};
  return j;
}

Json chat_logprobs_json(const std::vector<TokenLogprobInfo>& entries) {
  Json content = Json::array();
  for (const auto& e : entries) {
    Json tops = Json::array();
    for (const auto& t : e.top)
      tops.push_back({{"token", t.token}, {"logprob", finite_logprob(t.logprob)}, {"bytes", bytes_json(t.token)}});
    content.push_back({{"token", e.token},
                       {"logprob", finite_logprob(e.logprob)},
                       {"bytes", bytes_json(e.token)},
                       {"top_logprobs", std::move(tops)}});
  }
  return Json{{"content", std::move(content)}};
}

Json completion_logprobs_json(const std::vector<TokenLogprobInfo>& entries, size_t text_offset_start) {
  Json tokens = Json::array(), token_logprobs = Json::array(), top = Json::array(), offsets = Json::array();
  size_t offset = text_offset_start;
  for (const auto& e : entries) {
    tokens.push_back(e.token);
    offsets.push_back(offset);
    offset += e.token.size();
    if (e.null_logprob) {
      token_logprobs.push_back(nullptr);
      top.push_back(nullptr);
      continue;
    }
    token_logprobs.push_back(finite_logprob(e.logprob));
    Json alts = Json::object();
    for (const auto& t : e.top) alts[t.token] = finite_logprob(t.logprob);
    top.push_back(std::move(alts));
  }
  return Json{{"text_offset", std::move(offsets)},
              {"token_logprobs", std::move(token_logprobs)},
              {"tokens", std::move(tokens)},
              {"top_logprobs", std::move(top)}};
}

Json prompt_logprobs_json(const std::vector<PromptPosition>& positions) {
  Json out = Json::array({nullptr});
  auto entry = [](const PromptTokenInfo& t) {
    return Json{{"logprob", finite_logprob(t.logprob)}, {"rank", t.rank}, {"decoded_token", t.text}};
  };
  for (const PromptPosition& p : positions) {
    Json d = Json::object();
    d[std::to_string(p.actual.token)] = entry(p.actual);
    for (const PromptTokenInfo& t : p.top) {
      const std::string key = std::to_string(t.token);
      if (!d.contains(key)) d[key] = entry(t);
    }
    out.push_back(std::move(d));
  }
  return out;
}

Json chat_response_json(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices, bool with_logprobs,
                        const Usage& usage) {
  Json out = envelope(meta, "chat.completion");
  Json cs = Json::array();
  for (const auto& c : choices) {
    Json choice;
    choice["index"] = c.index;
    choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    if (!c.tool_calls.empty()) {
      Json calls = Json::array();
      for (const ToolCall& t : c.tool_calls)
        calls.push_back({{"id", t.id}, {"type", "function"}, {"function", {{"name", t.name}, {"arguments", t.arguments}}}});
      choice["message"] = {{"role", "assistant"}, {"content", nullptr}, {"tool_calls", std::move(calls)}};
    }
    choice["logprobs"] = with_logprobs ? chat_logprobs_json(c.logprobs) : Json(nullptr);
    choice["finish_reason"] = null_or(c.finish_reason);
    cs.push_back(std::move(choice));
  }
  out["choices"] = std::move(cs);
  out["usage"] = usage_json(usage);
  out["system_fingerprint"] = nullptr;
  if (!choices.empty() && choices[0].with_prompt_logprobs) out["prompt_logprobs"] = choices[0].prompt_logprobs;
  return out;
}

Json completion_response_json(const ResponseMeta& meta, const std::vector<ChoiceResult>& choices,
                              bool with_logprobs, const Usage& usage) {
  Json out = envelope(meta, "text_completion");
  Json cs = Json::array();
  for (const auto& c : choices) {
    Json choice;
    choice["index"] = c.index;
    choice["text"] = c.text;
    choice["logprobs"] = with_logprobs ? completion_logprobs_json(c.logprobs, 0) : Json(nullptr);
    choice["finish_reason"] = null_or(c.finish_reason);
    if (c.with_prompt_logprobs) choice["prompt_logprobs"] = c.prompt_logprobs;
    cs.push_back(std::move(choice));
  }
  out["choices"] = std::move(cs);
  out["usage"] = usage_json(usage);
  out["system_fingerprint"] = nullptr;
  return out;
}

Json chat_chunk_json(const ResponseMeta& meta, const ChunkFields& f, const Json* usage) {
  Json out = envelope(meta, "chat.completion.chunk");
  Json delta = Json::object();
  if (f.role) delta["role"] = "assistant";
  if (f.role || !f.content.empty()) delta["content"] = f.content;
  if (!f.tool_calls.is_null()) delta["tool_calls"] = f.tool_calls;
  Json choice;
  choice["index"] = f.index;
  choice["delta"] = std::move(delta);
  choice["logprobs"] = f.logprobs;
  choice["finish_reason"] = null_or(f.finish_reason);
  out["choices"] = Json::array({std::move(choice)});
  if (usage) out["usage"] = *usage;
  return out;
}

Json tool_call_header_json(int32_t index, const ToolCall& call) {
  Json c;
  c["index"] = index;
  c["id"] = call.id;
  c["type"] = "function";
  c["function"] = {{"name", call.name}, {"arguments", ""}};
  return Json::array({std::move(c)});
}

Json tool_call_arguments_json(int32_t index, const std::string& fragment) {
  return Json::array({{{"index", index}, {"function", {{"arguments", fragment}}}}});
}

Json completion_chunk_json(const ResponseMeta& meta, const ChunkFields& f, const Json* usage) {
  Json out = envelope(meta, "text_completion");
  Json choice;
  choice["index"] = f.index;
  choice["text"] = f.content;
  choice["logprobs"] = f.logprobs;
  choice["finish_reason"] = null_or(f.finish_reason);
  out["choices"] = Json::array({std::move(choice)});
  if (usage) out["usage"] = *usage;
  return out;
}

Json usage_chunk_json(const ResponseMeta& meta, bool chat, const Usage& usage) {
  Json out = envelope(meta, chat ? "chat.completion.chunk" : "text_completion");
  out["choices"] = Json::array();
  out["usage"] = usage_json(usage);
  return out;
}

Json models_json(const std::string& model_name, int64_t max_model_len, int64_t created,
                 const std::vector<std::pair<std::string, std::string>>& adapters) {
  auto card = [&](const std::string& id, const std::string& root, const Json& parent) {
    Json model;
    model["id"] = id;
    model["object"] = "model";
    model["created"] = created;
    model["owned_by"] = "lancet";
    model["root"] = root;
    model["parent"] = parent;
    model["max_model_len"] = max_model_len;
    return model;
  };
  Json data = Json::array({card(model_name, model_name, nullptr)});
  for (const auto& [name, path] : adapters) data.push_back(card(name, path, model_name));
  return Json{{"object", "list"}, {"data", std::move(data)}};
}

Json error_json(const ApiError& err) {
  Json e;
  e["message"] = err.message;
  e["type"] = err.type;
  e["param"] = null_or(err.param);
  e["code"] = err.code.empty() ? default_error_code(err.status) : err.code;
  return Json{{"error", std::move(e)}};
}

std::string dump_json(const Json& j) { return j.dump(-1, ' ', false, Json::error_handler_t::replace); }
std::string dump_json(const nlohmann::json& j) {
  return j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

}  // namespace lancet::server
