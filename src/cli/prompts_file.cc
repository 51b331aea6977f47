// Prompt-file lines -> prompts and per-prompt sampling settings (see prompts_file.h).
#include "cli/prompts_file.h"

#include <fstream>
#include <limits>

#include <nlohmann/json.hpp>

namespace lancet::cli {
namespace {

using Json = nlohmann::json;

Status want_int(const Json& v, const char* name, int64_t lo, int64_t hi, int64_t* out) {
  if (!v.is_number_integer()) return InvalidArgument(std::string(name) + " must be an integer");
  const int64_t x = v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX)
                        ? INT64_MAX
                        : v.get<int64_t>();
  if (x < lo || x > hi)
    return InvalidArgument(std::string(name) + " must be in [" + std::to_string(lo) + ", " + std::to_string(hi) +
                           "], got " + std::to_string(x));
  *out = x;
  return OkStatus();
}

Status want_float(const Json& v, const char* name, float* out) {
  if (!v.is_number()) return InvalidArgument(std::string(name) + " must be a number");
  *out = v.get<float>();
  return OkStatus();  // ranges: SamplingParams::validate, once the model is known
}

Status want_ids(const Json& v, const char* name, std::vector<int32_t>* out) {
  if (!v.is_array()) return InvalidArgument(std::string(name) + " must be an array of token ids");
  out->clear();
  for (const Json& t : v) {
    int64_t id = 0;
    RETURN_IF_ERROR(want_int(t, name, 0, std::numeric_limits<int32_t>::max(), &id));
    out->push_back(static_cast<int32_t>(id));
  }
  return OkStatus();
}

Status set_field(const std::string& key, const Json& v, PromptLine* out) {
  SamplingParams& p = out->params;
  int64_t i = 0;
  if (key == "prompt") {
    if (!v.is_string()) return InvalidArgument("prompt must be a string (token ids go in prompt_ids)");
    out->has_text = true;
    out->prompt = v.get<std::string>();
  } else if (key == "prompt_ids") {
    RETURN_IF_ERROR(want_ids(v, "prompt_ids", &out->prompt_ids));
  } else if (key == "max_tokens" || key == "min_tokens") {
    RETURN_IF_ERROR(want_int(v, key.c_str(), key == "max_tokens" ? 1 : 0, std::numeric_limits<int32_t>::max(), &i));
    (key == "max_tokens" ? p.max_tokens : p.min_tokens) = static_cast<int32_t>(i);
  } else if (key == "top_k") {
    RETURN_IF_ERROR(want_int(v, "top_k", -1, std::numeric_limits<int32_t>::max(), &i));
    p.top_k = static_cast<int32_t>(i);
  } else if (key == "seed") {
    RETURN_IF_ERROR(want_int(v, "seed", 0, std::numeric_limits<int64_t>::max(), &i));
    p.seed = static_cast<uint64_t>(i);
  } else if (key == "temperature") {
    RETURN_IF_ERROR(want_float(v, "temperature", &p.temperature));
  } else if (key == "top_p") {
    RETURN_IF_ERROR(want_float(v, "top_p", &p.top_p));
  } else if (key == "min_p") {
    RETURN_IF_ERROR(want_float(v, "min_p", &p.min_p));
  } else if (key == "repetition_penalty") {
    RETURN_IF_ERROR(want_float(v, "repetition_penalty", &p.repetition_penalty));
  } else if (key == "presence_penalty") {
    RETURN_IF_ERROR(want_float(v, "presence_penalty", &p.presence_penalty));
  } else if (key == "frequency_penalty") {
    RETURN_IF_ERROR(want_float(v, "frequency_penalty", &p.frequency_penalty));
  } else if (key == "ignore_eos") {
    if (!v.is_boolean()) return InvalidArgument("ignore_eos must be true or false");
    p.ignore_eos = v.get<bool>();
  } else if (key == "stop") {
    p.stop.clear();
    if (v.is_string()) {
      p.stop.push_back(v.get<std::string>());
    } else if (v.is_array()) {
      for (const Json& s : v) {
        if (!s.is_string()) return InvalidArgument("stop must be a string or an array of strings");
        p.stop.push_back(s.get<std::string>());
      }
    } else if (!v.is_null()) {
      return InvalidArgument("stop must be a string or an array of strings");
    }
  } else if (key == "stop_token_ids") {
    RETURN_IF_ERROR(want_ids(v, "stop_token_ids", &p.stop_token_ids));
  } else {
    // A misspelt field would otherwise silently sample with the defaults.
    return InvalidArgument("unknown field '" + key.substr(0, 64) + "'");
  }
  return OkStatus();
}

}  // namespace

Status parse_prompt_line(const std::string& text, const SamplingParams& defaults, PromptLine* out) {
  const Json j = Json::parse(text, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) return InvalidArgument("not valid JSON");
  if (!j.is_object()) return InvalidArgument("each line must be a JSON object");
  out->has_text = false;
  out->prompt.clear();
  out->prompt_ids.clear();
  out->params = defaults;
  if (j.contains("prompt") == j.contains("prompt_ids")) return InvalidArgument("give exactly one of prompt and prompt_ids");
  for (const auto& [key, v] : j.items()) RETURN_IF_ERROR(set_field(key, v, out));
  if (out->has_text ? out->prompt.empty() : out->prompt_ids.empty()) return InvalidArgument("the prompt is empty");
  return OkStatus();
}

StatusOr<std::vector<PromptLine>> read_prompts_file(const std::string& path, const SamplingParams& defaults) {
  std::ifstream f(path);
  if (!f) return NotFound("cannot open prompts file " + path);
  std::vector<PromptLine> out;
  std::string text;
  for (int64_t n = 1; std::getline(f, text); ++n) {
    if (text.find_first_not_of(" \t\r") == std::string::npos) continue;  // blank lines separate nothing
    PromptLine line;
    line.line = n;
    Status st = parse_prompt_line(text, defaults, &line);
    if (!st.ok()) return InvalidArgument(path + ":" + std::to_string(n) + ": " + st.message());
    out.push_back(std::move(line));
  }
  if (f.bad()) return IoError("cannot read prompts file " + path);
  if (out.empty()) return InvalidArgument(path + " holds no prompts");
  return out;
}

}  // namespace lancet::cli
