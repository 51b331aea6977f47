// `lancet generate --prompts-file`: the JSON-lines prompt file. Each non-empty line is one
// object: {"prompt": text} or {"prompt_ids": [ids]}, with optional sampling fields (the API's
// names) that override the command line's for that prompt. Errors name the file and line.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "runner/sampling_params.h"

namespace lancet::cli {

struct PromptLine {
  int64_t line = 0;  // 1-based line number in the file
  bool has_text = false;
  std::string prompt;               // when has_text
  std::vector<int32_t> prompt_ids;  // otherwise
  SamplingParams params;
};

// One line's object; `defaults` are the command line's sampling settings. The message of a
// bad line names the field; read_prompts_file adds the file and line.
Status parse_prompt_line(const std::string& text, const SamplingParams& defaults, PromptLine* out);
// The whole file; an empty file (no prompts) is an error too.
StatusOr<std::vector<PromptLine>> read_prompts_file(const std::string& path, const SamplingParams& defaults);

}  // namespace lancet::cli
