// FP8 KV cache scales: read from the checkpoint when it has them (the tensor names vLLM
// loads), else calibrated online by a warm-up pass over built-in English text: the model
// runs the text with an unquantized scratch cache, records the per-layer absmax of K (after
// rope) and V, and each scale becomes absmax * margin / 448 (E4M3's largest finite value).
// The chosen scales are also published process-wide for the server's /metrics.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/model_source.h"
#include "model/fp8_scales.h"
#include "model/llama_model.h"

namespace lancet {

struct KvScales {
  std::vector<float> k;  // [num_layers]
  std::vector<float> v;  // [num_layers]
  std::string source;    // "checkpoint" or "calibration"
};

// Checkpoint scales, per layer: model.layers.N.self_attn.k_scale / v_scale (the HF source
// already maps modelopt's k_proj.k_scale / v_proj.v_scale and compressed-tensors'
// k_proj.output_scale / v_proj.output_scale there), also ...self_attn.attn.k_scale / v_scale,
// and the deprecated single ...self_attn.kv_scale (used for both, as vLLM does). A scale with
// several values (per head) contributes its maximum, which never saturates more than the
// per-head values would. nullopt when the checkpoint has none; an error when only some layers
// have them or a value is not finite and positive.
StatusOr<std::optional<KvScales>> kv_scales_from_checkpoint(const ModelSource& src);

struct KvCalibrationOptions {
  // Headroom over the absmax seen on the calibration text, for activations past it in real
  // traffic (clipped at 448 * scale otherwise). E4M3 is a float format: its relative precision
  // is the same at every magnitude down to 2^-6 of the top of the range, so headroom costs
  // next to nothing (only values below absmax * margin / 28672 turn subnormal). On SmolLM2,
  // chat prompts exceeded the calibration absmax by up to 1.12x (K) and 1.43x (V), and margins
  // 1.0 to 2.0 gave the same logit cosine to within 5e-4; 1.5 covers the measured excess.
  float margin = 1.5f;
  int64_t block_size = 16;
  // The scratch cache's dtype while calibrating (f32 on CPU; bf16 halves it on GPUs). The
  // absmax is taken from the f32 activations either way.
  DType scratch_dtype = DType::kF32;
};

// Runs each prompt (token ids; truncated to the model's max length) through the model, one
// sequence per step, on a scratch cache of its own, and returns the scales. Fails when a
// prompt list is empty or the model produces non-finite K/V. A layer whose absmax is 0 (dummy
// weights) gets the smallest scale that still keeps a few normal E4M3 steps, never 0. With
// `activations`, the same pass also folds the inputs of every linear projection into that
// observer (and fails when they are not finite); the static activation scales are made from
// it in eval/activation_scales.h (calibrate_kv_and_activation_scales). f32 activations only
// (the CPU backend, weights not FP8).
StatusOr<KvScales> calibrate_kv_scales(LlamaModel& model, const std::vector<std::vector<int32_t>>& prompts,
                                       const KvCalibrationOptions& opts = {},
                                       LinearInputObserver* activations = nullptr);

// Scales from per-layer absmax values (what calibrate_kv_scales applies).
KvScales kv_scales_from_absmax(const std::vector<float>& k_absmax, const std::vector<float>& v_absmax, float margin);

// The built-in calibration text (English prose, a little code and numbers; a few hundred
// tokens with any Llama 3 / SmolLM2 tokenizer).
std::string_view kv_calibration_text();
// A short conversation in OpenAI message shape (JSON text) for chat-formatted calibration,
// so the chat template's special tokens are seen too.
std::string_view kv_calibration_chat_json();

// Deterministic pseudo-random token ids in [0, vocab) for models without a tokenizer.
std::vector<int32_t> kv_calibration_random_tokens(int64_t vocab_size, int64_t count);

// The scales of the process's serving KV cache, for /metrics (last publisher wins).
void publish_kv_cache_scales(const KvScales& scales);
std::optional<KvScales> published_kv_cache_scales();

// One line per layer-kind for logs: "k [0.0123 0.0456 ...] v [...]".
std::string format_kv_scales(const KvScales& scales);

}  // namespace lancet
