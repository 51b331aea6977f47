// LoRA adapters in the model: for every layer and adaptable projection (q/k/v/o, gate/up/
// down), the factors of each of num_slots adapter slots on one rank's backend
// (backend/lora_args.h). Under tensor parallelism they are split as the base weights are
// (model/tp_shard.h): a column-parallel projection keeps the rows of B this rank computes (A
// whole), a row-parallel one (o, down) the columns of A that match its input slice (B whole):
// the expand is linear, so the all-reduce after the projection sums the ranks' partial
// products into the full low-rank term.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/lora_adapter.h"
#include "io/model_config.h"
#include "model/tp_shard.h"

namespace lancet {

enum class LoraTarget : int { kQ = 0, kK, kV, kO, kGate, kUp, kDown };
inline constexpr int kNumLoraTargets = 7;

// The HF weight name of `target` in layer `layer` ("model.layers.3.self_attn.q_proj.weight").
std::string lora_target_weight(int64_t layer, LoraTarget target);

struct LoraSlotsConfig {
  int64_t num_slots = 0;  // adapters resident at once
  int64_t max_rank = 0;   // the largest rank an adapter may have
};

// One rank's factors: layers[l][target] for every slot.
struct LoraRankWeights {
  std::vector<std::array<LoraModuleWeights, kNumLoraTargets>> layers;
};

// Room for `config` on one rank (every slot empty).
StatusOr<LoraRankWeights> alloc_lora_weights(Backend& be, const ModelConfig& cfg, const TpRankLayout& layout,
                                             const LoraSlotsConfig& config);

// Slot `slot` of one rank's factors takes the adapter (null: empties the slot). Errors (a rank
// past max_rank, factors of a layer the model lacks or of the wrong shape) leave the slot empty.
Status set_lora_weights_slot(Backend& be, const ModelConfig& cfg, const TpRankLayout& layout, LoraRankWeights& w,
                             int64_t slot, const LoraAdapter* adapter);

// Bytes the factors of `config` take on one rank (the sizes alloc_lora_weights makes, at 2
// bytes per element on CUDA and 4 on the CPU: pass the element size).
int64_t lora_weights_bytes(const ModelConfig& cfg, const TpRankLayout& layout, const LoraSlotsConfig& config,
                           int64_t element_bytes);

}  // namespace lancet
