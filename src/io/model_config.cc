// ModelConfig checks shared by every loader (HF config.json, GGUF metadata): one place that
// says which geometry the model code can run, with messages naming the offending field.
#include "io/model_config.h"

#include <cmath>

namespace lancet {

const char* rope_type_name(RopeType t) {
  switch (t) {
    case RopeType::kDefault: return "default";
    case RopeType::kLlama3: return "llama3";
    case RopeType::kLinear: return "linear";
    case RopeType::kDynamic: return "dynamic";
    case RopeType::kYarn: return "yarn";
  }
  return "unknown";
}

namespace {
Status bad(const std::string& field, const std::string& why) {
  return InvalidArgument("model config: " + field + " " + why);
}
Status positive(const char* field, int64_t v) {
  return v > 0 ? OkStatus() : bad(field, "must be positive, got " + std::to_string(v));
}
Status positive_finite(const char* field, double v) {
  return (std::isfinite(v) && v > 0) ? OkStatus()
                                     : bad(field, "must be a positive number, got " +
                                                      std::to_string(v));
}
}  // namespace

Status ModelConfig::validate() const {
  RETURN_IF_ERROR(positive("vocab_size", vocab_size));
  RETURN_IF_ERROR(positive("hidden_size", hidden_size));
  RETURN_IF_ERROR(positive("intermediate_size", intermediate_size));
  RETURN_IF_ERROR(positive("num_hidden_layers", num_layers));
  RETURN_IF_ERROR(positive("num_attention_heads", num_heads));
  RETURN_IF_ERROR(positive("num_key_value_heads", num_kv_heads));
  RETURN_IF_ERROR(positive("head_dim", head_dim));
  RETURN_IF_ERROR(positive("max_position_embeddings", max_position_embeddings));
  if (num_heads % num_kv_heads != 0) {
    return bad("num_attention_heads", std::to_string(num_heads) +
                                          " is not a multiple of num_key_value_heads " +
                                          std::to_string(num_kv_heads));
  }
  // Rope rotates pairs of dims.
  if (head_dim % 2 != 0) return bad("head_dim", "must be even, got " + std::to_string(head_dim));
  // Guard the products the weight table and KV cache compute from these dims.
  constexpr int64_t kMaxDim = int64_t{1} << 24;
  const std::pair<const char*, int64_t> dims[] = {
      {"vocab_size", vocab_size},   {"hidden_size", hidden_size},
      {"intermediate_size", intermediate_size}, {"num_hidden_layers", num_layers},
      {"num_attention_heads", num_heads}, {"head_dim", head_dim}};
  for (const auto& [field, v] : dims) {
    if (v > kMaxDim) return bad(field, "= " + std::to_string(v) + " is implausibly large");
  }
  if (num_heads * head_dim > kMaxDim) {
    return bad("num_attention_heads * head_dim", "is implausibly large");
  }
  RETURN_IF_ERROR(positive_finite("rms_norm_eps", rms_norm_eps));
  RETURN_IF_ERROR(positive_finite("rope_theta", rope_theta));

  const RopeScaling& rs = rope_scaling;
  if (rs.type != RopeType::kDefault) {
    const std::string type = rope_type_name(rs.type);
    RETURN_IF_ERROR(positive_finite(("rope_scaling.factor (" + type + ")").c_str(), rs.factor));
    if (rs.type == RopeType::kLlama3) {
      if (rs.original_max_position_embeddings <= 0) {
        return bad("rope_scaling.original_max_position_embeddings",
                   "is required for llama3 rope scaling");
      }
      RETURN_IF_ERROR(positive_finite("rope_scaling.low_freq_factor", rs.low_freq_factor));
      RETURN_IF_ERROR(positive_finite("rope_scaling.high_freq_factor", rs.high_freq_factor));
      // The smoothing between the two wavelength bounds divides by their difference.
      if (rs.high_freq_factor <= rs.low_freq_factor) {
        return bad("rope_scaling.high_freq_factor",
                   "must exceed low_freq_factor (" + std::to_string(rs.high_freq_factor) +
                       " <= " + std::to_string(rs.low_freq_factor) + ")");
      }
    }
    if (rs.type == RopeType::kYarn) {
      if (!std::isfinite(rs.beta_fast) || !std::isfinite(rs.beta_slow) ||
          rs.beta_fast <= rs.beta_slow) {
        return bad("rope_scaling.beta_fast", "must be finite and exceed beta_slow");
      }
      if (rs.original_max_position_embeddings < 0) {
        return bad("rope_scaling.original_max_position_embeddings", "must not be negative");
      }
    }
  }

  if (!dtype_info(dtype).is_float || dtype == DType::kF8E4M3 || dtype == DType::kF8E5M2) {
    // The checkpoint's float dtype; fp8 is described by quant, not here.
    if (quant.method != QuantMethod::kGguf) {
      return bad("torch_dtype", std::string("must be float32, float16 or bfloat16, got ") +
                                    dtype_name(dtype));
    }
  }
  if (quant.weight_granularity == ScaleGranularity::kPerBlock) {
    if (quant.weight_block_size.size() != 2 || quant.weight_block_size[0] <= 0 ||
        quant.weight_block_size[1] <= 0) {
      return bad("quantization_config.weight_block_size", "must be two positive integers");
    }
  }
  if (bos_token_id >= vocab_size) {
    return bad("bos_token_id", std::to_string(bos_token_id) + " is outside the vocabulary of " +
                                   std::to_string(vocab_size));
  }
  for (int64_t id : eos_token_ids) {
    if (id < 0 || id >= vocab_size) {
      return bad("eos_token_id", std::to_string(id) + " is outside the vocabulary of " +
                                     std::to_string(vocab_size));
    }
  }
  return OkStatus();
}

}  // namespace lancet
