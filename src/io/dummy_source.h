// Random weights of a config's shape (`--load-format dummy`): benchmarks of Llama-3-8B/70B
// shapes without a checkpoint. Weights are bf16, uniform with standard deviation 0.02, from a
// fixed seed (so runs are repeatable); norms are 1. The tensor table is the one check_llama_tensors expects.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "io/model_source.h"

namespace lancet {

// `config_path`: an HF config.json or a directory holding one (its weights are ignored).
StatusOr<std::unique_ptr<ModelSource>> open_dummy_source(const std::string& config_path,
                                                        uint64_t seed = 0);

}  // namespace lancet
