// The speculative-decoding settings, as vLLM's --speculative-config JSON spells them:
//   {"method": "draft", "model": PATH, "num_speculative_tokens": k}
//   {"method": "ngram", "num_speculative_tokens": k, "prompt_lookup_min": 2, "prompt_lookup_max": 4}
// plus vLLM's "disable_by_batch_size" (turn speculation off above that many running
// sequences) and lancet's "adaptive" (default true: choose k each step from measured costs
// and acceptance, down to 0; see docs/SPECULATIVE.md).
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "core/status.h"

namespace lancet {

enum class SpecMethod { kNone, kDraft, kNgram };

struct SpeculativeConfig {
  SpecMethod method = SpecMethod::kNone;
  std::string model;                   // draft model (method draft)
  int32_t num_speculative_tokens = 0;  // k: drafts per step (the most; adaptive may use fewer)
  int32_t prompt_lookup_min = 0;       // ngram: shortest suffix n-gram matched
  int32_t prompt_lookup_max = 0;       // ngram: longest suffix n-gram matched (tried first)
  int64_t disable_by_batch_size = 0;   // 0 = no fixed limit
  bool adaptive = true;
  // Benchmarks only ("force_acceptance_rate"): accept each draft token with this probability
  // whatever the models say, to measure speed-up against acceptance with dummy weights. It
  // changes the output, so the Runtime refuses it unless RuntimeConfig allows it. < 0 = off.
  double force_acceptance_rate = -1.0;

  bool enabled() const { return method != SpecMethod::kNone && num_speculative_tokens > 0; }
  Status validate() const;
};

const char* spec_method_name(SpecMethod m);  // "none", "draft", "ngram"

// "" gives a disabled config. Unknown keys and bad values are InvalidArgument errors that
// name the key.
StatusOr<SpeculativeConfig> parse_speculative_config(std::string_view json);

}  // namespace lancet
