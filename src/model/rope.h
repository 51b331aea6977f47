// Rotary position embedding tables for every rope type of ModelConfig::rope_scaling (default,
// llama3, linear, dynamic NTK, yarn), computed once per model up to max_model_len.
//
// The tables reproduce Hugging Face transformers' float32 arithmetic op by op: inv_freq is
// built in float32 exactly as `_compute_*_rope_parameters` do (python scalars rounded to
// float32, `scalar / tensor` as reciprocal then multiply), the angle is the float32 product
// position * inv_freq (HF's matmul with k = 1), and only cos/sin of that float angle are taken
// in double and rounded. At position 9000 one float32 ulp of the angle is ~1e-3 rad, so a
// double-precision angle would differ from the reference by more than the logit tolerance.
//
// Transformers keeps inv_freq as a module buffer, and the buffer is cast to the checkpoint's
// dtype when the model is materialized: with a bf16 checkpoint the reference logits (even
// when computed in float32) come from bf16-rounded frequencies. `inv_freq_dtype` reproduces
// that rounding (kBF16 / kF16); kF32 keeps full float32 frequencies (llama.cpp, vLLM). At
// 64 tokens the two differ by ~3e-2 relative in the logits of the tiny fixtures.
//
// Dynamic NTK: HF rescales the base from the current sequence length, so its table changes
// as a sequence grows (and already-cached keys keep their old rotation). We follow vLLM
// instead: one table for the whole run, built for seq_len = max_model_len (rescaled when that
// exceeds the original context, plain otherwise). Outputs match HF exactly while the sequence
// length is at or below original_max_position_embeddings and max_model_len is too.
//
// YaRN: `factor` from the config is used as given (HF >= 4.5x replaces it by
// max_position_embeddings / original_max_position_embeddings when both are present; the two
// agree for checkpoints configured consistently).
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "io/model_config.h"

namespace lancet {

struct RopeTable {
  int64_t max_positions = 0;
  int64_t rotary_dim = 0;       // rotated dims per head (== head_dim for Llama)
  float attention_factor = 1;   // already multiplied into cos and sin (yarn)
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  std::vector<float> cos;       // [max_positions, rotary_dim / 2]
  std::vector<float> sin;       // [max_positions, rotary_dim / 2]
};

struct RopeInvFreq {
  std::vector<float> inv_freq;  // [rotary_dim / 2]
  float attention_factor = 1.f;
};

// Inverse frequencies for cfg's rope type; seq_len only matters for dynamic NTK.
// freq_factors (GGUF `rope_freqs`, [rotary_dim / 2], may be null) divide the default
// frequencies instead of the config's scaling, as llama.cpp applies them.
StatusOr<RopeInvFreq> compute_rope_inv_freq(const ModelConfig& cfg, int64_t seq_len,
                                            const float* freq_factors = nullptr);

StatusOr<RopeTable> build_rope_table(const ModelConfig& cfg, int64_t max_positions,
                                     const float* freq_factors = nullptr,
                                     DType inv_freq_dtype = DType::kF32);

}  // namespace lancet
