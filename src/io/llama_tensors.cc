// check_llama_tensors: expected names and shapes from the config, FP8 scale shapes from the
// quantization granularity.
#include "io/llama_tensors.h"

#include <cstdlib>

#include "core/checked_math.h"

namespace lancet {
namespace {

using TensorMap = std::map<std::string, TensorView>;

bool is_fp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }
bool is_plain_float(DType t) { return dtype_info(t).is_float && !is_fp8(t); }

// The tensor's byte size must match its dtype and shape (GGUF rows are whole blocks).
Status check_bytes(const std::string& name, const TensorView& t) {
  if (t.shape.empty()) {
    if (t.nbytes != dtype_info(t.dtype).block_bytes || dtype_info(t.dtype).block_elems != 1) {
      return InvalidArgument("tensor '" + name + "': scalar of " + std::to_string(t.nbytes) +
                             " bytes");
    }
    return OkStatus();
  }
  auto rows = checked_product(std::span<const int64_t>(t.shape.data(), t.shape.size() - 1));
  auto row_bytes = dtype_row_bytes(t.dtype, static_cast<uint64_t>(t.shape.back()));
  uint64_t total = 0;
  if (!rows || !row_bytes || !checked_mul(*rows, *row_bytes, &total) || total != t.nbytes) {
    return InvalidArgument("tensor '" + name + "': " + std::to_string(t.nbytes) +
                           " bytes do not fit " + dtype_name(t.dtype) + " " +
                           shape_to_string(t.shape));
  }
  return OkStatus();
}

Status expect(const TensorMap& tensors, const std::string& name,
              const std::vector<int64_t>& shape, const TensorView** out = nullptr) {
  auto it = tensors.find(name);
  if (it == tensors.end()) {
    return NotFound("missing tensor '" + name + "' (expected shape " + shape_to_string(shape) +
                    ")");
  }
  if (it->second.shape != shape) {
    return InvalidArgument("tensor '" + name + "' has shape " +
                           shape_to_string(it->second.shape) + ", the config implies " +
                           shape_to_string(shape));
  }
  RETURN_IF_ERROR(check_bytes(name, it->second));
  if (out) *out = &it->second;
  return OkStatus();
}

const TensorView* find(const TensorMap& tensors, const std::string& name) {
  auto it = tensors.find(name);
  return it == tensors.end() ? nullptr : &it->second;
}

Status check_norm(const TensorMap& tensors, const std::string& name, int64_t hidden) {
  const TensorView* t = nullptr;
  RETURN_IF_ERROR(expect(tensors, name, {hidden}, &t));
  if (!is_plain_float(t->dtype)) {
    return InvalidArgument("tensor '" + name + "' has dtype " + dtype_name(t->dtype) +
                           "; norm weights must be f32, f16 or bf16");
  }
  return OkStatus();
}

Status check_single_value(const std::string& name, const TensorView& t) {
  if (t.numel() != 1 || !is_plain_float(t.dtype)) {
    return InvalidArgument("scale tensor '" + name + "' must be one f32/f16/bf16 value, got " +
                           dtype_name(t.dtype) + " " + shape_to_string(t.shape));
  }
  return OkStatus();
}

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

// An FP8 weight's scale: its shape must fit the configured granularity (or, when the config
// does not say, one of per-tensor / per-channel).
Status check_weight_scale(const ModelConfig& config, const LlamaLinear& lin,
                          const std::string& scale_name, const TensorView& s) {
  if (!is_plain_float(s.dtype)) {
    return InvalidArgument("scale tensor '" + scale_name + "' has dtype " + dtype_name(s.dtype) +
                           "; expected f32, f16 or bf16");
  }
  const auto& sh = s.shape;
  const bool one = s.numel() == 1 && sh.size() <= 2;
  const bool channel = (sh.size() == 2 && sh[0] == lin.rows && sh[1] == 1) ||
                       (sh.size() == 1 && sh[0] == lin.rows);
  ScaleGranularity g = config.quant.weight_granularity;
  bool ok = false;
  std::string want;
  switch (g) {
    case ScaleGranularity::kPerTensor:
      ok = one;
      want = "one value (per-tensor)";
      break;
    case ScaleGranularity::kPerChannel:
      ok = channel;
      want = "[" + std::to_string(lin.rows) + ", 1] (per-channel)";
      break;
    case ScaleGranularity::kPerBlock: {
      const auto& b = config.quant.weight_block_size;
      if (b.size() != 2) return InvalidArgument("per-block scales need weight_block_size");
      std::vector<int64_t> blocks = {ceil_div(lin.rows, b[0]), ceil_div(lin.cols, b[1])};
      ok = sh == blocks;
      want = shape_to_string(blocks) + " (blocks of " + shape_to_string(b) + ")";
      break;
    }
    case ScaleGranularity::kNone:
      ok = one || channel;
      want = "one value or [" + std::to_string(lin.rows) + ", 1]";
      break;
  }
  if (!ok) {
    return InvalidArgument("scale tensor '" + scale_name + "' has shape " + shape_to_string(sh) +
                           ", expected " + want + " for weight [" + std::to_string(lin.rows) +
                           ", " + std::to_string(lin.cols) + "]");
  }
  return OkStatus();
}

Status check_linear(const ModelConfig& config, const TensorMap& tensors, const LlamaLinear& lin,
                    bool bias) {
  const std::string wname = lin.prefix + ".weight";
  const TensorView* w = nullptr;
  RETURN_IF_ERROR(expect(tensors, wname, {lin.rows, lin.cols}, &w));
  const std::string sname = lin.prefix + ".weight_scale";
  const std::string sinv = lin.prefix + ".weight_scale_inv";  // fp8 block checkpoints
  const TensorView* scale = find(tensors, sname);
  std::string scale_name = sname;
  if (!scale && (scale = find(tensors, sinv))) scale_name = sinv;

  if (is_fp8(w->dtype)) {
    if (!scale) {
      return NotFound("FP8 weight '" + wname + "' has no '" + sname + "' (or _inv) tensor");
    }
    RETURN_IF_ERROR(check_weight_scale(config, lin, scale_name, *scale));
  } else {
    if (!is_plain_float(w->dtype) && !dtype_info(w->dtype).is_quantized) {
      return InvalidArgument("tensor '" + wname + "' has dtype " + dtype_name(w->dtype) +
                             ", which is not a weight type lancet reads");
    }
    if (scale) {
      return InvalidArgument("tensor '" + scale_name + "' scales weight '" + wname +
                             "', which is " + dtype_name(w->dtype) + ", not FP8");
    }
  }
  if (const TensorView* is = find(tensors, lin.prefix + ".input_scale")) {
    RETURN_IF_ERROR(check_single_value(lin.prefix + ".input_scale", *is));
  }
  if (bias) RETURN_IF_ERROR(expect(tensors, lin.prefix + ".bias", {lin.rows}));
  return OkStatus();
}

// "model.layers.<n>." -> n, or -1 for other names.
int64_t layer_of(const std::string& name) {
  static const std::string kPrefix = "model.layers.";
  if (name.compare(0, kPrefix.size(), kPrefix) != 0) return -1;
  const char* p = name.c_str() + kPrefix.size();
  char* end = nullptr;
  long long n = std::strtoll(p, &end, 10);
  if (end == p || *end != '.') return -1;
  return n;
}

}  // namespace

