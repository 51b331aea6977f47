// Request side of the OpenAI JSON: body -> ApiRequest with every field type- and range-checked.
// Numbers are checked as doubles/int64 before any narrowing conversion, so no value a client
// sends can trigger undefined behaviour; every list is bounded by RequestLimits.
#include "server/openai_json.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <limits>

namespace lancet::server {
namespace {

using nlohmann::json;
using Err = std::optional<ApiError>;

constexpr int64_t kMaxTokenId = std::numeric_limits<int32_t>::max();

// Rejects bodies nested deeper than max_depth before the parser sees them, skipping strings.
Err check_depth(std::string_view body, int32_t max_depth) {
  int32_t depth = 0;
  bool in_string = false, escaped = false;
  for (char c : body) {
    if (in_string) {
      if (escaped) escaped = false;
      else if (c == '\\') escaped = true;
      else if (c == '"') in_string = false;
      continue;
    }
    if (c == '"') in_string = true;
    else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return bad_request("the request body is nested deeper than " + std::to_string(max_depth) + " levels");
    } else if (c == ']' || c == '}') --depth;
  }
  return std::nullopt;
}

// The field's value, or nullptr when it is missing or null (null means "not given").
const json* field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) return nullptr;
  return &*it;
}

Err type_error(const char* key, const char* what) {
  return bad_request(std::string("'") + key + "' must be " + what, key);
}

Err get_bool(const json& obj, const char* key, bool* out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_boolean()) return type_error(key, "a boolean");
  *out = v->get<bool>();
  return std::nullopt;
}

// Integer in [lo, hi]; integral floats (3.0) are accepted, as JSON does not distinguish.
Err to_int(const json& v, const std::string& name, int64_t lo, int64_t hi, int64_t* out) {
  int64_t x = 0;
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (u > static_cast<uint64_t>(hi)) goto range;
    x = static_cast<int64_t>(u);
  } else if (v.is_number_integer()) {
    x = v.get<int64_t>();
  } else if (v.is_number_float()) {
    const double d = v.get<double>();
    if (!std::isfinite(d) || d != std::floor(d)) return bad_request("'" + name + "' must be an integer", name);
    if (d < static_cast<double>(lo) || d > static_cast<double>(hi)) goto range;
    x = static_cast<int64_t>(d);
  } else {
    return bad_request("'" + name + "' must be an integer", name);
  }
  if (x < lo || x > hi) goto range;
  *out = x;
  return std::nullopt;
range:
  return bad_request("'" + name + "' must be in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]", name);
}

template <typename T>
Err get_int(const json& obj, const char* key, int64_t lo, int64_t hi, T* out, bool* set = nullptr) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  int64_t x = 0;
  if (auto e = to_int(*v, key, lo, hi, &x)) return e;
  *out = static_cast<T>(x);
  if (set) *set = true;
  return std::nullopt;
}

Err to_float(const json& v, const std::string& name, double lo, double hi, bool lo_open, float* out) {
  if (!v.is_number()) return bad_request("'" + name + "' must be a number", name);
  const double d = v.get<double>();
  if (!std::isfinite(d) || d > hi || d < lo || (lo_open && d == lo)) {
    return bad_request("'" + name + "' must be in " + (lo_open ? "(" : "[") + std::to_string(lo) + ", " +
                           std::to_string(hi) + "]",
                       name);
  }
  *out = static_cast<float>(d);
  return std::nullopt;
}

Err get_float(const json& obj, const char* key, double lo, double hi, float* out, bool lo_open = false) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  return to_float(*v, key, lo, hi, lo_open, out);
}

Err get_string(const json& obj, const char* key, std::string* out) {
  const json* v = field(obj, key);
  if (!v) return std::nullopt;
  if (!v->is_string()) return type_error(key, "a string");
  *out = v->get<std::string>();
  return std::nullopt;
}

