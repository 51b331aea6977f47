// The calibration of error-compensating FP8 rounding (quant/fp8_gptq.h) for a whole model:
// the calibration prompts run through the source model at its reference precision (the CPU
// backend, f32 activations, GGUF blocks dequantized to BF16 as eval-precision's reference
// path loads them), ActivationMomentObserver sums X^T X for every linear input, and each sum
// is factored once for the weights that read it (q/k/v_proj, gate/up_proj share one).
// `lancet quantize --fp8 --calibrate` and `eval-precision --fp8-rounding gptq` both call this,
// so a converted checkpoint and online quantization with the same prompts hold the same bytes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "io/model_source.h"
#include "model/fp8_scales.h"
#include "quant/fp8_gptq.h"

namespace lancet {

// How the quantized weights of one layer round: round to nearest, or with error compensation.
enum class Fp8Rounding { kNearest, kGptq };
const char* fp8_rounding_name(Fp8Rounding r);
// "nearest" / "gptq"; anything else is InvalidArgument.
StatusOr<Fp8Rounding> parse_fp8_rounding(const std::string& s);

// The weight names that read one layer's input ("model.layers.N.self_attn.q_proj.weight", ...).
std::vector<std::string> fp8_linear_weights_reading(int64_t layer, LinearInput which);

// Bytes the calibration holds at its peak for a model of this shape: one k x k f32 factor per
// linear input of every layer (q/k/v and gate/up share theirs).
int64_t fp8_gptq_calibration_bytes(const ModelConfig& c);

struct Fp8GptqCalibrationStats {
  int64_t prompts = 0, tokens = 0;
  double max_damp = 0;  // the largest damping any factor needed
};

// Runs `prompts` (token ids, each cut to the model's context) through src on `backend` (a CPU
// backend; the model is built and dropped here) and returns the factors of every quantized
// weight. Fails on an empty prompt list, non-finite activations, or second moments that stay
// singular (fp8_gptq_factor's errors, naming the layer).
StatusOr<Fp8GptqFactors> calibrate_fp8_gptq(const ModelSource& src, Backend& backend,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            const Fp8GptqOptions& opts = {},
                                            Fp8GptqCalibrationStats* stats = nullptr);

}  // namespace lancet
