// Static FP8 activation scales (compressed-tensors `input_scale`, one per linear projection):
// the calibration pass records, per layer, the absmax of the inputs of the layer's linear
// projections, and each scale becomes absmax * margin / 448, as the KV cache scales are made
// (model/kv_calibration.h). q/k/v_proj read the same input (the input norm's output), as do
// gate/up_proj (the post-attention norm's output); o_proj reads the attention output and
// down_proj SiLU(gate) * up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lancet {

enum class LinearInput { kQkv, kO, kGateUp, kDown };

// LlamaModel::set_activation_observer's hook: running absmax per layer and input.
struct ActivationAbsmaxObserver {
  std::vector<float> qkv, o, gate_up, down;  // [num_layers]
  bool saw_non_finite = false;
  void observe(int64_t layer, LinearInput which, const float* x /*[n]*/, int64_t n);
};

struct ActivationScales {
  std::vector<float> qkv, o, gate_up, down;  // [num_layers]
};

// A static FP8 scale from a calibrated absmax: absmax * margin / 448. An absmax of 0 (dummy
// weights) still gets a scale that keeps a few normal E4M3 steps, never 0. The KV cache scales
// (model/kv_calibration.h) are made the same way.
float fp8_scale_from_absmax(float absmax, float margin);

ActivationScales activation_scales_from_absmax(const ActivationAbsmaxObserver& obs, float margin);

// The scale of a linear projection's input, by its weight's module name
// ("model.layers.N.self_attn.q_proj" ...); a negative value for names that are not one of
// the seven projections or a layer past the scales.
float activation_scale_for(const ActivationScales& s, const std::string& module);

}  // namespace lancet
