// Asynchronous scheduling (engine/engine_async.cc): a launched step whose sampled tokens the
// host has not seen yet.
#pragma once

#include <chrono>
#include <vector>

#include "engine/step_cost_model.h"
#include "kv/kv_cache_manager.h"

namespace lancet {

struct InflightStep {
  struct Seq {
    SeqId id = 0;
    bool samples = false;  // drew a token (its sequence has it in flight)
  };
  std::vector<Seq> seqs;  // the step's sequences, in batch order
  std::chrono::steady_clock::time_point launched_at;
  bool timed = false;  // max_step_ms: its features feed the step cost model when it is collected
  StepFeatures features;
};

}  // namespace lancet