Err parse_token_list(const json& v, const std::string& name, size_t max_len, std::vector<int32_t>* out) {
  if (!v.is_array()) return bad_request("'" + name + "' must be a list of token ids", name);
  if (v.size() > max_len) return bad_request("'" + name + "' has too many entries", name);
  out->clear();
  out->reserve(v.size());
  for (const json& t : v) {
    int64_t id = 0;
    if (auto e = to_int(t, name, 0, kMaxTokenId, &id)) return e;
    out->push_back(static_cast<int32_t>(id));
  }
  return std::nullopt;
}

Err parse_stop(const json& obj, const RequestLimits& lim, SamplingParams* p) {
  const json* v = field(obj, "stop");
  if (v) {
    std::vector<std::string> stops;
    if (v->is_string()) {
      stops.push_back(v->get<std::string>());
    } else if (v->is_array()) {
      if (v->size() > static_cast<size_t>(lim.max_stop))
        return bad_request("'stop' may hold at most " + std::to_string(lim.max_stop) + " strings", "stop");
      for (const json& s : *v) {
        if (!s.is_string()) return type_error("stop", "a string or a list of strings");
        stops.push_back(s.get<std::string>());
      }
    } else {
      return type_error("stop", "a string or a list of strings");
    }
    for (const auto& s : stops) {
      if (s.empty()) return bad_request("'stop' strings must not be empty", "stop");
      if (s.size() > lim.max_stop_length)
        return bad_request("'stop' strings must be at most " + std::to_string(lim.max_stop_length) + " bytes", "stop");
    }
    p->stop = std::move(stops);
  }
  if (const json* ids = field(obj, "stop_token_ids"))
    return parse_token_list(*ids, "stop_token_ids", lim.max_stop_token_ids, &p->stop_token_ids);
  return std::nullopt;
}

