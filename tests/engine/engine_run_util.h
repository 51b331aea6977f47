// Helpers shared by the engine-level tests (tests/engine, tests/backend_cuda): a fake model's
// deterministic logits, an executor view without device sampling, and running an engine until
// every request is done.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <span>
#include <vector>

#include "engine/engine.h"
#include "runner/model_executor.h"

namespace lancet::testing {

// Logit of token v after ctx, in [0, scale): a hash of the last two tokens, of the context's
// sum mod 3 and of v (salted). Few states, so greedy output falls into loops that n-gram
// lookup can predict.
inline float looping_logit(const std::vector<int32_t>& ctx, int32_t v, uint64_t salt, float scale) {
  uint64_t h = 1469598103934665603ull ^ salt;
  const size_t n = ctx.size();
  int64_t sum = 0;
  for (int32_t t : ctx) sum += t;
  for (int32_t t : {n >= 2 ? ctx[n - 2] : -1, n >= 1 ? ctx[n - 1] : -1, static_cast<int32_t>(sum % 3), v})
    h = (h ^ static_cast<uint64_t>(t + 11)) * 1099511628211ull;
  h ^= h >> 29;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 32;
  return static_cast<float>(h % 100000) / 100000.0f * scale;
}

// Forwards execute() only: the same model run without device sampling.
class HostOnlyExecutor : public ModelExecutor {
 public:
  explicit HostOnlyExecutor(ModelExecutor& m) : m_(m) {}
  int64_t vocab_size() const override { return m_.vocab_size(); }
  int32_t block_size() const override { return m_.block_size(); }
  int64_t num_blocks() const override { return m_.num_blocks(); }
  Status execute(std::span<const SeqStepInput> batch, std::vector<float>* logits) override {
    return m_.execute(batch, logits);
  }

 private:
  ModelExecutor& m_;
};

// Submits every request to a fresh engine over exec and steps it until all are done; each
// request's tokens, in request order.
inline std::vector<std::vector<int32_t>> run_engine_to_end(ModelExecutor& exec, const std::vector<GenerationRequest>& reqs,
                                                          const SchedulerConfig& scheduler, bool async_scheduling = false,
                                                          EngineStats* stats = nullptr) {
  EngineConfig cfg;
  cfg.scheduler = scheduler;
  cfg.async_scheduling = async_scheduling;
  Engine engine(cfg, &exec);
  std::map<int64_t, size_t> index;
  for (const auto& q : reqs) {
    auto id = engine.add_request(q);
    EXPECT_TRUE(id.ok()) << id.status().to_string();
    if (id.ok()) index[*id] = index.size();
  }
  std::vector<std::vector<int32_t>> out(reqs.size());
  for (int guard = 0; engine.has_work() && guard < 10000; ++guard) {
    auto ev = engine.step();
    EXPECT_TRUE(ev.ok() && engine.last_error().ok()) << engine.last_error().to_string();
    if (!ev.ok()) break;
    for (const auto& e : *ev)
      if (e.token >= 0) out[index.at(e.request_id)].push_back(e.token);
  }
  if (stats) *stats = engine.stats();
  return out;
}

}  // namespace lancet::testing
