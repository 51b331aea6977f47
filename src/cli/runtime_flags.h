// The engine flags every model-running command shares (run, generate, bench), with vLLM's
// names, filling one RuntimeConfig.
#pragma once

#include <CLI/CLI.hpp>

#include "runtime/runtime.h"
#include "runner/sampling_params.h"

namespace lancet::cli {

void add_runtime_flags(CLI::App& app, RuntimeConfig* config);
// One --lora-modules entry: name=PATH or {"name": ..., "path": ...}.
StatusOr<RuntimeConfig::LoraModule> parse_lora_module(const std::string& spec);
// --temperature, --top-p, --top-k, --min-p, --seed, --max-tokens, penalties.
void add_sampling_flags(CLI::App& app, SamplingParams* params, int64_t* seed);

}  // namespace lancet::cli
