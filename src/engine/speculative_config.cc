// --speculative-config parsing and validation.
#include "engine/speculative_config.h"

#include <algorithm>

#include <nlohmann/json.hpp>

namespace lancet {

const char* spec_method_name(SpecMethod m) {
  switch (m) {
    case SpecMethod::kNone: return "none";
    case SpecMethod::kDraft: return "draft";
    case SpecMethod::kNgram: return "ngram";
  }
  return "none";
}

Status SpeculativeConfig::validate() const {
  if (method == SpecMethod::kNone) return OkStatus();
  if (num_speculative_tokens < 1 || num_speculative_tokens > 32)
    return InvalidArgument("speculative config: num_speculative_tokens must be in [1, 32]");
  if (method == SpecMethod::kDraft && model.empty())
    return InvalidArgument("speculative config: method draft needs \"model\" (the draft model's path)");
  if (method == SpecMethod::kNgram) {
    if (prompt_lookup_min < 1) return InvalidArgument("speculative config: prompt_lookup_min must be at least 1");
    if (prompt_lookup_max < prompt_lookup_min)
      return InvalidArgument("speculative config: prompt_lookup_max must be at least prompt_lookup_min");
    if (prompt_lookup_max > 64) return InvalidArgument("speculative config: prompt_lookup_max must be at most 64");
  }
  if (disable_by_batch_size < 0) return InvalidArgument("speculative config: disable_by_batch_size must be positive");
  return OkStatus();
}

StatusOr<SpeculativeConfig> parse_speculative_config(std::string_view text) {
  SpeculativeConfig c;
  if (text.empty()) return c;
  auto j = nlohmann::json::parse(text, nullptr, false);
  if (j.is_discarded() || !j.is_object())
    return InvalidArgument("speculative config: expected a JSON object, got '" + std::string(text) + "'");
  bool has_min = false, has_max = false;
  std::string method;
  for (auto it = j.begin(); it != j.end(); ++it) {
    const std::string& key = it.key();
    const auto& v = it.value();
    auto want_int = [&](int64_t lo) -> StatusOr<int64_t> {
      if (!v.is_number_integer() || v.get<int64_t>() < lo)
        return InvalidArgument("speculative config: \"" + key + "\" must be an integer >= " + std::to_string(lo));
      return v.get<int64_t>();
    };
    if (key == "method") {
      if (!v.is_string()) return InvalidArgument("speculative config: \"method\" must be a string");
      method = v.get<std::string>();
    } else if (key == "model") {
      if (!v.is_string()) return InvalidArgument("speculative config: \"model\" must be a string");
      c.model = v.get<std::string>();
    } else if (key == "num_speculative_tokens") {
      ASSIGN_OR_RETURN(int64_t k, want_int(1));
      if (k > 32) return InvalidArgument("speculative config: num_speculative_tokens must be at most 32");
      c.num_speculative_tokens = static_cast<int32_t>(k);
    } else if (key == "prompt_lookup_min") {
      ASSIGN_OR_RETURN(int64_t n, want_int(1));
      c.prompt_lookup_min = static_cast<int32_t>(std::min<int64_t>(n, 1 << 20));
      has_min = true;
    } else if (key == "prompt_lookup_max") {
      ASSIGN_OR_RETURN(int64_t n, want_int(1));
      c.prompt_lookup_max = static_cast<int32_t>(std::min<int64_t>(n, 1 << 20));
      has_max = true;
    } else if (key == "disable_by_batch_size") {
      ASSIGN_OR_RETURN(c.disable_by_batch_size, want_int(1));
    } else if (key == "force_acceptance_rate") {
      if (!v.is_number() || v.get<double>() < 0.0 || v.get<double>() > 1.0)
        return InvalidArgument("speculative config: \"force_acceptance_rate\" must be a number in [0, 1]");
      c.force_acceptance_rate = v.get<double>();
    } else if (key == "adaptive") {
      if (!v.is_boolean()) return InvalidArgument("speculative config: \"adaptive\" must be true or false");
      c.adaptive = v.get<bool>();
    } else {
      return InvalidArgument("speculative config: unknown key \"" + key +
                             "\" (known: method, model, num_speculative_tokens, prompt_lookup_min, "
                             "prompt_lookup_max, disable_by_batch_size, adaptive, force_acceptance_rate)");
    }
  }
  if (method.empty()) method = c.model.empty() ? "" : (c.model == "[ngram]" ? "ngram" : "draft");
  if (method == "draft" || method == "draft_model") {
    c.method = SpecMethod::kDraft;
  } else if (method == "ngram" || method == "[ngram]") {
    c.method = SpecMethod::kNgram;
    if (c.model == "[ngram]") c.model.clear();
    // vLLM's defaults: both 5 when neither is given, else the one given for both.
    if (!has_min && !has_max) c.prompt_lookup_min = c.prompt_lookup_max = 5;
    else if (!has_min) c.prompt_lookup_min = c.prompt_lookup_max;
    else if (!has_max) c.prompt_lookup_max = c.prompt_lookup_min;
  } else {
    return InvalidArgument("speculative config: \"method\" must be \"draft\" or \"ngram\", got '" + method + "'");
  }
  if (c.num_speculative_tokens == 0)
    return InvalidArgument("speculative config: \"num_speculative_tokens\" is required");
  RETURN_IF_ERROR(c.validate());
  return c;
}

}  // namespace lancet
