// load_llama_weights: HF tensor names -> backend weights, with shape checks.
#include "model/llama_weights.h"

#include "quant/fp8_weights.h"
#include "quant/gguf_blocks.h"

namespace lancet {

namespace {

bool is_fp8(DType t) { return t == DType::kF8E4M3 || t == DType::kF8E5M2; }

// Looks tensors up, converts them as the options ask and hands them to the backend.
struct Loader {
  const ModelSource& src;
  Backend& be;
  const LlamaWeightOptions& opts;
  const TpRankLayout& layout;
  std::vector<std::shared_ptr<const void>>* owned;

  // Keeps a converted copy alive for as long as the weights and returns a view of it.
  TensorView keep(OwnedTensor t) {
    auto p = std::make_shared<OwnedTensor>(std::move(t));
    owned->push_back(p);
    return p->view();
  }

  // The rank's rows or columns of the (converted) weight and of its per-row scales; nothing
  // when the rank holds the whole tensor. zero_row: one more row of zeros (the embedding).
  Status shard(const std::string& name, int64_t rows, int64_t cols, bool zero_row, TensorView* w, TensorView* scale,
               WeightSpec* spec) {
    const TpSlice sl = tp_slice_of(name, src.config(), layout);
    const bool by_rows = sl.split == TpSplit::kRows && sl.count < rows;
    const bool by_cols = sl.split == TpSplit::kCols && sl.count < cols;
    if (!by_rows && !by_cols) return OkStatus();
    auto part = by_rows ? tp_slice_rows(*spec->tensor, sl.begin, sl.count, name)
                        : tp_slice_cols(*spec->tensor, sl.begin, sl.count, name);
    if (!part.ok()) return part.status().with_context(src.path());
    if (zero_row) {
      part->shape[0] += 1;
      part->bytes.resize(part->bytes.size() + static_cast<size_t>(cols) * dtype_info(part->dtype).block_bytes, 0);
    }
    *w = keep(std::move(*part));
    spec->tensor = w;
    if (by_rows && spec->scale && spec->scale->numel() > 1) {
      auto s = tp_slice_scale_rows(*spec->scale, sl.begin, sl.count, name + " scale");
      if (!s.ok()) return s.status().with_context(src.path());
      *scale = keep(std::move(*s));
      spec->scale = scale;
    }
    return OkStatus();
  }

  StatusOr<WeightMatrix> matrix(const std::string& name, int64_t rows, int64_t cols, bool zero_row = false) {
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
    TensorView converted, converted_scale;
    if (opts.quantize_fp8 && !is_fp8(t->dtype) && fp8_quantizes_tensor(name)) {
      auto q = quantize_weight_fp8(*t, name, {}, opts.fp8_gptq ? opts.fp8_gptq->find(name) : nullptr);
      if (!q.ok()) return q.status().with_context(src.path());
      converted = keep(std::move(q->weight));
      converted_scale = keep(std::move(q->scale));
      spec.tensor = &converted;
      spec.scale = &converted_scale;
    } else if (opts.quantize_fp8 && !is_fp8(t->dtype)) {
      auto kept = fp8_kept_tensor(*t, name);
      if (!kept.ok()) return kept.status().with_context(src.path());
      if (kept->has_value()) {
        converted = keep(std::move(**kept));
        spec.tensor = &converted;
      }
    } else if (opts.dequantize_to_bf16 && dtype_info(t->dtype).is_quantized) {
      auto b = tensor_to_bf16(*t, name);
      if (!b.ok()) return b.status().with_context(src.path());
      converted = keep(std::move(*b));
      spec.tensor = &converted;
    }
    TensorView part, part_scale;
    RETURN_IF_ERROR(shard(name, rows, cols, zero_row, &part, &part_scale, &spec));
    ASSIGN_OR_RETURN(WeightMatrix w, be.upload_weight(spec));
    w.fp8_activations = opts.fp8_activations && fp8_quantizes_tensor(name);
    return w;
  }

  StatusOr<Buffer> vec(const std::string& name, int64_t n) {
    const TensorView* t = src.find(name);
    if (!t) return NotFound(src.path() + ": missing tensor " + name);
    if (t->numel() != n)
      return InvalidArgument(src.path() + ": tensor " + name + " has shape " + shape_to_string(t->shape) +
                             ", expected [" + std::to_string(n) + "]");
    return be.upload_vector_f32(*t, src.path() + ": " + name);
  }
};

}  // namespace

StatusOr<LlamaWeights> load_llama_weights(const ModelSource& src, Backend& be, const LlamaWeightOptions& opts,
                                          const TpRankLayout& layout) {
  const ModelConfig& c = src.config();
  RETURN_IF_ERROR(c.validate());
  if (c.attention_bias || c.mlp_bias) return Unimplemented(src.path() + ": attention/mlp biases are not supported");
  const int64_t H = c.hidden_size, I = c.intermediate_size, D = c.head_dim;
  const int64_t q_dim = c.num_heads * D, kv_dim = c.num_kv_heads * D;
  LlamaWeights w;
  Loader ld{src, be, opts, layout, &w.owned};
  const bool split_vocab = layout.vocab < c.vocab_size;
  ASSIGN_OR_RETURN(w.embed, ld.matrix("model.embed_tokens.weight", c.vocab_size, H, split_vocab));
  if (src.find("lm_head.weight") && !c.tie_word_embeddings) {
    ASSIGN_OR_RETURN(w.lm_head, ld.matrix("lm_head.weight", c.vocab_size, H));
  } else if (split_vocab) {
    ASSIGN_OR_RETURN(w.lm_head, ld.matrix("model.embed_tokens.weight", c.vocab_size, H));  // tied, no zero row
  } else {
    w.lm_head = w.embed;  // tied (GGUF files omit output.weight when tied)
  }
  ASSIGN_OR_RETURN(w.final_norm, ld.vec("model.norm.weight", H));
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    LlamaLayerWeights L;
    ASSIGN_OR_RETURN(L.input_norm, ld.vec(p + "input_layernorm.weight", H));
    ASSIGN_OR_RETURN(L.post_norm, ld.vec(p + "post_attention_layernorm.weight", H));
    ASSIGN_OR_RETURN(L.q, ld.matrix(p + "self_attn.q_proj.weight", q_dim, H));
    ASSIGN_OR_RETURN(L.k, ld.matrix(p + "self_attn.k_proj.weight", kv_dim, H));
    ASSIGN_OR_RETURN(L.v, ld.matrix(p + "self_attn.v_proj.weight", kv_dim, H));
    ASSIGN_OR_RETURN(L.o, ld.matrix(p + "self_attn.o_proj.weight", H, q_dim));
    ASSIGN_OR_RETURN(L.gate, ld.matrix(p + "mlp.gate_proj.weight", I, H));
    ASSIGN_OR_RETURN(L.up, ld.matrix(p + "mlp.up_proj.weight", I, H));
    ASSIGN_OR_RETURN(L.down, ld.matrix(p + "mlp.down_proj.weight", H, I));
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
