// Where a step's time goes in `lancet bench`: with --profile-steps, the device time by kind of
// op for decode steps and for steps with prompt tokens (Runtime::take_step_profile); in every
// run, the device timeline of the asynchronous steps: busy time per step and the gaps in which
// the device waited for the host (Runtime::take_device_timeline).
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "runner/device_timeline.h"
#include "runner/llama_executor.h"

namespace lancet {

// j["step_profile"] = {"decode": {...}, "prompt": {...}}, each with steps, busy_ms_per_step,
// gap_ms_per_step (idle device between consecutive steps) and ops: {kind: {ms_per_step,
// calls_per_step, share}} (share of the busy time). Nothing when no step was timed.
void add_step_profile(const StepProfile& p, nlohmann::json* j);
// The same as a table (nothing without j["step_profile"]).
void print_step_profile(const nlohmann::json& j);

// j["device_timeline"] = {steps, busy_ms_per_step, gaps (steps launched while the previous one
// was in flight), gap_us_mean / _p50 / _p99 / _max, idle_share (gap time / (busy + gap
// time)), and the same fields for "decode" and "prompt" steps where there were any}. Nothing
// when no step was timed.
void add_device_timeline(const DeviceTimelineStats& t, nlohmann::json* j);
// "device gaps" (the idle time between steps) under a label column of `width`, then a line per
// kind of step (nothing without j["device_timeline"]).
void print_device_timeline(const nlohmann::json& j, int width);

// The p-th percentile (0..100) of v, interpolated between neighbours; 0 for no values.
double percentile(std::vector<double> v, double p);

}  // namespace lancet
