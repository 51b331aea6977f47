// Static FP8 activation scales (compressed-tensors `input_scale`, one per linear projection)
// for `lancet quantize --calibrate --static-activation-scales`: the calibration pass records,
// per layer, the absmax of the inputs of the layer's linear projections (the observer in
// model/fp8_scales.h), and each scale becomes absmax * margin / 448, as the KV cache scales
// are made (runner/kv_calibration.h). q/k/v_proj read the same input (the input norm's output),
// as do gate/up_proj (the post-attention norm's output); o_proj reads the attention output
// and down_proj SiLU(gate) * up.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/fp8_scales.h"
#include "runner/kv_calibration.h"
#include "model/llama_model.h"

namespace lancet {

struct ActivationScales {
  std::vector<float> qkv, o, gate_up, down;  // [num_layers]
};

ActivationScales activation_scales_from_absmax(const ActivationAbsmaxObserver& obs, float margin);

// calibrate_kv_scales (runner/kv_calibration.h) that also fills *activations with static
// activation scales from the same pass and margin; f32 activations only (the CPU backend,
// weights not FP8). A null `activations` calibrates the KV scales alone.
StatusOr<KvScales> calibrate_kv_and_activation_scales(LlamaModel& model, Backend& backend,
                                                      const std::vector<std::vector<int32_t>>& prompts,
                                                      const KvCalibrationOptions& opts,
                                                      ActivationScales* activations);

// The scale of a linear projection's input, by its weight's module name
// ("model.layers.N.self_attn.q_proj" ...); a negative value for names that are not one of
// the seven projections or a layer past the scales.
float activation_scale_for(const ActivationScales& s, const std::string& module);

}  // namespace lancet
