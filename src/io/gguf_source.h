// ModelSource over a llama-architecture GGUF file (general.architecture == "llama").
//
// Config comes from the `llama.*` keys (and tokenizer.ggml.* for special token ids); tensors
// are renamed to their HF names (token_embd.weight -> model.embed_tokens.weight,
// blk.N.attn_q.weight -> model.layers.N.self_attn.q_proj.weight, ...) with row-major shapes,
// viewing the mapped file (zero copy; block-quantized dtypes as stored).
//
// Two things differ from an HF checkpoint, and the model code must honor both:
//  - config.rope_interleaved is true: llama.cpp's converter permutes the rows of attn_q/attn_k
//    so that rope over interleaved pairs (x[2i], x[2i+1]) equals HF's rotate-half rope; the
//    weights are left as stored.
//  - Llama 3 rope scaling is not described by keys: the file carries the per-dimension
//    frequency divisors as tensor `rope_freqs.weight` ([head_dim / 2] f32), exposed in
//    tensors() under the name "rope_freqs". When present, inv_freq[i] = theta^(-2i/head_dim) /
//    rope_freqs[i] (llama.cpp semantics) and config.rope_scaling.type stays kDefault.
//    Linear and YaRN scaling come from llama.rope.scaling.* keys as usual.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "io/model_source.h"

namespace lancet {

StatusOr<std::unique_ptr<ModelSource>> open_gguf_source(const std::string& path);

// The HF name of a llama GGUF tensor ("blk.3.ffn_up.weight" -> "model.layers.3.mlp.up_proj.weight",
// "rope_freqs.weight" -> "rope_freqs"); nullopt for names outside the llama architecture.
std::optional<std::string> gguf_to_hf_name(const std::string& gguf_name);
// The inverse, used by the converter.
std::optional<std::string> hf_to_gguf_name(const std::string& hf_name);

}  // namespace lancet
