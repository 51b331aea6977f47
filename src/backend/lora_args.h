// LoRA adapters on the backend: the low-rank factors of one adapted projection for every
// adapter slot, and which rows of a step use which slot. An adapted projection computes
//   y[t] = x[t] . W^T + (x[t] . A_s^T) . (scale_s * B_s)^T
// for a token t of a sequence served with the adapter in slot s; tokens without an adapter
// (the base model) are in no slot. The model (model/lora_weights.h) owns one
// LoraModuleWeights per adapted projection and layer; the step's rows come with its StepView.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace lancet {

// One projection's factors in every slot, in the backend's storage (f32 on the CPU, bf16 on
// CUDA). Slot s's A rows past its rank and B columns past its rank are zero, so every slot is
// computed at max_rank.
struct LoraModuleWeights {
  int64_t num_slots = 0;
  int64_t max_rank = 0;  // R
  int64_t in = 0;        // input features of the projection (this rank's columns)
  int64_t out = 0;       // output features (this rank's rows)
  DType dtype = DType::kF32;
  void* a = nullptr;              // [num_slots, R, in] backend memory
  void* b = nullptr;              // [num_slots, out, R] backend memory, scale folded in
  int32_t* slot_rank = nullptr;   // [num_slots] backend memory: 0 = the slot leaves it alone
  std::vector<int32_t> host_rank; // [num_slots], the same on the host
  std::shared_ptr<void> owner;    // keeps a, b and slot_rank alive

  bool any_slot() const {
    for (int32_t r : host_rank)
      if (r > 0) return true;
    return false;
  }
};

// The step's adapted rows grouped by slot: rows[slot_start[s] .. slot_start[s + 1]) are the
// token indices served with slot s (backend memory). num_rows is the host's count of them (an
// upper bound in a captured graph's step, where slot_start holds the real ones).
struct LoraStepRows {
  int64_t num_slots = 0;
  int64_t num_rows = 0;
  const int32_t* rows = nullptr;        // [num_rows]
  const int32_t* slot_start = nullptr;  // [num_slots + 1]
  bool empty() const { return num_rows == 0; }
};

// y[t] += (x[t] . A_s^T) . B_s^T for every adapted row t (slot s); other rows are untouched.
struct LoraApplyArgs {
  const float* x = nullptr;  // [num_tokens, w->in]
  float* y = nullptr;        // [num_tokens, w->out]
  float* scratch = nullptr;  // [rows.num_rows, w->max_rank] backend memory
  int64_t num_tokens = 0;
  const LoraModuleWeights* w = nullptr;
  LoraStepRows rows;
};

}  // namespace lancet