Err parse_logit_bias(const json& obj, const RequestLimits& lim, SamplingParams* p) {
  const json* v = field(obj, "logit_bias");
  if (!v) return std::nullopt;
  if (!v->is_object()) return type_error("logit_bias", "an object mapping token ids to biases");
  if (v->size() > static_cast<size_t>(lim.max_logit_bias))
    return bad_request("'logit_bias' may hold at most " + std::to_string(lim.max_logit_bias) + " entries",
                       "logit_bias");
  for (auto it = v->begin(); it != v->end(); ++it) {
    const std::string& key = it.key();
    int64_t id = -1;
    auto [ptr, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
    if (ec != std::errc() || ptr != key.data() + key.size() || key.empty() || id < 0 || id > kMaxTokenId)
      return bad_request("'logit_bias' keys must be token ids, got '" + key.substr(0, 32) + "'", "logit_bias");
    float bias = 0;
    if (auto e = to_float(it.value(), "logit_bias", -100.0, 100.0, false, &bias)) return e;
    p->logit_bias[static_cast<int32_t>(id)] = bias;
  }
  return std::nullopt;
}

// add_generation_prompt (default true) and continue_final_message (default false), which
// exclude each other as in vLLM: continuing the final message needs add_generation_prompt false.
Err parse_chat_ending(const json& obj, bool* add_generation_prompt, bool* continue_final_message) {
  if (auto e = get_bool(obj, "add_generation_prompt", add_generation_prompt)) return e;
  if (auto e = get_bool(obj, "continue_final_message", continue_final_message)) return e;
  if (*add_generation_prompt && *continue_final_message)
    return bad_request("'continue_final_message' needs 'add_generation_prompt' set to false (both cannot be true)",
                       "continue_final_message");
  return std::nullopt;
}

// vLLM extensions that would change the output and that this server does not implement: a
// request that sets one gets a 400 naming it instead of an answer that silently ignores it.
// null, false and 0 mean "not set" (clients send defaults); tool_choice needs tools, as OpenAI says.
Err refuse_unsupported(const json& obj, ApiKind kind) {
  auto set = [](const json* v) {
    return v && !v->is_null() && !(v->is_boolean() && !v->get<bool>()) && !(v->is_number() && v->get<double>() == 0);
  };
  // vLLM's chat echo (repeat the last message) is not implemented; completions have echo.
  if (kind == ApiKind::kChat && set(field(obj, "echo")))
    return bad_request("'echo' is not supported on chat completions by this server; see docs/API.md", "echo");
  // Chat requests parse tools and tool_choice in tool_calls.cc.
  if (const json* tc = field(obj, "tool_choice"); kind == ApiKind::kCompletion && tc && !tc->is_null()) {
    const json* tools = field(obj, "tools");
    const bool none = tc->is_string() && tc->get<std::string>() == "none";
    if ((!tools || tools->empty()) && !none)
      return bad_request("'tool_choice' is only allowed when 'tools' are given", "tool_choice");
  }
  return std::nullopt;
}

// Structured outputs: response_format {text, json_object, json_schema}, guided_json (a schema,
// or a JSON string holding one), guided_choice (strings), guided_regex (a pattern),
// guided_grammar (GBNF text); at most one of them. The schema's
// own features are checked when it is compiled (server/http_server.cc), still a 400.
Err parse_output_format(const json& obj, ApiRequest* r) {
  using structured::OutputFormat;
  std::optional<OutputFormat> fmt;
  std::string from;
  auto take = [&](OutputFormat f, const char* name) -> Err {
    if (fmt)
      return bad_request(std::string("'") + name + "' and '" + from +
                             "' both constrain the output; give at most one of them",
                         name);
    fmt = std::move(f);
    from = name;
    return std::nullopt;
  };
  if (const json* rf = field(obj, "response_format")) {
    if (!rf->is_object() || !rf->contains("type") || !(*rf)["type"].is_string())
      return type_error("response_format", "an object with a string 'type'");
    const std::string type = (*rf)["type"].get<std::string>();
    if (type == "json_object") {
      if (auto e = take(OutputFormat{}, "response_format")) return e;
    } else if (type == "json_schema") {
      const json* js = field(*rf, "json_schema");
      if (!js || !js->is_object())
        return bad_request("response_format 'json_schema' needs a 'json_schema' object with a 'schema'",
                           "response_format");
      const json* schema = field(*js, "schema");
      if (!schema || !(schema->is_object() || schema->is_boolean()))
        return bad_request("'response_format.json_schema.schema' must be a JSON schema object", "response_format");
      OutputFormat f;
      f.kind = OutputFormat::Kind::kJsonSchema;
      f.schema = nlohmann::ordered_json(*schema);  // in the written order: keep_schema_order()
      if (auto e = take(std::move(f), "response_format")) return e;
    } else if (type != "text") {
      return bad_request("response_format '" + type.substr(0, 32) +
                             "' is not supported by this server (text, json_object, json_schema); see docs/API.md",
                         "response_format");
    }
  }
  // guided_json / guided_choice / guided_regex / guided_grammar, and the same as the keys json /
  // choice / regex / grammar of structured_outputs (vLLM's newer form; json_object: true is
  // response_format's json_object). `name` is the field errors name.
  auto json_schema = [&](const json& v, const char* name) -> Err {
    OutputFormat f;
    f.kind = OutputFormat::Kind::kJsonSchema;
    if (v.is_string()) {
      f.schema = nlohmann::ordered_json::parse(v.get<std::string>(), nullptr, /*allow_exceptions=*/false);
      if (f.schema.is_discarded()) return bad_request(std::string("'") + name + "' is a string that is not valid JSON", name);
    } else {
      f.schema = nlohmann::ordered_json(v);
    }
    if (!f.schema.is_object()) return type_error(name, "a JSON schema (an object, or a string holding one)");
    return take(std::move(f), name);
  };
  auto choice = [&](const json& v, const char* name) -> Err {
    OutputFormat f;
    f.kind = OutputFormat::Kind::kChoice;
    if (!v.is_array() || v.empty()) return type_error(name, "a non-empty list of strings");
    for (const json& c : v) {
      if (!c.is_string() || c.get<std::string>().empty()) return type_error(name, "a non-empty list of non-empty strings");
      f.choices.push_back(c.get<std::string>());
    }
    return take(std::move(f), name);
  };
  auto regex = [&](const json& v, const char* name) -> Err {
    OutputFormat f;
    f.kind = OutputFormat::Kind::kRegex;
    if (!v.is_string() || v.get<std::string>().empty()) return type_error(name, "a non-empty string");
    f.pattern = v.get<std::string>();
    return take(std::move(f), name);
  };
  auto grammar = [&](const json& v, const char* name) -> Err {
    OutputFormat f;
    f.kind = OutputFormat::Kind::kGrammar;
    if (!v.is_string() || v.get<std::string>().empty()) return type_error(name, "a non-empty string (a GBNF grammar)");
    f.grammar = v.get<std::string>();
    return take(std::move(f), name);
  };
  if (const json* v = field(obj, "guided_json"); v && !v->is_null())
    if (auto e = json_schema(*v, "guided_json")) return e;
  if (const json* v = field(obj, "guided_choice"); v && !v->is_null())
    if (auto e = choice(*v, "guided_choice")) return e;
  if (const json* v = field(obj, "guided_regex"); v && !v->is_null())
    if (auto e = regex(*v, "guided_regex")) return e;
  if (const json* v = field(obj, "guided_grammar"); v && !v->is_null())
    if (auto e = grammar(*v, "guided_grammar")) return e;
  if (const json* so = field(obj, "structured_outputs"); so && !so->is_null()) {
    static constexpr const char* kName = "structured_outputs";
    if (!so->is_object()) return type_error(kName, "an object (json, regex, choice, grammar or json_object)");
    for (const auto& [key, v] : so->items()) {
      if (v.is_null()) continue;
      Err e;
      if (key == "json") e = json_schema(v, kName);
      else if (key == "choice") e = choice(v, kName);
      else if (key == "regex") e = regex(v, kName);
      else if (key == "grammar") e = grammar(v, kName);
      else if (key == "json_object" && v.is_boolean()) e = v.get<bool>() ? take(OutputFormat{}, kName) : std::nullopt;
      else
        return bad_request("'structured_outputs." + key.substr(0, 32) +
                               "' is not supported by this server (json, regex, choice, grammar, json_object); "
                               "see docs/API.md",
                           kName);
      if (e) return e;
    }
  }
  r->output_format = std::move(fmt);
  r->output_format_field = from;
  return std::nullopt;
}

// The body's json sorts object keys; a schema's properties are generated in the order it
// writes them, so the schema is read again from the body, in order.
void keep_schema_order(std::string_view body, ApiRequest* r) {
  if (!r->output_format || r->output_format->kind != structured::OutputFormat::Kind::kJsonSchema) return;
  using ojson = nlohmann::ordered_json;
  const ojson obj = ojson::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (!obj.is_object()) return;
  if (r->output_format_field == "response_format") {
    if (obj.contains("response_format") && obj["response_format"].contains("json_schema") &&
        obj["response_format"]["json_schema"].contains("schema"))
      r->output_format->schema = obj["response_format"]["json_schema"]["schema"];
  } else if (r->output_format_field == "guided_json" && obj.contains("guided_json") && obj["guided_json"].is_object()) {
    r->output_format->schema = obj["guided_json"];
  } else if (r->output_format_field == "structured_outputs" && obj.contains("structured_outputs") &&
             obj["structured_outputs"].is_object() && obj["structured_outputs"].contains("json") &&
             obj["structured_outputs"]["json"].is_object()) {
    r->output_format->schema = obj["structured_outputs"]["json"];
  }
}

// tools / tool_choice / parallel_tool_calls, read again in key order (tool schemas keep the
// order of their properties, as response_format's do).
Err parse_chat_tools(std::string_view body, ApiRequest* r) {
  const nlohmann::ordered_json obj = nlohmann::ordered_json::parse(body.begin(), body.end(), nullptr, false);
  if (!obj.is_object()) return bad_request("the request body must be a JSON object");
  if (auto e = parse_tool_request(obj, &r->tools)) return e;
  if (r->tools.enforced() && r->output_format)
    return bad_request("'tool_choice' \"required\" or a named function cannot be combined with '" +
                           r->output_format_field + "'",
                       "tool_choice");
  return std::nullopt;
}

// Fields both endpoints share: sampling knobs, limits, streaming.
Err parse_common(const json& obj, const RequestLimits& lim, ApiRequest* r) {
  SamplingParams& p = r->params;
  if (auto e = get_string(obj, "model", &r->model)) return e;
  if (auto e = get_float(obj, "temperature", 0.0, 100.0, &p.temperature)) return e;
  if (auto e = get_float(obj, "top_p", 0.0, 1.0, &p.top_p, /*lo_open=*/true)) return e;
  if (auto e = get_int(obj, "top_k", -1, kMaxTokenId, &p.top_k)) return e;
  if (auto e = get_float(obj, "min_p", 0.0, 1.0, &p.min_p)) return e;
  if (auto e = get_float(obj, "presence_penalty", -2.0, 2.0, &p.presence_penalty)) return e;
  if (auto e = get_float(obj, "frequency_penalty", -2.0, 2.0, &p.frequency_penalty)) return e;
  if (auto e = get_float(obj, "repetition_penalty", 0.0, 10.0, &p.repetition_penalty, true)) return e;
  if (auto e = get_int(obj, "max_tokens", 1, lim.max_tokens_limit, &p.max_tokens, &r->max_tokens_set)) return e;
  if (r->kind == ApiKind::kChat) {
    if (auto e = get_int(obj, "max_completion_tokens", 1, lim.max_tokens_limit, &p.max_tokens, &r->max_tokens_set))
      return e;
  }
  if (auto e = get_int(obj, "min_tokens", 0, lim.max_tokens_limit, &p.min_tokens)) return e;
  if (r->max_tokens_set && p.min_tokens > p.max_tokens)
    return bad_request("'min_tokens' must not exceed 'max_tokens'", "min_tokens");
  if (auto e = get_int(obj, "n", 1, lim.max_n, &p.n)) return e;
  if (const json* b = field(obj, "best_of")) {
    int64_t best_of = 0;
    if (auto e = to_int(*b, "best_of", 1, lim.max_n, &best_of)) return e;
    if (best_of != p.n) return bad_request("'best_of' other than n is not supported", "best_of");
  }
  if (const json* s = field(obj, "seed")) {
    if (s->is_number_unsigned()) p.seed = s->get<uint64_t>();
    else if (s->is_number_integer()) p.seed = static_cast<uint64_t>(s->get<int64_t>());
    else return type_error("seed", "an integer");
  }
  if (auto e = get_bool(obj, "ignore_eos", &p.ignore_eos)) return e;
  if (auto e = parse_stop(obj, lim, &p)) return e;
  if (auto e = get_bool(obj, "include_stop_str_in_output", &p.include_stop_str_in_output)) return e;
  if (auto e = refuse_unsupported(obj, r->kind)) return e;
  if (auto e = parse_logit_bias(obj, lim, &p)) return e;
  if (auto e = get_string(obj, "user", &r->user)) return e;
  if (auto e = get_bool(obj, "return_tokens_as_token_ids", &r->tokens_as_ids)) return e;
  if (auto e = get_bool(obj, "stream", &r->stream)) return e;
  bool plp_set = false;
  if (auto e = get_int(obj, "prompt_logprobs", 0, lim.max_logprobs, &r->prompt_logprobs, &plp_set)) return e;
  if (plp_set && r->stream)  // as vLLM answers
    return bad_request("'prompt_logprobs' is not available when 'stream' is true", "prompt_logprobs");
  p.prompt_logprobs = r->prompt_logprobs;
  if (const json* t = field(obj, "truncate_prompt_tokens")) {
    if (auto e = to_int(*t, "truncate_prompt_tokens", 1, std::numeric_limits<int32_t>::max(),
                        &r->truncate_prompt_tokens))
      return e;
  }
  if (const json* so = field(obj, "stream_options")) {
    if (!so->is_object()) return type_error("stream_options", "an object");
    if (!r->stream) return bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    if (auto e = get_bool(*so, "include_usage", &r->include_usage)) return e;
    if (auto e = get_bool(*so, "continuous_usage_stats", &r->continuous_usage)) return e;
  }
  if (auto e = parse_output_format(obj, r)) return e;
  if (const json* tools = field(obj, "tools"); tools && r->kind == ApiKind::kCompletion) {
    if (!tools->is_array()) return type_error("tools", "a list");
    if (!tools->empty()) return bad_request("'tools' is only supported on /v1/chat/completions", "tools");
  }
  return std::nullopt;
}

Err message_content(const json& msg, const std::string& role, std::string* text) {
  const json* c = field(msg, "content");
  if (!c) {
    if (role == "assistant") return std::nullopt;  // e.g. an empty assistant turn
    return bad_request("messages: a '" + role + "' message needs 'content'", "messages");
  }
  if (c->is_string()) {
    *text = c->get<std::string>();
    return std::nullopt;
  }
  if (!c->is_array()) return bad_request("messages: 'content' must be a string or a list of parts", "messages");
  for (const json& part : *c) {
    if (!part.is_object()) return bad_request("messages: content parts must be objects", "messages");
    const json* type = field(part, "type");
    if (!type || !type->is_string()) return bad_request("messages: content parts need a string 'type'", "messages");
    if (type->get<std::string>() != "text")
      return bad_request("messages: content part type '" + type->get<std::string>().substr(0, 32) +
                             "' is not supported (text only)",
                         "messages");
    const json* t = field(part, "text");
    if (!t || !t->is_string()) return bad_request("messages: text parts need a string 'text'", "messages");
    *text += t->get<std::string>();
  }
  return std::nullopt;
}

// Tool turns: an assistant message's tool_calls (arguments parsed for the template) and a
// tool message's tool_call_id.
Err tool_message_fields(const json& msg, const std::string& role, nlohmann::ordered_json* norm) {
  if (const json* calls = field(msg, "tool_calls")) {
    if (role != "assistant") return bad_request("messages: only assistant messages may hold 'tool_calls'", "messages");
    nlohmann::ordered_json normalized;
    if (auto e = normalize_tool_calls(*calls, &normalized)) return e;
    (*norm)["tool_calls"] = std::move(normalized);
  }
  if (role != "tool") return std::nullopt;
  const json* id = field(msg, "tool_call_id");
  if (!id || !id->is_string()) return bad_request("messages: a 'tool' message needs a string 'tool_call_id'", "messages");
  (*norm)["tool_call_id"] = id->get<std::string>();
  return std::nullopt;
}

Err parse_messages(const json& obj, const RequestLimits& lim, nlohmann::ordered_json* out) {
  const json* m = field(obj, "messages");
  if (!m) return bad_request("'messages' is required", "messages");
  if (!m->is_array() || m->empty()) return bad_request("'messages' must be a non-empty list", "messages");
  if (m->size() > static_cast<size_t>(lim.max_messages))
    return bad_request("'messages' may hold at most " + std::to_string(lim.max_messages) + " entries", "messages");
  *out = nlohmann::ordered_json::array();
  for (const json& msg : *m) {
    if (!msg.is_object()) return bad_request("messages: each message must be an object", "messages");
    const json* role = field(msg, "role");
    if (!role || !role->is_string()) return bad_request("messages: each message needs a string 'role'", "messages");
    std::string r = role->get<std::string>();
    if (r == "developer") r = "system";
    if (r != "system" && r != "user" && r != "assistant" && r != "tool")
      return bad_request("messages: role '" + r.substr(0, 32) + "' is not supported (system, user, assistant, tool)",
                         "messages");
    std::string text;
    if (auto e = message_content(msg, r, &text)) return e;
    nlohmann::ordered_json norm = {{"role", r}, {"content", text}};
    if (const json* name = field(msg, "name"); name && name->is_string()) norm["name"] = name->get<std::string>();
    if (auto e = tool_message_fields(msg, r, &norm)) return e;
    out->push_back(std::move(norm));
  }
  return std::nullopt;
}

Err parse_prompt(const json& obj, const RequestLimits& lim, ApiRequest* r) {
  const json* p = field(obj, "prompt");
  if (!p) return bad_request("'prompt' is required", "prompt");
  const size_t max_prompts = static_cast<size_t>(lim.max_prompts);
  const size_t max_ids = static_cast<size_t>(std::numeric_limits<int32_t>::max());
  if (p->is_string()) {
    r->text_prompts.push_back(p->get<std::string>());
    return std::nullopt;
  }
  if (!p->is_array() || p->empty())
    return bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists",
                       "prompt");
  const json& first = (*p)[0];
  if (first.is_number()) {
    r->token_prompts.emplace_back();
    return parse_token_list(*p, "prompt", max_ids, &r->token_prompts.back());
  }
  if (p->size() > max_prompts)
    return bad_request("'prompt' may hold at most " + std::to_string(max_prompts) + " prompts", "prompt");
  if (first.is_string()) {
    for (const json& s : *p) {
      if (!s.is_string()) return bad_request("'prompt' list entries must all be strings", "prompt");
      r->text_prompts.push_back(s.get<std::string>());
    }
    return std::nullopt;
  }
  if (first.is_array()) {
    for (const json& ids : *p) {
      r->token_prompts.emplace_back();
      if (auto e = parse_token_list(ids, "prompt", max_ids, &r->token_prompts.back())) return e;
      if (r->token_prompts.back().empty()) return bad_request("'prompt' token lists must not be empty", "prompt");
    }
    return std::nullopt;
  }
  return bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists",
                     "prompt");
}

