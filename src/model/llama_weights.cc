// load_llama_weights: HF tensor names -> backend weights, with shape checks.
#include "model/llama_weights.h"

#include "quant/gguf_blocks.h"

namespace lancet {

namespace {

StatusOr<WeightMatrix> matrix(const ModelSource& src, Backend& be, const std::string& name, int64_t rows,
                              int64_t cols) {
  const TensorView* t = src.find(name);
  if (!t) return NotFound(src.path() + ": missing tensor " + name);
  if (t->shape.size() != 2 || t->shape[0] != rows || t->shape[1] != cols)
    return InvalidArgument(src.path() + ": tensor " + name + " has shape " + shape_to_string(t->shape) +
                           ", expected [" + std::to_string(rows) + ", " + std::to_string(cols) + "]");
  WeightSpec spec;
  spec.name = name;
  spec.tensor = t;
  // FP8 checkpoints (both vLLM layouts) carry "<module>.weight_scale" next to "<module>.weight".
  const std::string base = name.substr(0, name.size() - std::string("weight").size());
  spec.scale = src.find(base + "weight_scale");
  return be.upload_weight(spec);
}

StatusOr<Buffer> vec(const ModelSource& src, Backend& be, const std::string& name, int64_t n) {
  const TensorView* t = src.find(name);
  if (!t) return NotFound(src.path() + ": missing tensor " + name);
  if (t->numel() != n)
    return InvalidArgument(src.path() + ": tensor " + name + " has shape " + shape_to_string(t->shape) +
                           ", expected [" + std::to_string(n) + "]");
  return be.upload_vector_f32(*t, src.path() + ": " + name);
}

}  // namespace

StatusOr<LlamaWeights> load_llama_weights(const ModelSource& src, Backend& be) {
  const ModelConfig& c = src.config();
  RETURN_IF_ERROR(c.validate());
  if (c.attention_bias || c.mlp_bias) return Unimplemented(src.path() + ": attention/mlp biases are not supported");
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t q_dim = c.num_heads * D, kv_dim = c.num_kv_heads * D;
  LlamaWeights w;
  ASSIGN_OR_RETURN(w.embed, matrix(src, be, "model.embed_tokens.weight", c.vocab_size, H));
  if (src.find("lm_head.weight") && !c.tie_word_embeddings) {
    ASSIGN_OR_RETURN(w.lm_head, matrix(src, be, "lm_head.weight", c.vocab_size, H));
  } else if (c.tie_word_embeddings || !src.find("lm_head.weight")) {
    w.lm_head = w.embed;  // tied (GGUF files omit output.weight when tied)
  }
  ASSIGN_OR_RETURN(w.final_norm, vec(src, be, "model.norm.weight", H));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LlamaLayerWeights L;
    ASSIGN_OR_RETURN(L.input_norm, vec(src, be, p + "input_layernorm.weight", H));
    ASSIGN_OR_RETURN(L.post_norm, vec(src, be, p + "post_attention_layernorm.weight", H));
    ASSIGN_OR_RETURN(L.q, matrix(src, be, p + "self_attn.q_proj.weight", q_dim, H));
    ASSIGN_OR_RETURN(L.k, matrix(src, be, p + "self_attn.k_proj.weight", kv_dim, H));
    ASSIGN_OR_RETURN(L.v, matrix(src, be, p + "self_attn.v_proj.weight", kv_dim, H));
    ASSIGN_OR_RETURN(L.o, matrix(src, be, p + "self_attn.o_proj.weight", H, q_dim));
    ASSIGN_OR_RETURN(L.gate, matrix(src, be, p + "mlp.gate_proj.weight", I, H));
    ASSIGN_OR_RETURN(L.up, matrix(src, be, p + "mlp.up_proj.weight", I, H));
    ASSIGN_OR_RETURN(L.down, matrix(src, be, p + "mlp.down_proj.weight", H, I));
    w.layers.push_back(std::move(L));
  }
  // llama3-rope GGUF files store the per-frequency divisors as rope_freqs.
  for (const char* name : {"rope_freqs.weight", "model.rope_freqs.weight", "rope_freqs"}) {
    if (const TensorView* t = src.find(name)) {
      if (t->numel() != D / 2)
        return InvalidArgument(src.path() + ": " + name + " has " + std::to_string(t->numel()) +
                               " values, expected head_dim / 2 = " + std::to_string(D / 2));
      w.rope_freq_factors.resize(D / 2);
      if (!convert_to_f32(t->dtype, t->data, w.rope_freq_factors.data(), D / 2))
        return InvalidArgument(src.path() + ": " + name + " must be a float tensor");
      break;
    }
  }
  return w;
}

}  // namespace lancet
