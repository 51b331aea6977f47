// The tensor table a Llama model needs, checked against its config before any weight is used.
// Shared by the safetensors and GGUF loaders and by `lancet verify`, so a checkpoint whose
// shapes disagree with its config fails at load time with the tensor's name, not inside a GEMM.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/model_config.h"

namespace lancet {

// HF names of one decoder layer's tensors, e.g. layer_tensor(3, "self_attn.q_proj.weight") ->
// "model.layers.3.self_attn.q_proj.weight".
std::string layer_tensor(int64_t layer, const std::string& suffix);

// The linear projections of a layer with their [rows, cols] for this config.
struct LlamaLinear {
  std::string prefix;  // "model.layers.0.self_attn.q_proj" (+ ".weight", ".weight_scale", ...)
  int64_t rows = 0;    // output features
  int64_t cols = 0;    // input features
};
std::vector<LlamaLinear> llama_linears(const ModelConfig& config, int64_t layer);

// Checks that every tensor the architecture needs is present with the shape the config
// implies: embed_tokens [vocab, hidden], q_proj [heads*head_dim, hidden], k/v_proj
// [kv_heads*head_dim, hidden], o_proj [hidden, heads*head_dim], gate/up [inter, hidden],
// down [hidden, inter], norms [hidden], lm_head [vocab, hidden] unless tied; biases when the
// config has them. FP8 (F8_E4M3/E5M2) weights need a float `weight_scale` (or block
// `weight_scale_inv`) whose shape matches the granularity: per tensor (one value), per channel
// ([rows, 1] or [rows]) or per block ([ceil(rows/br), ceil(cols/bc)]); `input_scale`,
// `self_attn.k_scale` and `self_attn.v_scale` must hold one value. Tensors of layers past
// num_layers are an error (a config/checkpoint mismatch).
Status check_llama_tensors(const ModelConfig& config,
                           const std::map<std::string, TensorView>& tensors);

}  // namespace lancet
