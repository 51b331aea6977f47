// Random weights of a config's shape (`--load-format dummy`): benchmarks of Llama-3-8B/70B
// shapes without a checkpoint. Weights are bf16, uniform with standard deviation 0.02, from a
// fixed seed (so runs are repeatable); norms are 1. The tensor table is the one check_llama_tensors expects.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "io/model_source.h"

namespace lancet {

struct DummySourceOptions {
  uint64_t seed = 0;
  // The decoder layers' linear weights as an FP8 checkpoint would hold them (compressed-tensors
  // layout: E4M3 codes with per-output-channel f32 weight_scale), made directly in FP8: a
  // 70B-shape model then needs ~70 GB of host memory instead of the 141 GB of its BF16 form.
  // Embedding, lm_head and norms stay BF16, as in real FP8 checkpoints.
  bool fp8_linear = false;
};

// `config_path`: an HF config.json or a directory holding one (its weights are ignored).
StatusOr<std::unique_ptr<ModelSource>> open_dummy_source(const std::string& config_path,
                                                        const DummySourceOptions& opts);
inline StatusOr<std::unique_ptr<ModelSource>> open_dummy_source(const std::string& config_path,
                                                               uint64_t seed = 0) {
  return open_dummy_source(config_path, DummySourceOptions{seed, false});
}

}  // namespace lancet