std::string layer_tensor(int64_t layer, const std::string& suffix) {
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::vector<LlamaLinear> llama_linears(const ModelConfig& c, int64_t layer) {
  const int64_t q = c.num_heads * c.head_dim;
  const int64_t kv = c.num_kv_heads * c.head_dim;
  auto p = [&](const char* s) { return layer_tensor(layer, s); };
  return {
      {p("self_attn.q_proj"), q, c.hidden_size},
      {p("self_attn.k_proj"), kv, c.hidden_size},
      {p("self_attn.v_proj"), kv, c.hidden_size},
      {p("self_attn.o_proj"), c.hidden_size, q},
      {p("mlp.gate_proj"), c.intermediate_size, c.hidden_size},
      {p("mlp.up_proj"), c.intermediate_size, c.hidden_size},
      {p("mlp.down_proj"), c.hidden_size, c.intermediate_size},
  };
}

Status check_llama_tensors(const ModelConfig& config, const TensorMap& tensors) {
  RETURN_IF_ERROR(config.validate());
  const int64_t hidden = config.hidden_size;
  const TensorView* embed = nullptr;
  RETURN_IF_ERROR(expect(tensors, "model.embed_tokens.weight", {config.vocab_size, hidden}, &embed));
  if (is_fp8(embed->dtype)) {
    return InvalidArgument("tensor 'model.embed_tokens.weight' is FP8; embeddings must stay "
                           "in a wider type");
  }
  RETURN_IF_ERROR(check_norm(tensors, "model.norm.weight", hidden));
  if (!config.tie_word_embeddings || tensors.count("lm_head.weight")) {
    // Tied checkpoints sometimes store the copy anyway; it must still have the right shape.
    LlamaLinear head{"lm_head", config.vocab_size, hidden};
    RETURN_IF_ERROR(check_linear(config, tensors, head, false));
  }
  for (int64_t l = 0; l < config.num_layers; ++l) {
    RETURN_IF_ERROR(check_norm(tensors, layer_tensor(l, "input_layernorm.weight"), hidden));
    RETURN_IF_ERROR(check_norm(tensors, layer_tensor(l, "post_attention_layernorm.weight"), hidden));
    for (const LlamaLinear& lin : llama_linears(config, l)) {
      const bool mlp = lin.prefix.find(".mlp.") != std::string::npos;
      RETURN_IF_ERROR(
          check_linear(config, tensors, lin, mlp ? config.mlp_bias : config.attention_bias));
    }
    for (const char* kv : {"self_attn.k_scale", "self_attn.v_scale"}) {
      if (const TensorView* s = find(tensors, layer_tensor(l, kv))) {
        RETURN_IF_ERROR(check_single_value(layer_tensor(l, kv), *s));
      }
    }
  }
  for (const auto& [name, t] : tensors) {
    int64_t l = layer_of(name);
    if (l >= config.num_layers) {
      return InvalidArgument("tensor '" + name + "' belongs to layer " + std::to_string(l) +
                             " but the config has num_hidden_layers " +
                             std::to_string(config.num_layers));
    }
  }
  return OkStatus();
}

}  // namespace lancet
