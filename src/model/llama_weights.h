// The Llama weight table: every tensor the forward pass reads, looked up by HF name in a
// ModelSource and handed to the backend once (zero-copy on CPU, so the source must outlive
// the weights). Optionally converts weights while loading: online FP8 quantization
// (`--quantization fp8`) and GGUF blocks -> BF16 (the high-precision reference of a GGUF model).
// Under tensor parallelism each rank loads its shard (model/tp_shard.h): the same conversions
// on the full tensor first, then the rank's rows or columns (FP8 scales with their rows).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "io/model_source.h"
#include "quant/fp8_gptq.h"
#include "model/tp_shard.h"

namespace lancet {

struct LlamaLayerWeights {
  Buffer input_norm;  // [hidden] f32
  Buffer post_norm;   // [hidden] f32
  WeightMatrix q, k, v, o;
  WeightMatrix gate, up, down;
};

// How load_llama_weights converts the checkpoint's tensors on the way to the backend.
struct LlamaWeightOptions {
  // Quantize the decoder layers' linear projections to FP8 E4M3 with per-output-channel
  // scales, exactly as `lancet quantize --fp8` writes them (quant/fp8_weights.h); the
  // embedding and lm_head become BF16 unless stored as F16/BF16. Weights already FP8 stay.
  bool quantize_fp8 = false;
  // GGUF block-quantized matrices become BF16 (dequantized, then rounded) instead of being
  // used in their block format. Applies to what quantize_fp8 leaves unquantized.
  bool dequantize_to_bf16 = false;
  // W8A8 emulation: the decoder layers' projections quantize their input rows per token to
  // E4M3 on the way in (WeightMatrix::fp8_activations), as the GPU runs FP8 weights; on 16-bit
  // weights it isolates the activation rounding. CPU only, for precision measurements.
  bool fp8_activations = false;
  // With quantize_fp8: error-compensating rounding for the weights that have a factor here
  // (eval/fp8_gptq_calibration.h), round to nearest for the rest. Must outlive the load.
  const Fp8GptqFactors* fp8_gptq = nullptr;
};

struct LlamaWeights {
  // [vocab, hidden]; a rank of several holds its vocab rows plus one zero row, which the ids
  // of other ranks read (their share of the all-reduce after the embedding is then 0).
  WeightMatrix embed;
  WeightMatrix lm_head;  // [local vocab, hidden] (the embedding when tied on one rank)
  Buffer final_norm;     // [hidden] f32
  std::vector<LlamaLayerWeights> layers;
  std::vector<float> rope_freq_factors;  // GGUF rope_freqs ([head_dim / 2]) or empty
  // Converted copies (FP8 / BF16) that the weights above view on CPU; empty when zero-copy.
  std::vector<std::shared_ptr<const void>> owned;
};

// Checks every shape against the config; errors name the tensor. `layout` is what this rank
// holds (tp_rank_layout(cfg, {0, 1}) for the whole model: nothing is sliced then).
StatusOr<LlamaWeights> load_llama_weights(const ModelSource& src, Backend& backend, const LlamaWeightOptions& opts,
                                          const TpRankLayout& layout);

}  // namespace lancet
