// Hugging Face model description files -> ModelConfig / TokenizerSource.
// config.json comes in two layouts: the classic one (`rope_theta` + `rope_scaling`, as in the
// published Llama 3.1 checkpoints) and the transformers-5 one (`rope_parameters` holding
// rope_theta and the scaling). FP8 checkpoints describe their layout in `quantization_config`
// (quant_method "fp8" or "compressed-tensors", the two layouts vLLM loads).
#pragma once

#include <string>

#include "core/status.h"
#include "io/model_config.h"
#include "io/model_source.h"

namespace lancet {

// Parses config.json text; `name` (the path) prefixes error messages. Only Llama-shaped
// models are accepted (architectures LlamaForCausalLM / model_type llama, hidden_act silu).
// Rope types other than default/llama3/linear/dynamic/yarn and quantization methods other
// than fp8/compressed-tensors (FP8) give Unimplemented. The result passes validate().
StatusOr<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& name);
StatusOr<ModelConfig> load_hf_config(const std::string& path);  // reads the file, then parses

// generation_config.json: bos_token_id, eos_token_id (int or list) and pad_token_id override
// the values from config.json when present and not null.
Status apply_generation_config(const std::string& json_text, const std::string& name,
                               ModelConfig* config);

// tokenizer_config.json: chat_template (a string, or a list of {name, template} where the
// one named "default" is taken), bos_token / eos_token (a string or {"content": ...}).
// Fills only those fields of *out.
Status parse_tokenizer_config(const std::string& json_text, const std::string& name,
                              TokenizerSource* out);

}  // namespace lancet
