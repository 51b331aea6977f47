// GgufSource: llama.* metadata -> ModelConfig, ggml tensor names -> HF names (see gguf_source.h).
#include "io/gguf_source.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <map>

#include "io/gguf.h"
#include "io/llama_tensors.h"

namespace lancet {
namespace {

// Per-layer tensors: ggml suffix <-> HF suffix (after "blk.N." / "model.layers.N.").
constexpr std::pair<const char*, const char*> kLayerNames[] = {
    {"attn_q.weight", "self_attn.q_proj.weight"},
    {"attn_k.weight", "self_attn.k_proj.weight"},
    {"attn_v.weight", "self_attn.v_proj.weight"},
    {"attn_output.weight", "self_attn.o_proj.weight"},
    {"attn_q.bias", "self_attn.q_proj.bias"},
    {"attn_k.bias", "self_attn.k_proj.bias"},
    {"attn_v.bias", "self_attn.v_proj.bias"},
    {"attn_output.bias", "self_attn.o_proj.bias"},
    {"ffn_gate.weight", "mlp.gate_proj.weight"},
    {"ffn_up.weight", "mlp.up_proj.weight"},
    {"ffn_down.weight", "mlp.down_proj.weight"},
    {"ffn_gate.bias", "mlp.gate_proj.bias"},
    {"ffn_up.bias", "mlp.up_proj.bias"},
    {"ffn_down.bias", "mlp.down_proj.bias"},
    {"attn_norm.weight", "input_layernorm.weight"},
    {"ffn_norm.weight", "post_attention_layernorm.weight"},
};
constexpr std::pair<const char*, const char*> kGlobalNames[] = {
    {"token_embd.weight", "model.embed_tokens.weight"},
    {"output_norm.weight", "model.norm.weight"},
    {"output.weight", "lm_head.weight"},
    {"rope_freqs.weight", "rope_freqs"},
};

// "<prefix><digits>.<rest>" -> (layer, rest).
bool split_layer(const std::string& name, const std::string& prefix, int64_t* layer,
                 std::string* rest) {
  if (name.compare(0, prefix.size(), prefix) != 0) return false;
  size_t i = prefix.size(), j = i;
  while (j < name.size() && j - i < 9 && name[j] >= '0' && name[j] <= '9') ++j;
  if (j == i || j >= name.size() || name[j] != '.') return false;
  if (name[i] == '0' && j - i > 1) return false;  // no leading zeros: names must round-trip
  *layer = std::strtoll(name.substr(i, j - i).c_str(), nullptr, 10);
  *rest = name.substr(j + 1);
  return true;
}

class GgufSource final : public ModelSource {
 public:
  const std::string& path() const override { return path_; }
  const char* format() const override { return "gguf"; }
  const ModelConfig& config() const override { return config_; }
  const TokenizerSource& tokenizer() const override { return tokenizer_; }
  const std::map<std::string, TensorView>& tensors() const override { return tensors_; }
  const GgufFile* gguf() const override { return file_.get(); }

