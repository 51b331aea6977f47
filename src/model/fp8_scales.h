// The model side of static FP8 scales: the absmax observer LlamaModel::set_activation_observer
// fills with the inputs of every layer's linear projections, and the rule that turns a
// calibrated absmax into a scale (absmax * margin / 448), shared by the FP8 KV cache scales
// (runner/kv_calibration.h) and the static activation scales (eval/activation_scales.h).
// q/k/v_proj read the same input (the input norm's output), as do gate/up_proj (the
// post-attention norm's output); o_proj reads the attention output and down_proj
// SiLU(gate) * up.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"

namespace lancet {

enum class LinearInput { kQkv, kO, kGateUp, kDown };

// LlamaModel::set_activation_observer's hook: called with a host copy of the input of each
// layer's linear projections, once per step and input (q/k/v share one call, gate/up one).
class LinearInputObserver {
 public:
  virtual ~LinearInputObserver() = default;
  virtual Status observe(int64_t layer, LinearInput which, const float* x /*[rows, cols]*/, int64_t rows,
                         int64_t cols) = 0;
  // A NaN or infinite activation was seen (the calibration is then meaningless).
  virtual bool saw_non_finite() const = 0;
};

// Running absmax per layer and input.
struct ActivationAbsmaxObserver final : LinearInputObserver {
  std::vector<float> qkv, o, gate_up, down;  // [num_layers]
  bool non_finite = false;
  Status observe(int64_t layer, LinearInput which, const float* x, int64_t rows, int64_t cols) override;
  bool saw_non_finite() const override { return non_finite; }
};

// A static FP8 scale from a calibrated absmax: absmax * margin / 448. An absmax of 0 (dummy
// weights) still gets a scale that keeps a few normal E4M3 steps, never 0. The KV cache scales
// (runner/kv_calibration.h) and the static activation scales (eval/activation_scales.h) are
// made this way.
float fp8_scale_from_absmax(float absmax, float margin);

}  // namespace lancet
