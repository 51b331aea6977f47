// ModelSource over a Hugging Face checkpoint: config.json (+ generation_config.json,
// tokenizer_config.json, tokenizer.json) and safetensors weights, single-file or sharded.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "io/model_source.h"

namespace lancet {

// `path` is one of:
//  - a directory with config.json and model.safetensors or model.safetensors.index.json;
//  - a config.json file alone: no weights, tensors() is empty (for dummy weights);
//  - a .safetensors file whose directory holds config.json.
// With weights, every tensor the Llama architecture needs is checked against the config
// (check_llama_tensors). FP8 scale tensors pass through under their HF names; the older
// spellings self_attn.{k,v}_proj.{k,v}_scale and self_attn.{k,v}_proj.output_scale are exposed
// as self_attn.k_scale / self_attn.v_scale, and their presence sets quant.kv_cache_fp8.
StatusOr<std::unique_ptr<ModelSource>> open_hf_source(const std::string& path);

}  // namespace lancet