Err check_choices(const RequestLimits& lim, const ApiRequest& r) {
  const int64_t total = static_cast<int64_t>(r.params.n) * r.num_prompts();
  if (total > lim.max_choices)
    return bad_request("n x prompts must be at most " + std::to_string(lim.max_choices), "n");
  return std::nullopt;
}

}  // namespace

std::optional<ApiError> parse_json_object(std::string_view body, const RequestLimits& limits,
                                          nlohmann::json* out) {
  if (auto e = check_depth(body, limits.max_json_depth)) return e;
  json j = json::parse(body.begin(), body.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return bad_request("the request body is not valid JSON");
  if (!j.is_object()) return bad_request("the request body must be a JSON object");
  *out = std::move(j);
  return std::nullopt;
}

std::optional<ApiError> parse_chat_request(std::string_view body, const RequestLimits& limits, ApiRequest* out) {
  json obj;
  if (auto e = parse_json_object(body, limits, &obj)) return e;
  *out = ApiRequest{};
  out->kind = ApiKind::kChat;
  if (auto e = parse_messages(obj, limits, &out->messages)) return e;
  if (auto e = parse_common(obj, limits, out)) return e;
  if (auto e = parse_chat_ending(obj, &out->add_generation_prompt, &out->continue_final_message)) return e;
  if (auto e = get_bool(obj, "logprobs", &out->want_logprobs)) return e;
  bool top_set = false;
  if (auto e = get_int(obj, "top_logprobs", 0, limits.max_logprobs, &out->top_logprobs, &top_set)) return e;
  if (top_set && out->top_logprobs > 0 && !out->want_logprobs)
    return bad_request("'top_logprobs' needs 'logprobs' set to true", "top_logprobs");
  if (out->want_logprobs) out->params.logprobs = out->top_logprobs;
  keep_schema_order(body, out);
  if (auto e = parse_chat_tools(body, out)) return e;
  return check_choices(limits, *out);
}

std::optional<ApiError> parse_completion_request(std::string_view body, const RequestLimits& limits,
                                                 ApiRequest* out) {
  json obj;
  if (auto e = parse_json_object(body, limits, &obj)) return e;
  *out = ApiRequest{};
  out->kind = ApiKind::kCompletion;
  if (auto e = parse_prompt(obj, limits, out)) return e;
  if (auto e = parse_common(obj, limits, out)) return e;
  if (auto e = get_bool(obj, "echo", &out->echo)) return e;
  std::string suffix;
  if (auto e = get_string(obj, "suffix", &suffix)) return e;
  if (!suffix.empty()) return bad_request("'suffix' is not supported by this server", "suffix");
  bool lp_set = false;
  if (auto e = get_int(obj, "logprobs", 0, limits.max_logprobs, &out->top_logprobs, &lp_set)) return e;
  out->want_logprobs = lp_set;
  if (lp_set) out->params.logprobs = out->top_logprobs;
  // Echo with logprobs reports the prompt tokens' logprobs first, as vLLM does: the engine
  // scores the prompt with enough alternatives for both uses.
  if (out->echo && lp_set) out->params.prompt_logprobs = std::max(out->params.prompt_logprobs, out->top_logprobs);
  keep_schema_order(body, out);
  return check_choices(limits, *out);
}

std::optional<ApiError> parse_tokenize_request(std::string_view body, const RequestLimits& limits,
                                               TokenizeRequest* out) {
  json obj;
  if (auto e = parse_json_object(body, limits, &obj)) return e;
  *out = TokenizeRequest{};
  if (const json* p = field(obj, "prompt")) {
    if (!p->is_string()) return type_error("prompt", "a string");
    out->prompt = p->get<std::string>();
  } else if (field(obj, "messages")) {
    if (auto e = parse_messages(obj, limits, &out->messages)) return e;
    ApiRequest tools;
    if (auto e = parse_chat_tools(body, &tools)) return e;
    out->tools = tools.tools.tools_json;
  } else {
    return bad_request("'prompt' or 'messages' is required", "prompt");
  }
  if (auto e = get_bool(obj, "add_special_tokens", &out->add_special_tokens)) return e;
  return parse_chat_ending(obj, &out->add_generation_prompt, &out->continue_final_message);
}

std::optional<ApiError> parse_detokenize_request(std::string_view body, const RequestLimits& limits,
                                                 std::vector<int32_t>* tokens) {
  json obj;
  if (auto e = parse_json_object(body, limits, &obj)) return e;
  const json* t = field(obj, "tokens");
  if (!t) return bad_request("'tokens' is required", "tokens");
  return parse_token_list(*t, "tokens", static_cast<size_t>(std::numeric_limits<int32_t>::max()), tokens);
}

std::optional<ApiError> parse_lora_adapter_request(std::string_view body, const RequestLimits& limits, bool want_path,
                                                   std::string* name, std::string* path) {
  json obj;
  if (auto e = parse_json_object(body, limits, &obj)) return e;
  if (auto e = get_string(obj, "lora_name", name)) return e;
  if (name->empty()) return bad_request("'lora_name' is required", "lora_name");
  if (name->size() > 256) return bad_request("'lora_name' is longer than 256 bytes", "lora_name");
  if (const json* id = field(obj, "lora_int_id"); id && !id->is_number_integer())
    return type_error("lora_int_id", "an integer");
  if (!want_path) return std::nullopt;
  if (auto e = get_string(obj, "lora_path", path)) return e;
  if (path->empty()) return bad_request("'lora_path' is required", "lora_path");
  return std::nullopt;
}

}  // namespace lancet::server