  std::string path_;
  std::unique_ptr<GgufFile> file_;
  ModelConfig config_;
  TokenizerSource tokenizer_;
  std::map<std::string, TensorView> tensors_;
};

// Reads an optional key through a typed getter: absent -> keep *out; wrong type -> error.
template <typename T, typename Getter>
Status optional_key(const GgufFile& f, const std::string& key, Getter get, T* out) {
  if (!f.has(key)) return OkStatus();
  auto v = (f.*get)(key);
  if (!v.ok()) return v.status();
  *out = static_cast<T>(*v);
  return OkStatus();
}

template <typename T, typename Getter>
Status required_key(const GgufFile& f, const std::string& key, Getter get, T* out) {
  auto v = (f.*get)(key);
  if (!v.ok()) return v.status();
  *out = static_cast<T>(*v);
  return OkStatus();
}

Status read_rope_scaling(const GgufFile& f, ModelConfig* c) {
  const std::string p = "llama.rope.scaling.";
  std::string type = "none";
  RETURN_IF_ERROR(optional_key(f, p + "type", &GgufFile::get_string, &type));
  RopeScaling& rs = c->rope_scaling;
  if (type == "none") {
    rs.type = RopeType::kDefault;
  } else if (type == "linear") {
    rs.type = RopeType::kLinear;
  } else if (type == "yarn") {
    rs.type = RopeType::kYarn;
  } else {
    return Unimplemented(f.path() + ": key '" + p + "type' is \"" + type +
                         "\"; supported: none, linear, yarn");
  }
  RETURN_IF_ERROR(optional_key(f, p + "factor", &GgufFile::get_f64, &rs.factor));
  RETURN_IF_ERROR(optional_key(f, p + "original_context_length", &GgufFile::get_i64,
                               &rs.original_max_position_embeddings));
  RETURN_IF_ERROR(optional_key(f, p + "attn_factor", &GgufFile::get_f64, &rs.attention_factor));
  RETURN_IF_ERROR(optional_key(f, p + "yarn_beta_fast", &GgufFile::get_f64, &rs.beta_fast));
  RETURN_IF_ERROR(optional_key(f, p + "yarn_beta_slow", &GgufFile::get_f64, &rs.beta_slow));
  // Older converters wrote `rope.scale_linear` for linear scaling.
  if (type == "none" && f.has("llama.rope.scale_linear")) {
    RETURN_IF_ERROR(required_key(f, "llama.rope.scale_linear", &GgufFile::get_f64, &rs.factor));
    if (rs.factor != 1.0) rs.type = RopeType::kLinear;
  }
  return OkStatus();
}

Status read_config(const GgufFile& f, ModelConfig* c, TokenizerSource* tok) {
  c->architecture = "LlamaForCausalLM";
  c->model_type = "llama";
  const std::string a = "llama.";
  RETURN_IF_ERROR(required_key(f, a + "embedding_length", &GgufFile::get_i64, &c->hidden_size));
  RETURN_IF_ERROR(required_key(f, a + "block_count", &GgufFile::get_i64, &c->num_layers));
  RETURN_IF_ERROR(required_key(f, a + "feed_forward_length", &GgufFile::get_i64, &c->intermediate_size));
  RETURN_IF_ERROR(required_key(f, a + "attention.head_count", &GgufFile::get_i64, &c->num_heads));
  c->num_kv_heads = c->num_heads;
  RETURN_IF_ERROR(optional_key(f, a + "attention.head_count_kv", &GgufFile::get_i64, &c->num_kv_heads));
  RETURN_IF_ERROR(required_key(f, a + "context_length", &GgufFile::get_i64, &c->max_position_embeddings));
  RETURN_IF_ERROR(optional_key(f, a + "attention.layer_norm_rms_epsilon", &GgufFile::get_f64, &c->rms_norm_eps));
  RETURN_IF_ERROR(optional_key(f, a + "rope.freq_base", &GgufFile::get_f64, &c->rope_theta));

  c->head_dim = c->num_heads > 0 ? c->hidden_size / c->num_heads : 0;
  int64_t rope_dims = 0;
  RETURN_IF_ERROR(optional_key(f, a + "attention.key_length", &GgufFile::get_i64, &c->head_dim));
  RETURN_IF_ERROR(optional_key(f, a + "rope.dimension_count", &GgufFile::get_i64, &rope_dims));
  if (!f.has(a + "attention.key_length") && rope_dims > 0) c->head_dim = rope_dims;
  if (rope_dims > 0 && rope_dims != c->head_dim) {
    return Unimplemented(f.path() + ": key 'llama.rope.dimension_count' = " +
                         std::to_string(rope_dims) + " differs from head_dim " +
                         std::to_string(c->head_dim) + " (partial rotary is not supported)");
  }
  int64_t value_len = c->head_dim;
  RETURN_IF_ERROR(optional_key(f, a + "attention.value_length", &GgufFile::get_i64, &value_len));
  if (value_len != c->head_dim) {
    return Unimplemented(f.path() + ": key 'llama.attention.value_length' differs from key_length");
  }
  RETURN_IF_ERROR(read_rope_scaling(f, c));

  // Vocabulary: explicit key, else the token list, else the embedding rows.
  if (f.has(a + "vocab_size")) {
    RETURN_IF_ERROR(required_key(f, a + "vocab_size", &GgufFile::get_i64, &c->vocab_size));
  } else if (f.has("tokenizer.ggml.tokens")) {
    ASSIGN_OR_RETURN(const GgufArray* toks, f.get_array("tokenizer.ggml.tokens"));
    c->vocab_size = static_cast<int64_t>(toks->size());
  } else if (const GgufTensor* e = f.find_tensor("token_embd.weight"); e && e->shape.size() == 2) {
    c->vocab_size = e->shape[0];
  }

  RETURN_IF_ERROR(optional_key(f, "tokenizer.ggml.bos_token_id", &GgufFile::get_i64, &c->bos_token_id));
  RETURN_IF_ERROR(optional_key(f, "tokenizer.ggml.padding_token_id", &GgufFile::get_i64, &c->pad_token_id));
  c->eos_token_ids.clear();
  for (const char* key : {"tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id",
                          "tokenizer.ggml.eom_token_id"}) {
    int64_t id = -1;
    RETURN_IF_ERROR(optional_key(f, key, &GgufFile::get_i64, &id));
    if (id >= 0 && std::find(c->eos_token_ids.begin(), c->eos_token_ids.end(), id) == c->eos_token_ids.end()) {
      c->eos_token_ids.push_back(id);
    }
  }

  tok->from_gguf = true;
  RETURN_IF_ERROR(optional_key(f, "tokenizer.chat_template", &GgufFile::get_string, &tok->chat_template));
  if (const GgufValue* toks = f.find("tokenizer.ggml.tokens"); toks && toks->type == GgufType::kArray) {
    const GgufArray& t = toks->as_array();
    auto text = [&](int64_t id) -> std::string {
      if (id < 0 || id >= static_cast<int64_t>(t.size()) || t[id].type != GgufType::kString) return "";
      return t[id].as_string();
    };
    tok->bos_token = text(c->bos_token_id);
    if (!c->eos_token_ids.empty()) tok->eos_token = text(c->eos_token_ids.front());
  }
  return OkStatus();
}

Status map_tensors(const GgufFile& f, GgufSource* src) {
  for (const GgufTensor& t : f.tensors()) {
    auto hf = gguf_to_hf_name(t.name);
    if (!hf) {
      return Unimplemented(f.path() + ": tensor '" + t.name +
                           "' is not part of the llama architecture");
    }
    src->tensors_.emplace(*hf, t.view());
  }
  ModelConfig& c = src->config_;
  c.tie_word_embeddings = f.find_tensor("output.weight") == nullptr;
  c.attention_bias = f.find_tensor("blk.0.attn_q.bias") != nullptr;
  c.mlp_bias = f.find_tensor("blk.0.ffn_gate.bias") != nullptr;
  c.quant.method = QuantMethod::kGguf;
  // The checkpoint's "dtype" is that of its linear weights (the first layer's q projection).
  if (const GgufTensor* q = f.find_tensor("blk.0.attn_q.weight")) c.dtype = q->dtype;
  if (const GgufTensor* r = f.find_tensor("rope_freqs.weight")) {
    if (r->dtype != DType::kF32 || r->shape.size() != 1 || r->shape[0] * 2 != c.head_dim) {
      return InvalidArgument(f.path() + ": tensor 'rope_freqs.weight' must be f32 [head_dim/2 = " +
                             std::to_string(c.head_dim / 2) + "], got " + dtype_name(r->dtype) +
                             " " + shape_to_string(r->shape));
    }
  }
  return OkStatus();
}

}  // namespace

std::optional<std::string> gguf_to_hf_name(const std::string& name) {
  for (const auto& [g, h] : kGlobalNames) {
    if (name == g) return std::string(h);
  }
  int64_t layer;
  std::string rest;
  if (!split_layer(name, "blk.", &layer, &rest)) return std::nullopt;
  for (const auto& [g, h] : kLayerNames) {
    if (rest == g) return "model.layers." + std::to_string(layer) + "." + h;
  }
  return std::nullopt;
}

std::optional<std::string> hf_to_gguf_name(const std::string& name) {
  for (const auto& [g, h] : kGlobalNames) {
    if (name == h) return std::string(g);
  }
  int64_t layer;
  std::string rest;
  if (!split_layer(name, "model.layers.", &layer, &rest)) return std::nullopt;
  for (const auto& [g, h] : kLayerNames) {
    if (rest == h) return "blk." + std::to_string(layer) + "." + g;
  }
  return std::nullopt;
}

StatusOr<std::unique_ptr<ModelSource>> open_gguf_source(const std::string& path) {
  auto src = std::make_unique<GgufSource>();
  src->path_ = path;
  ASSIGN_OR_RETURN(src->file_, GgufFile::open(path));
  const GgufFile& f = *src->file_;
  std::string arch;
  RETURN_IF_ERROR(required_key(f, "general.architecture", &GgufFile::get_string, &arch));
  if (arch != "llama") {
    return Unimplemented(path + ": general.architecture is \"" + arch +
                         "\"; only \"llama\" is supported");
  }
  RETURN_IF_ERROR(read_config(f, &src->config_, &src->tokenizer_));
  RETURN_IF_ERROR(map_tensors(f, src.get()));
  src->config_.rope_interleaved = true;
  Status s = check_llama_tensors(src->config_, src->tensors_);
  if (!s.ok()) return s.with_context(path);
  return std::unique_ptr<ModelSource>(std::move(src));
}

}  // namespace lancet
