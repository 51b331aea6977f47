// The Llama weight table: every tensor the forward pass reads, looked up by HF name in a
// ModelSource and handed to the backend once (zero-copy on CPU, so the source must outlive
// the weights).
#pragma once

#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/model_source.h"

namespace lancet {

struct LlamaLayerWeights {
  Buffer input_norm;  // [hidden] f32
  Buffer post_norm;   // [hidden] f32
  WeightMatrix q, k, v, o;
  WeightMatrix gate, up, down;
};

struct LlamaWeights {
  WeightMatrix embed;    // [vocab, hidden]
  WeightMatrix lm_head;  // [vocab, hidden] (the embedding when tied)
  Buffer final_norm;     // [hidden] f32
  std::vector<LlamaLayerWeights> layers;
  std::vector<float> rope_freq_factors;  // GGUF rope_freqs ([head_dim / 2]) or empty
};

// Checks every shape against the config; errors name the tensor.
StatusOr<LlamaWeights> load_llama_weights(const ModelSource& src, Backend& backend);

}  // namespace lancet
