// `lancet bench ... --profile-steps`: where the device time of a step goes, by kind of op, for
// decode steps and for steps with prompt tokens, and how long the device sat idle between
// steps (Runtime::take_step_profile).
#pragma once

#include <nlohmann/json.hpp>

#include "runner/llama_executor.h"

namespace lancet {

// j["step_profile"] = {"decode": {...}, "prompt": {...}}, each with steps, busy_ms_per_step,
// gap_ms_per_step (idle device between consecutive steps) and ops: {kind: {ms_per_step,
// calls_per_step, share}} (share of the busy time). Nothing when no step was timed.
void add_step_profile(const StepProfile& p, nlohmann::json* j);
// The same as a table (nothing without j["step_profile"]).
void print_step_profile(const nlohmann::json& j);

}  // namespace lancet
