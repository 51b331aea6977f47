// config.json / generation_config.json / tokenizer_config.json parsing. Every field is type
// checked (a JSON null counts as absent, as transformers writes them), and errors name the file
// and the field.
#include "io/hf_config.h"

#include <cmath>
#include <limits>

#include <nlohmann/json.hpp>

#include "io/text_file.h"

namespace lancet {
namespace {

using json = nlohmann::json;

// Reads optional typed fields of one JSON object; `where` is "file: prefix" for messages.
class Fields {
 public:
  Fields(const json& obj, std::string where) : obj_(obj), where_(std::move(where)) {}

  const json* find(const char* key) const {
    auto it = obj_.find(key);
    return (it == obj_.end() || it->is_null()) ? nullptr : &*it;
  }
  bool has(const char* key) const { return find(key) != nullptr; }

  Status error(const char* key, const std::string& why) const {
    return InvalidArgument(where_ + key + " " + why);
  }

  Status get_int(const char* key, int64_t* out, bool required = false) const {
    const json* v = find(key);
    if (!v) return required ? error(key, "is missing") : OkStatus();
    return to_int(key, *v, out);
  }
  Status to_int(const char* key, const json& v, int64_t* out) const {
    if (v.is_number_unsigned()) {
      if (v.get<uint64_t>() > static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) {
        return error(key, "is out of range");
      }
      *out = static_cast<int64_t>(v.get<uint64_t>());
    } else if (v.is_number_integer()) {
      *out = v.get<int64_t>();
    } else if (v.is_number_float()) {
      // Some writers emit 131072.0; accept whole numbers only.
      double d = v.get<double>();
      if (!std::isfinite(d) || d != std::floor(d) || std::fabs(d) > 9e15) {
        return error(key, "must be an integer, got " + v.dump());
      }
      *out = static_cast<int64_t>(d);
    } else {
      return error(key, "must be an integer, got " + v.dump());
    }
    return OkStatus();
  }
  Status get_double(const char* key, double* out) const {
    const json* v = find(key);
    if (!v) return OkStatus();
    if (!v->is_number()) return error(key, "must be a number, got " + v->dump());
    *out = v->get<double>();
    return OkStatus();
  }
  Status get_bool(const char* key, bool* out) const {
    const json* v = find(key);
    if (!v) return OkStatus();
    if (!v->is_boolean()) return error(key, "must be true or false, got " + v->dump());
    *out = v->get<bool>();
    return OkStatus();
  }
  Status get_string(const char* key, std::string* out) const {
    const json* v = find(key);
    if (!v) return OkStatus();
    if (!v->is_string()) return error(key, "must be a string, got " + v->dump());
    *out = v->get<std::string>();
    return OkStatus();
  }
  Status get_string_list(const char* key, std::vector<std::string>* out) const {
    const json* v = find(key);
    if (!v) return OkStatus();
    if (!v->is_array()) return error(key, "must be a list of strings");
    for (const json& e : *v) {
      if (!e.is_string()) return error(key, "must be a list of strings, has " + e.dump());
      out->push_back(e.get<std::string>());
    }
    return OkStatus();
  }
  // An int or a list of ints (eos_token_id); leaves *out untouched when absent.
  Status get_int_list(const char* key, std::vector<int64_t>* out, bool* present) const {
    *present = false;
    const json* v = find(key);
    if (!v) return OkStatus();
    std::vector<int64_t> ids;
    if (v->is_array()) {
      for (const json& e : *v) {
        int64_t id;
        RETURN_IF_ERROR(to_int(key, e, &id));
        ids.push_back(id);
      }
    } else {
      int64_t id;
      RETURN_IF_ERROR(to_int(key, *v, &id));
      ids.push_back(id);
    }
    *out = std::move(ids);
    *present = true;
    return OkStatus();
  }

