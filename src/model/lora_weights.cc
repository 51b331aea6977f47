// LoRA factors per rank: shapes per projection, the adapter's factors sliced to this rank.
#include "model/lora_weights.h"

#include <algorithm>

namespace lancet {
namespace {

constexpr const char* kModule[kNumLoraTargets] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj",
                                                  "self_attn.o_proj", "mlp.gate_proj",    "mlp.up_proj",
                                                  "mlp.down_proj"};

struct Dims {
  int64_t in = 0, out = 0;
};

// The input and output features of a projection on this rank.
Dims local_dims(const ModelConfig& c, const TpRankLayout& l, LoraTarget t) {
  const int64_t H = c.hidden_size, D = c.head_dim;
  switch (t) {
    case LoraTarget::kQ: return {H, l.num_heads * D};
    case LoraTarget::kK:
    case LoraTarget::kV: return {H, l.num_kv_heads * D};
    case LoraTarget::kO: return {l.num_heads * D, H};
    case LoraTarget::kGate:
    case LoraTarget::kUp: return {H, l.intermediate};
    case LoraTarget::kDown: return {l.intermediate, H};
  }
  return {};
}

// The same in the checkpoint: the dims of one rank holding everything.
Dims full_dims(const ModelConfig& c, LoraTarget t) {
  TpRankLayout whole;
  whole.num_heads = c.num_heads;
  whole.num_kv_heads = c.num_kv_heads;
  whole.intermediate = c.intermediate_size;
  return local_dims(c, whole, t);
}

Status clear_slot(Backend& be, LoraRankWeights& w, int64_t slot) {
  for (auto& layer : w.layers)
    for (LoraModuleWeights& m : layer)
      if (m.host_rank.at(static_cast<size_t>(slot)) != 0) RETURN_IF_ERROR(be.set_lora_slot(m, slot, nullptr, nullptr, 0, 0.0f));
  return OkStatus();
}

Status fill_slot(Backend& be, const ModelConfig& cfg, const TpRankLayout& layout, LoraRankWeights& w, int64_t slot,
                 const LoraAdapter& adapter) {
  const int64_t R = w.layers.empty() ? 0 : w.layers[0][0].max_rank;
  if (adapter.rank() > R)
    return InvalidArgument("LoRA adapter of rank " + std::to_string(adapter.rank()) + " is past --max-lora-rank " +
                           std::to_string(R));
  // Every factor must belong to a projection of this model (a deeper model's layers are an error).
  for (const auto& [name, f] : adapter.factors()) {
    bool known = false;
    for (int64_t l = 0; l < cfg.num_layers && !known; ++l)
      for (int t = 0; t < kNumLoraTargets && !known; ++t) known = name == lora_target_weight(l, static_cast<LoraTarget>(t));
    if (!known) return InvalidArgument("LoRA adapter: " + name + " is not a projection of this model");
  }
  const int64_t r = adapter.rank();
  const float scale = static_cast<float>(adapter.scale());
  std::vector<float> a, b, sa, sb;
  for (int64_t l = 0; l < cfg.num_layers; ++l) {
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const LoraTarget target = static_cast<LoraTarget>(t);
      const std::string name = lora_target_weight(l, target);
      const Dims full = full_dims(cfg, target), local = local_dims(cfg, layout, target);
      ASSIGN_OR_RETURN(const bool adapted, adapter.factors_f32(name, full.out, full.in, &a, &b));
      if (!adapted) continue;
      const TpSlice slice = tp_slice_of(name, cfg, layout);
      const float* pa = a.data();
      const float* pb = b.data();
      if (slice.split == TpSplit::kRows && slice.count != full.out) {  // this rank's rows of B
        sb.assign(b.begin() + slice.begin * r, b.begin() + (slice.begin + slice.count) * r);
        pb = sb.data();
      } else if (slice.split == TpSplit::kCols && slice.count != full.in) {  // this rank's columns of A
        sa.resize(static_cast<size_t>(r * slice.count));
        for (int64_t j = 0; j < r; ++j)
          std::copy_n(a.begin() + j * full.in + slice.begin, slice.count, sa.begin() + j * slice.count);
        pa = sa.data();
      }
      LoraModuleWeights& m = w.layers[static_cast<size_t>(l)][static_cast<size_t>(t)];
      if (m.in != local.in || m.out != local.out)
        return Internal("LoRA: " + name + " slice does not match the allocated module");
      RETURN_IF_ERROR(be.set_lora_slot(m, slot, pa, pb, r, scale));
    }
  }
  return OkStatus();
}

}  // namespace

std::string lora_target_weight(int64_t layer, LoraTarget target) {
  return "model.layers." + std::to_string(layer) + "." + kModule[static_cast<int>(target)] + ".weight";
}

StatusOr<LoraRankWeights> alloc_lora_weights(Backend& be, const ModelConfig& cfg, const TpRankLayout& layout,
                                             const LoraSlotsConfig& config) {
  if (config.num_slots <= 0 || config.max_rank <= 0)
    return InvalidArgument("LoRA: the number of adapter slots and the largest rank must be positive");
  LoraRankWeights w;
  w.layers.resize(static_cast<size_t>(cfg.num_layers));
  for (auto& layer : w.layers)
    for (int t = 0; t < kNumLoraTargets; ++t) {
      const Dims d = local_dims(cfg, layout, static_cast<LoraTarget>(t));
      ASSIGN_OR_RETURN(layer[static_cast<size_t>(t)], be.alloc_lora_module(config.num_slots, config.max_rank, d.in, d.out));
    }
  return w;
}

Status set_lora_weights_slot(Backend& be, const ModelConfig& cfg, const TpRankLayout& layout, LoraRankWeights& w,
                             int64_t slot, const LoraAdapter* adapter) {
  if (w.layers.empty()) return FailedPrecondition("LoRA: no adapter slots were allocated");
  if (slot < 0 || slot >= w.layers[0][0].num_slots)
    return OutOfRange("LoRA: slot " + std::to_string(slot) + " outside the " +
                      std::to_string(w.layers[0][0].num_slots) + " allocated");
  RETURN_IF_ERROR(clear_slot(be, w, slot));
  if (!adapter) return OkStatus();
  Status s = fill_slot(be, cfg, layout, w, slot, *adapter);
  if (!s.ok()) RETURN_IF_ERROR(clear_slot(be, w, slot));
  return s;
}

int64_t lora_weights_bytes(const ModelConfig& cfg, const TpRankLayout& layout, const LoraSlotsConfig& config,
                           int64_t element_bytes) {
  int64_t per_slot = 0;
  for (int t = 0; t < kNumLoraTargets; ++t) {
    const Dims d = local_dims(cfg, layout, static_cast<LoraTarget>(t));
    per_slot += config.max_rank * (d.in + d.out);
  }
  return per_slot * config.num_slots * cfg.num_layers * element_bytes;
}

}  // namespace lancet
