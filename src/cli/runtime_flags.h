// The engine flags every model-running command shares (run, generate, bench), with vLLM's
// names, filling one RuntimeConfig.
#pragma once

#include <CLI/CLI.hpp>

#include "runtime/runtime.h"
#include "runner/sampling_params.h"

namespace lancet::cli {

void add_runtime_flags(CLI::App& app, RuntimeConfig* config);
// --temperature, --top-p, --top-k, --min-p, --seed, --max-tokens, penalties.
void add_sampling_flags(CLI::App& app, SamplingParams* params, int64_t* seed);

}  // namespace lancet::cli
