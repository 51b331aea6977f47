// `lancet quantize --fp8 --calibrate PROMPTS`: static FP8 KV cache scales (and, with
// --static-activation-scales, static activation scales) for the written checkpoint. The
// source model (weights as stored, CPU backend, f32 activations and an f32
// scratch cache) runs the calibration prompts through calibrate_kv_scales
// (runner/kv_calibration.h), the same pass the runtime does online when a checkpoint has no
// scales, so a calibrated checkpoint starts with the scales the runtime would have computed
// on the same prompts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "eval/activation_scales.h"
#include "eval/fp8_gptq_calibration.h"
#include "io/model_source.h"
#include "runner/kv_calibration.h"

namespace lancet::cli {

// The prompts of a calibration file as token ids. One prompt per line: plain text (needs the
// model's tokenizer; "\n" in a line stands for a newline; '#' lines and empty lines are
// skipped), or a JSON object with "prompt" (text) or "prompt_ids" (ids in [0, vocab)). Text
// is encoded as the runtime encodes a completion prompt (BOS when the tokenizer adds one,
// special-token strings as plain text). Errors name the file and line.
StatusOr<std::vector<std::vector<int32_t>>> read_calibration_prompts(const std::string& path,
                                                                     const ModelSource& src);

struct CheckpointCalibration {
  std::string prompts_path;
  float margin = KvCalibrationOptions{}.margin;
  // Also static activation scales (`input_scale` of every linear projection; the checkpoint's
  // input_activations become static per-tensor), from the same pass and margin.
  bool static_activations = false;
};

// Reads the prompts and calibrates the source model's K/V scales (source "calibration"), and
// with cal.static_activations the activation scales into *activations.
StatusOr<KvScales> calibrate_checkpoint_kv_scales(const ModelSource& src, const CheckpointCalibration& cal,
                                                  ActivationScales* activations = nullptr);

// The error-compensation factors of every quantized weight (eval/fp8_gptq_calibration.h),
// calibrated on the prompts of `prompts_path` (read as read_calibration_prompts reads them).
StatusOr<Fp8GptqFactors> calibrate_checkpoint_gptq(const ModelSource& src, const std::string& prompts_path,
                                                   Fp8GptqCalibrationStats* stats = nullptr);

// The checkpoint tensor names the scales are written under (what kv_scales_from_checkpoint
// and vLLM read): model.layers.N.self_attn.k_scale / v_scale.
std::string kv_scale_tensor_name(int64_t layer, bool value);

}  // namespace lancet::cli
