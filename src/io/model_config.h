// The model description every loader produces and the model code consumes: Llama geometry,
// rope scaling, special token ids and quantization layout. Filled from HF config.json (+
// generation_config.json, tokenizer_config.json) or from GGUF metadata; the model code never
// knows which.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"

namespace lancet {

enum class RopeType { kDefault, kLlama3, kLinear, kDynamic, kYarn };
const char* rope_type_name(RopeType t);

struct RopeScaling {
  RopeType type = RopeType::kDefault;
  double factor = 1.0;
  // llama3
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 0;  // 0 = not given
  // yarn
  double beta_fast = 32.0;
  double beta_slow = 1.0;
  double attention_factor = 0.0;  // 0 = derive from factor (0.1 * ln(factor) + 1)
  double mscale = 0.0;
  double mscale_all_dim = 0.0;
  bool truncate = true;  // yarn: round the correction range to whole dims (HF default)
};

// How the checkpoint's linear weights are quantized (FP8 layouts as vLLM loads them).
enum class QuantMethod { kNone, kFp8, kCompressedTensors, kGguf };
enum class ScaleGranularity { kNone, kPerTensor, kPerChannel, kPerBlock };

struct QuantConfig {
  QuantMethod method = QuantMethod::kNone;
  ScaleGranularity weight_granularity = ScaleGranularity::kNone;
  bool dynamic_activations = true;        // activation_scheme "dynamic" vs "static"
  std::vector<std::string> ignored;       // module names (or "re:" patterns) left unquantized
  bool kv_cache_fp8 = false;              // checkpoint carries k_scale/v_scale
  // kPerBlock: [block_rows, block_cols] of one weight scale (fp8 weight_block_size or
  // compressed-tensors block_structure); the scale tensor is [ceil(rows/br), ceil(cols/bc)].
  std::vector<int64_t> weight_block_size;
};

struct ModelConfig {
  std::string architecture = "LlamaForCausalLM";
  std::string model_type = "llama";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_layers = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;  // from config when given, else hidden_size / num_heads
  double rms_norm_eps = 1e-5;
  double rope_theta = 10000.0;
  RopeScaling rope_scaling;
  int64_t max_position_embeddings = 0;
  bool tie_word_embeddings = false;
  bool attention_bias = false;
  bool mlp_bias = false;
  DType dtype = DType::kBF16;  // torch_dtype / dtype of the checkpoint
  QuantConfig quant;

  // Rope applied to interleaved pairs (GGUF llama layout, whose q/k rows are permuted at
  // conversion) instead of HF's rotate-half halves. Loaders that undo the permutation leave
  // this false.
  bool rope_interleaved = false;

  // Special tokens (generation_config.json eos list wins over config.json's).
  int64_t bos_token_id = -1;
  std::vector<int64_t> eos_token_ids;
  int64_t pad_token_id = -1;

  // Checks internal consistency (positive dims, heads divide, head_dim set, ...).
  Status validate() const;
};

}  // namespace lancet
