// HF -> GGUF conversion (see gguf_convert.h). Each output tensor is produced row by row in the
// writer's fill callback: source row (permuted for q/k) -> float -> target type.
#include "io/gguf_convert.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <numbers>

#include "io/gguf_source.h"
#include "io/gguf_writer.h"
#include "quant/gguf_blocks.h"

namespace lancet {
namespace {

// llama_ftype values (llama.h) for a file whose matrices are all of one type.
uint32_t llama_file_type(DType t) {
  switch (t) {
    case DType::kF32: return 0;
    case DType::kF16: return 1;
    case DType::kQ4_0: return 2;
    case DType::kQ4_1: return 3;
    case DType::kQ8_0: return 7;
    case DType::kQ5_0: return 8;
    case DType::kQ5_1: return 9;
    case DType::kQ4_K: return 14;  // Q4_K_S
    case DType::kQ5_K: return 16;  // Q5_K_S
    case DType::kQ6_K: return 18;
    case DType::kBF16: return 32;
    default: return 0;
  }
}

bool supported_weight_type(DType t) {
  switch (t) {
    case DType::kF32: case DType::kF16: case DType::kBF16: case DType::kQ8_0: case DType::kQ4_0:
    case DType::kQ4_1: case DType::kQ5_0: case DType::kQ5_1: case DType::kQ4_K: case DType::kQ5_K:
    case DType::kQ6_K:
      return true;
    default:
      return false;
  }
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

void add_config_metadata(const ModelConfig& c, const std::string& name, DType weight_type,
                         GgufWriter* w) {
  w->add("general.architecture", GgufValue::str("llama"));
  w->add("general.name", GgufValue::str(name));
  w->add("general.file_type", GgufValue::u32(llama_file_type(weight_type)));
  if (dtype_info(weight_type).is_quantized) w->add("general.quantization_version", GgufValue::u32(2));
  w->add("llama.vocab_size", GgufValue::u32(static_cast<uint32_t>(c.vocab_size)));
  w->add("llama.context_length", GgufValue::u32(static_cast<uint32_t>(c.max_position_embeddings)));
  w->add("llama.embedding_length", GgufValue::u32(static_cast<uint32_t>(c.hidden_size)));
  w->add("llama.block_count", GgufValue::u32(static_cast<uint32_t>(c.num_layers)));
  w->add("llama.feed_forward_length", GgufValue::u32(static_cast<uint32_t>(c.intermediate_size)));
  w->add("llama.attention.head_count", GgufValue::u32(static_cast<uint32_t>(c.num_heads)));
  w->add("llama.attention.head_count_kv", GgufValue::u32(static_cast<uint32_t>(c.num_kv_heads)));
  w->add("llama.attention.key_length", GgufValue::u32(static_cast<uint32_t>(c.head_dim)));
  w->add("llama.attention.value_length", GgufValue::u32(static_cast<uint32_t>(c.head_dim)));
  w->add("llama.rope.dimension_count", GgufValue::u32(static_cast<uint32_t>(c.head_dim)));
  w->add("llama.rope.freq_base", GgufValue::f32(static_cast<float>(c.rope_theta)));
  w->add("llama.attention.layer_norm_rms_epsilon", GgufValue::f32(static_cast<float>(c.rms_norm_eps)));
  const RopeScaling& rs = c.rope_scaling;
  if (rs.type == RopeType::kLinear || rs.type == RopeType::kYarn) {
    w->add("llama.rope.scaling.type", GgufValue::str(rs.type == RopeType::kLinear ? "linear" : "yarn"));
    w->add("llama.rope.scaling.factor", GgufValue::f32(static_cast<float>(rs.factor)));
  }
  if (rs.type == RopeType::kYarn) {
    if (rs.original_max_position_embeddings > 0) {
      w->add("llama.rope.scaling.original_context_length",
             GgufValue::u32(static_cast<uint32_t>(rs.original_max_position_embeddings)));
    }
    w->add("llama.rope.scaling.yarn_beta_fast", GgufValue::f32(static_cast<float>(rs.beta_fast)));
    w->add("llama.rope.scaling.yarn_beta_slow", GgufValue::f32(static_cast<float>(rs.beta_slow)));
    if (rs.attention_factor > 0) {
      w->add("llama.rope.scaling.attn_factor", GgufValue::f32(static_cast<float>(rs.attention_factor)));
    }
  }
  if (c.bos_token_id >= 0) w->add("tokenizer.ggml.bos_token_id", GgufValue::u32(static_cast<uint32_t>(c.bos_token_id)));
  const char* eos_keys[] = {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                            "tokenizer.ggml.eom_token_id"};
  for (size_t i = 0; i < c.eos_token_ids.size() && i < 3; ++i) {
    w->add(eos_keys[i], GgufValue::u32(static_cast<uint32_t>(c.eos_token_ids[i])));
  }
  if (c.pad_token_id >= 0) w->add("tokenizer.ggml.padding_token_id", GgufValue::u32(static_cast<uint32_t>(c.pad_token_id)));
}

// One tensor's conversion: rows of `src` (optionally permuted) into `dst_type`.
Status convert_rows(const std::string& name, const TensorView& src, DType dst_type,
                    int64_t permute_head_dim, uint8_t* dst, uint64_t nbytes) {
  const int64_t rows = src.rows(), cols = src.cols();
  auto src_row_bytes = dtype_row_bytes(src.dtype, static_cast<uint64_t>(cols));
  auto dst_row_bytes = dtype_row_bytes(dst_type, static_cast<uint64_t>(cols));
  if (!src_row_bytes || !dst_row_bytes || *dst_row_bytes * static_cast<uint64_t>(rows) != nbytes ||
      *src_row_bytes * static_cast<uint64_t>(rows) > src.nbytes) {
    return InvalidArgument("tensor '" + name + "': row length " + std::to_string(cols) +
                           " does not fit " + dtype_name(src.dtype) + " -> " + dtype_name(dst_type));
  }
  std::vector<float> buf(static_cast<size_t>(cols));
  const uint8_t* s = static_cast<const uint8_t*>(src.data);
  for (int64_t r = 0; r < rows; ++r) {
    const int64_t sr = permute_head_dim > 0 ? gguf_qk_source_row(r, permute_head_dim) : r;
    RETURN_IF_ERROR(dequantize_row(src.dtype, s + sr * *src_row_bytes, buf.data(), cols));
    Status q = quantize_row(dst_type, buf.data(), dst + r * *dst_row_bytes, cols);
    if (!q.ok()) return q.with_context("tensor '" + name + "' row " + std::to_string(r));
  }
  return OkStatus();
}

}  // namespace

int64_t gguf_qk_source_row(int64_t out_row, int64_t head_dim) {
  const int64_t half = head_dim / 2;
  const int64_t head = out_row / head_dim, r = out_row % head_dim;
  const int64_t i = r / 2, j = r % 2;
  return head * head_dim + j * half + i;
}

std::vector<float> llama3_rope_freq_factors(const ModelConfig& c) {
  const RopeScaling& rs = c.rope_scaling;
  const double old_ctx = static_cast<double>(rs.original_max_position_embeddings);
  const double low_wavelen = old_ctx / rs.low_freq_factor;
  const double high_wavelen = old_ctx / rs.high_freq_factor;
  std::vector<float> out;
  for (int64_t i = 0; i < c.head_dim; i += 2) {
    // The inverse frequency in float32, as the reference computes it.
    const float exponent = static_cast<float>(i) / static_cast<float>(c.head_dim);
    const float freq = 1.0f / std::pow(static_cast<float>(c.rope_theta), exponent);
    const double wavelen = 2.0 * std::numbers::pi / freq;
    double f;
    if (wavelen < high_wavelen) {
      f = 1.0;
    } else if (wavelen > low_wavelen) {
      f = rs.factor;
    } else {
      const double smooth = (old_ctx / wavelen - rs.low_freq_factor) /
                            (rs.high_freq_factor - rs.low_freq_factor);
      f = 1.0 / ((1.0 - smooth) / rs.factor + smooth);
    }
    out.push_back(static_cast<float>(f));
  }
  return out;
}

std::vector<float> llama3_rope_freq_factors_hf_rounded(const ModelConfig& c, DType dtype) {
  const RopeScaling& rs = c.rope_scaling;
  const float old_ctx = static_cast<float>(rs.original_max_position_embeddings);
  const float low_wavelen = old_ctx / static_cast<float>(rs.low_freq_factor);
  const float high_wavelen = old_ctx / static_cast<float>(rs.high_freq_factor);
  const float factor = static_cast<float>(rs.factor);
  std::vector<float> out;
  for (int64_t i = 0; i < c.head_dim; i += 2) {
    // transformers' _compute_llama3_parameters, in float32.
    const float base = 1.0f / std::pow(static_cast<float>(c.rope_theta),
                                       static_cast<float>(i) / static_cast<float>(c.head_dim));
    const float wavelen = 2.0f * static_cast<float>(std::numbers::pi) / base;
    float inv = wavelen > low_wavelen ? base / factor : base;
    if (!(wavelen < high_wavelen) && !(wavelen > low_wavelen)) {
      const float smooth = (old_ctx / wavelen - static_cast<float>(rs.low_freq_factor)) /
                           static_cast<float>(rs.high_freq_factor - rs.low_freq_factor);
      inv = (1.0f - smooth) * inv / factor + smooth * inv;
    }
    // The buffer's dtype rounding.
    if (dtype == DType::kBF16) inv = bf16_to_f32(f32_to_bf16(inv));
    if (dtype == DType::kF16) inv = f16_to_f32(f32_to_f16(inv));
    out.push_back(static_cast<float>(static_cast<double>(base) / static_cast<double>(inv)));
  }
  return out;
}

Status convert_to_gguf(const ModelSource& src, const std::string& out_path, DType weight_type) {
  const ModelConfig& c = src.config();
  if (!supported_weight_type(weight_type)) {
    return InvalidArgument(std::string("convert to gguf: unsupported weight type ") + dtype_name(weight_type));
  }
  if (c.rope_scaling.type == RopeType::kDynamic) {
    return Unimplemented("convert to gguf: " + src.path() + ": dynamic rope scaling has no GGUF form");
  }
  if (src.tensors().empty()) return InvalidArgument("convert to gguf: " + src.path() + " has no weights");
  GgufWriter w;
  add_config_metadata(c, std::filesystem::path(src.path()).filename().string(), weight_type, &w);

  for (const auto& [name, view] : src.tensors()) {
    if (name == "rope_freqs") continue;  // regenerated below from the config
    auto gname = hf_to_gguf_name(name);
    if (!gname) {
      return Unimplemented("convert to gguf: " + src.path() + ": tensor '" + name +
                           "' has no GGUF llama equivalent");
    }
    if (view.dtype == DType::kF8E4M3 || view.dtype == DType::kF8E5M2) {
      return Unimplemented("convert to gguf: tensor '" + name + "' is FP8 (dequantize it first)");
    }
    const bool matrix = view.shape.size() == 2;
    const DType dst = matrix ? weight_type : DType::kF32;
    // HF q/k rows are in rotate-half order; GGUF expects interleaved pairs.
    int64_t permute = 0;
    if (!c.rope_interleaved && (ends_with(name, "self_attn.q_proj.weight") ||
                                ends_with(name, "self_attn.k_proj.weight") ||
                                ends_with(name, "self_attn.q_proj.bias") ||
                                ends_with(name, "self_attn.k_proj.bias"))) {
      permute = c.head_dim;
    }
    TensorView v = view;
    if (permute > 0 && v.shape.size() == 1) v.shape = {v.shape[0], 1};  // bias: permute elements
    const std::string n = name;
    RETURN_IF_ERROR(w.add_tensor(*gname, dst, view.shape,
                                 [v, n, dst, permute](uint8_t* out, uint64_t nbytes) {
                                   return convert_rows(n, v, dst, permute, out, nbytes);
                                 }));
  }
  if (c.rope_scaling.type == RopeType::kLlama3) {
    const bool hf_rounded = std::string(src.format()) == "safetensors" &&
                            (c.dtype == DType::kBF16 || c.dtype == DType::kF16);
    std::vector<float> f = hf_rounded ? llama3_rope_freq_factors_hf_rounded(c, c.dtype)
                                      : llama3_rope_freq_factors(c);
    std::vector<uint8_t> bytes(f.size() * 4);
    std::memcpy(bytes.data(), f.data(), bytes.size());
    RETURN_IF_ERROR(w.add_tensor("rope_freqs.weight", DType::kF32,
                                 {static_cast<int64_t>(f.size())}, std::move(bytes)));
  } else if (const TensorView* rf = src.find("rope_freqs")) {
    // A GGUF source carries its factors as a tensor: keep them.
    std::vector<uint8_t> bytes(rf->nbytes);
    std::memcpy(bytes.data(), rf->data, rf->nbytes);
    RETURN_IF_ERROR(w.add_tensor("rope_freqs.weight", rf->dtype, rf->shape, std::move(bytes)));
  }
  return w.write(out_path);
}

}  // namespace lancet
