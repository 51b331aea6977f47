// Evaluation against golden logits written by Hugging Face (fixtures/*/golden.safetensors +
// golden.json): for each case, logits at the stored prompt positions and the greedy
// continuation decoded token by token through the paged cache. Used by `lancet eval-logits`
// and the eval and model tests.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "io/safetensors.h"
#include "model/llama_model.h"

namespace lancet {

struct GoldenCase {
  std::string name;
  int64_t prompt_len = 0;
  int64_t greedy_steps = 0;
};

// Reads the golden.json next to a golden .safetensors ("cases": [{name, prompt_len, greedy_steps}]).
StatusOr<std::vector<GoldenCase>> read_golden_cases(const std::string& golden_safetensors_path);

struct GoldenEvalOptions {
  int64_t block_size = 16;
  DType kv_dtype = DType::kF32;
  int64_t prefill_chunk = 0;  // 0 = the whole prompt in one step; else chunked prefill
  int32_t lora_slot = -1;     // the model's LoRA adapter slot to compute with (-1: none)
};

struct GoldenCaseResult {
  std::string name;
  int64_t prompt_len = 0;
  int64_t num_positions = 0;
  double max_abs_err = 0;   // over every stored position and vocab entry
  double max_abs_ref = 0;
  double rel_err = 0;       // max_abs_err / max_abs_ref
  double min_cosine = 1;    // worst position
  int64_t top1_agree = 0;   // positions whose argmax matches the reference
  int64_t greedy_match = 0; // leading greedy tokens equal to the reference
  int64_t greedy_total = 0;
  double prefill_seconds = 0;
  double decode_seconds = 0;
};

StatusOr<GoldenCaseResult> eval_golden_case(LlamaModel& model, Backend& backend,
                                            const SafetensorsFile& golden, const GoldenCase& gc,
                                            const GoldenEvalOptions& opts);

}  // namespace lancet