 private:
  const json& obj_;
  std::string where_;
};

StatusOr<json> parse_object(const std::string& text, const std::string& name) {
  json j;
  try {
    j = json::parse(text);
  } catch (const json::exception& e) {
    return InvalidArgument(name + ": not valid JSON: " + e.what());
  }
  if (!j.is_object()) return InvalidArgument(name + ": not a JSON object");
  return j;
}

StatusOr<DType> parse_torch_dtype(const std::string& name, const std::string& s) {
  if (s == "bfloat16") return DType::kBF16;
  if (s == "float16" || s == "half") return DType::kF16;
  if (s == "float32" || s == "float") return DType::kF32;
  return InvalidArgument(name + ": torch_dtype '" + s + "' is not float32, float16 or bfloat16");
}

// rope: either `rope_parameters` (transformers 5: holds rope_theta too) or `rope_scaling`.
Status parse_rope(const json& cfg, const std::string& name, ModelConfig* out) {
  Fields top(cfg, name + ": ");
  RETURN_IF_ERROR(top.get_double("rope_theta", &out->rope_theta));
  const char* key = top.has("rope_parameters") ? "rope_parameters" : "rope_scaling";
  const json* rope = top.find(key);
  if (!rope) return OkStatus();
  if (!rope->is_object()) return top.error(key, "must be an object");
  Fields f(*rope, name + ": " + key + ".");
  RETURN_IF_ERROR(f.get_double("rope_theta", &out->rope_theta));

  std::string type = "default";
  RETURN_IF_ERROR(f.get_string("type", &type));  // the older spelling
  RETURN_IF_ERROR(f.get_string("rope_type", &type));
  RopeScaling& rs = out->rope_scaling;
  if (type == "default") {
    rs.type = RopeType::kDefault;
  } else if (type == "llama3") {
    rs.type = RopeType::kLlama3;
  } else if (type == "linear") {
    rs.type = RopeType::kLinear;
  } else if (type == "dynamic") {
    rs.type = RopeType::kDynamic;
  } else if (type == "yarn") {
    rs.type = RopeType::kYarn;
  } else {
    return Unimplemented(name + ": " + key + ".rope_type '" + type +
                         "' is not supported (default, llama3, linear, dynamic, yarn)");
  }
  double partial = 1.0;
  RETURN_IF_ERROR(f.get_double("partial_rotary_factor", &partial));
  if (partial != 1.0) return Unimplemented(name + ": partial_rotary_factor != 1 is not supported");
  if (rs.type != RopeType::kDefault && !f.has("factor")) {
    return f.error("factor", "is required for rope_type " + type);
  }
  RETURN_IF_ERROR(f.get_double("factor", &rs.factor));
  RETURN_IF_ERROR(f.get_double("low_freq_factor", &rs.low_freq_factor));
  RETURN_IF_ERROR(f.get_double("high_freq_factor", &rs.high_freq_factor));
  RETURN_IF_ERROR(
      f.get_int("original_max_position_embeddings", &rs.original_max_position_embeddings));
  RETURN_IF_ERROR(f.get_double("beta_fast", &rs.beta_fast));
  RETURN_IF_ERROR(f.get_double("beta_slow", &rs.beta_slow));
  RETURN_IF_ERROR(f.get_double("attention_factor", &rs.attention_factor));
  RETURN_IF_ERROR(f.get_double("mscale", &rs.mscale));
  RETURN_IF_ERROR(f.get_double("mscale_all_dim", &rs.mscale_all_dim));
  RETURN_IF_ERROR(f.get_bool("truncate", &rs.truncate));
  return OkStatus();
}

Status parse_block(const Fields& f, const char* key, std::vector<int64_t>* out) {
  const json* v = f.find(key);
  if (!v) return OkStatus();
  if (!v->is_array() || v->size() != 2) return f.error(key, "must be [rows, cols]");
  out->clear();
  for (const json& e : *v) {
    int64_t b;
    RETURN_IF_ERROR(f.to_int(key, e, &b));
    if (b <= 0) return f.error(key, "must be positive");
    out->push_back(b);
  }
  return OkStatus();
}

Status parse_fp8_method(const Fields& f, QuantConfig* q) {
  q->method = QuantMethod::kFp8;
  std::string scheme = "dynamic";
  RETURN_IF_ERROR(f.get_string("activation_scheme", &scheme));
  if (scheme != "dynamic" && scheme != "static") {
    return f.error("activation_scheme", "must be 'dynamic' or 'static', got '" + scheme + "'");
  }
  q->dynamic_activations = scheme == "dynamic";
  q->weight_granularity = ScaleGranularity::kPerTensor;
  RETURN_IF_ERROR(parse_block(f, "weight_block_size", &q->weight_block_size));
  if (!q->weight_block_size.empty()) q->weight_granularity = ScaleGranularity::kPerBlock;
  RETURN_IF_ERROR(f.get_string_list("ignored_layers", &q->ignored));
  RETURN_IF_ERROR(f.get_string_list("modules_to_not_convert", &q->ignored));
  return OkStatus();
}

// One compressed-tensors quantization args object must describe 8-bit floats.
Status check_fp8_args(const Fields& f, const char* what) {
  int64_t bits = 0;
  std::string type;
  RETURN_IF_ERROR(f.get_int("num_bits", &bits));
  RETURN_IF_ERROR(f.get_string("type", &type));
  if (bits != 8 || type != "float") {
    return Unimplemented(std::string(what) + ": only 8-bit float (FP8) compressed-tensors " +
                         "checkpoints are supported, got num_bits " + std::to_string(bits) +
                         " type '" + type + "'");
  }
  return OkStatus();
}

Status parse_compressed_tensors(const json& qc, const Fields& f, const std::string& where,
                                QuantConfig* q) {
  q->method = QuantMethod::kCompressedTensors;
  const json* groups = f.find("config_groups");
  if (!groups || !groups->is_object() || groups->empty()) {
    return f.error("config_groups", "must be a non-empty object");
  }
  bool first = true;
  for (auto it = groups->begin(); it != groups->end(); ++it) {
    const std::string gw = where + "config_groups." + it.key() + ".";
    if (!it.value().is_object()) return InvalidArgument(gw + " is not an object");
    Fields g(it.value(), gw);
    const json* w = g.find("weights");
    if (!w || !w->is_object()) return g.error("weights", "must be an object");
    Fields wf(*w, gw + "weights.");
    RETURN_IF_ERROR(check_fp8_args(wf, (gw + "weights").c_str()));
    std::string strategy;
    RETURN_IF_ERROR(wf.get_string("strategy", &strategy));
    ScaleGranularity gran;
    std::vector<int64_t> block;
    if (strategy == "tensor") {
      gran = ScaleGranularity::kPerTensor;
    } else if (strategy == "channel") {
      gran = ScaleGranularity::kPerChannel;
    } else if (strategy == "block") {
      gran = ScaleGranularity::kPerBlock;
      RETURN_IF_ERROR(parse_block(wf, "block_structure", &block));
      if (block.empty()) return wf.error("block_structure", "is required for strategy 'block'");
    } else {
      return Unimplemented(gw + "weights.strategy '" + strategy +
                           "' is not supported (tensor, channel, block)");
    }
    bool dynamic = true;
    if (const json* a = g.find("input_activations")) {
      if (!a->is_object()) return g.error("input_activations", "must be an object");
      Fields af(*a, gw + "input_activations.");
      RETURN_IF_ERROR(check_fp8_args(af, (gw + "input_activations").c_str()));
      RETURN_IF_ERROR(af.get_bool("dynamic", &dynamic));
    }
    if (!first && (gran != q->weight_granularity || block != q->weight_block_size ||
                   dynamic != q->dynamic_activations)) {
      return Unimplemented(where + "config_groups with different schemes are not supported");
    }
    q->weight_granularity = gran;
    q->weight_block_size = block;
    q->dynamic_activations = dynamic;
    first = false;
  }
  RETURN_IF_ERROR(f.get_string_list("ignore", &q->ignored));
  if (const json* kv = f.find("kv_cache_scheme")) {
    if (!kv->is_object()) return f.error("kv_cache_scheme", "must be an object");
    Fields kf(*kv, where + "kv_cache_scheme.");
    RETURN_IF_ERROR(check_fp8_args(kf, (where + "kv_cache_scheme").c_str()));
    q->kv_cache_fp8 = true;
  }
  (void)qc;
  return OkStatus();
}

Status parse_quantization(const json& cfg, const std::string& name, QuantConfig* q) {
  auto it = cfg.find("quantization_config");
  if (it == cfg.end() || it->is_null()) return OkStatus();
  const std::string where = name + ": quantization_config.";
  if (!it->is_object()) return InvalidArgument(name + ": quantization_config is not an object");
  Fields f(*it, where);
  std::string method;
  RETURN_IF_ERROR(f.get_string("quant_method", &method));
  if (method == "fp8") return parse_fp8_method(f, q);
  if (method == "compressed-tensors") return parse_compressed_tensors(*it, f, where, q);
  return Unimplemented(where + "quant_method '" + method +
                       "' is not supported (fp8, compressed-tensors)");
}

Status parse_architecture(const Fields& f, const json& cfg, const std::string& name,
                          ModelConfig* out) {
  RETURN_IF_ERROR(f.get_string("model_type", &out->model_type));
  std::vector<std::string> archs;
  RETURN_IF_ERROR(f.get_string_list("architectures", &archs));
  if (!archs.empty()) {
    out->architecture = archs[0];
    if (archs[0] != "LlamaForCausalLM") {
      return Unimplemented(name + ": architecture '" + archs[0] +
                           "' is not supported (LlamaForCausalLM)");
    }
  } else if (out->model_type != "llama") {
    return Unimplemented(name + ": model_type '" + out->model_type + "' is not supported (llama)");
  }
  std::string act = "silu";
  RETURN_IF_ERROR(f.get_string("hidden_act", &act));
  if (act != "silu") return Unimplemented(name + ": hidden_act '" + act + "' (only silu)");
  return OkStatus();
}

}  // namespace

StatusOr<ModelConfig> parse_hf_config(const std::string& json_text, const std::string& name) {
  ASSIGN_OR_RETURN(json cfg, parse_object(json_text, name));
  ModelConfig c;
  // transformers' LlamaConfig defaults for fields a config may leave out.
  c.rms_norm_eps = 1e-6;
  c.max_position_embeddings = 2048;
  Fields f(cfg, name + ": ");
  RETURN_IF_ERROR(parse_architecture(f, cfg, name, &c));
  RETURN_IF_ERROR(f.get_int("vocab_size", &c.vocab_size, /*required=*/true));
  RETURN_IF_ERROR(f.get_int("hidden_size", &c.hidden_size, true));
  RETURN_IF_ERROR(f.get_int("intermediate_size", &c.intermediate_size, true));
  RETURN_IF_ERROR(f.get_int("num_hidden_layers", &c.num_layers, true));
  RETURN_IF_ERROR(f.get_int("num_attention_heads", &c.num_heads, true));
  c.num_kv_heads = c.num_heads;
  RETURN_IF_ERROR(f.get_int("num_key_value_heads", &c.num_kv_heads));
  if (f.has("head_dim")) {
    RETURN_IF_ERROR(f.get_int("head_dim", &c.head_dim));
  } else if (c.num_heads > 0) {
    if (c.hidden_size % c.num_heads != 0) {
      return f.error("hidden_size", "is not a multiple of num_attention_heads and no head_dim "
                                    "is given");
    }
    c.head_dim = c.hidden_size / c.num_heads;
  }
  RETURN_IF_ERROR(f.get_double("rms_norm_eps", &c.rms_norm_eps));
  RETURN_IF_ERROR(f.get_int("max_position_embeddings", &c.max_position_embeddings));
  RETURN_IF_ERROR(f.get_bool("tie_word_embeddings", &c.tie_word_embeddings));
  RETURN_IF_ERROR(f.get_bool("attention_bias", &c.attention_bias));
  RETURN_IF_ERROR(f.get_bool("mlp_bias", &c.mlp_bias));
  // transformers 5 writes "dtype"; older versions "torch_dtype".
  std::string dtype;
  RETURN_IF_ERROR(f.get_string("torch_dtype", &dtype));
  RETURN_IF_ERROR(f.get_string("dtype", &dtype));
  if (!dtype.empty()) {
    ASSIGN_OR_RETURN(c.dtype, parse_torch_dtype(name, dtype));
  }
  RETURN_IF_ERROR(parse_rope(cfg, name, &c));

  RETURN_IF_ERROR(f.get_int("pad_token_id", &c.pad_token_id));
  std::vector<int64_t> bos;
  bool present = false;
  RETURN_IF_ERROR(f.get_int_list("bos_token_id", &bos, &present));
  if (present && !bos.empty()) c.bos_token_id = bos[0];
  RETURN_IF_ERROR(f.get_int_list("eos_token_id", &c.eos_token_ids, &present));

  RETURN_IF_ERROR(parse_quantization(cfg, name, &c.quant));
  Status st = c.validate();
  if (!st.ok()) return st.with_context(name);
  return c;
}

StatusOr<ModelConfig> load_hf_config(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  return parse_hf_config(text, path);
}

Status apply_generation_config(const std::string& json_text, const std::string& name,
                               ModelConfig* config) {
  ASSIGN_OR_RETURN(json g, parse_object(json_text, name));
  Fields f(g, name + ": ");
  std::vector<int64_t> ids;
  bool present = false;
  RETURN_IF_ERROR(f.get_int_list("bos_token_id", &ids, &present));
  if (present && !ids.empty()) config->bos_token_id = ids[0];
  RETURN_IF_ERROR(f.get_int_list("eos_token_id", &ids, &present));
  if (present) config->eos_token_ids = ids;
  RETURN_IF_ERROR(f.get_int("pad_token_id", &config->pad_token_id));
  return OkStatus();
}

Status parse_tokenizer_config(const std::string& json_text, const std::string& name,
                              TokenizerSource* out) {
  ASSIGN_OR_RETURN(json t, parse_object(json_text, name));
  Fields f(t, name + ": ");
  if (const json* ct = f.find("chat_template")) {
    if (ct->is_string()) {
      out->chat_template = ct->get<std::string>();
    } else if (ct->is_array()) {
      // [{"name": "default", "template": ...}, {"name": "tool_use", ...}]
      bool found = false;
      for (const json& e : *ct) {
        if (!e.is_object() || !e.contains("name") || !e["name"].is_string() ||
            !e.contains("template") || !e["template"].is_string()) {
          return f.error("chat_template", "list entries must be {name, template} strings");
        }
        if (e["name"] == "default") {
          out->chat_template = e["template"].get<std::string>();
          found = true;
        }
      }
      if (!found && !ct->empty()) {
        return f.error("chat_template", "list has no template named 'default'");
      }
    } else {
      return f.error("chat_template", "must be a string or a list of {name, template}");
    }
  }
  // Special tokens are either plain strings or AddedToken objects {"content": ...}.
  auto token = [&](const char* key, std::string* dst) -> Status {
    const json* v = f.find(key);
    if (!v) return OkStatus();
    if (v->is_string()) {
      *dst = v->get<std::string>();
    } else if (v->is_object() && v->contains("content") && (*v)["content"].is_string()) {
      *dst = (*v)["content"].get<std::string>();
    } else {
      return f.error(key, "must be a string or {\"content\": string}");
    }
    return OkStatus();
  };
  RETURN_IF_ERROR(token("bos_token", &out->bos_token));
  RETURN_IF_ERROR(token("eos_token", &out->eos_token));
  return OkStatus();
}

}  // namespace lancet
