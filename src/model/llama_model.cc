// LlamaModel: weight loading, the rope table upload, and the per-step forward graph.
#include "model/llama_model.h"

#include <cmath>
#include <string>

namespace lancet {

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::create(const ModelSource& src, Backend& backend,
                                                         const LlamaModelOptions& opts) {
  std::unique_ptr<LlamaModel> m(new LlamaModel(backend));
  m->cfg_ = src.config();
  ASSIGN_OR_RETURN(m->w_, load_llama_weights(src, backend));
  int64_t len = opts.max_model_len;
  if (len <= 0) len = std::min<int64_t>(m->cfg_.max_position_embeddings > 0 ? m->cfg_.max_position_embeddings : 8192, 131072);
  m->max_model_len_ = len;
  DType freq_dtype = DType::kF32;
  if (opts.hf_rope_rounding && std::string(src.format()) == "safetensors" &&
      (m->cfg_.dtype == DType::kBF16 || m->cfg_.dtype == DType::kF16))
    freq_dtype = m->cfg_.dtype;
  ASSIGN_OR_RETURN(m->rope_, build_rope_table(m->cfg_, len,
                                              m->w_.rope_freq_factors.empty() ? nullptr
                                                                              : m->w_.rope_freq_factors.data(),
                                              freq_dtype));
  const size_t tb = m->rope_.cos.size() * sizeof(float);
  ASSIGN_OR_RETURN(m->d_cos_, backend.alloc(tb));
  ASSIGN_OR_RETURN(m->d_sin_, backend.alloc(tb));
  RETURN_IF_ERROR(backend.copy_to_device(m->d_cos_.data(), m->rope_.cos.data(), tb));
  RETURN_IF_ERROR(backend.copy_to_device(m->d_sin_.data(), m->rope_.sin.data(), tb));
  return m;
}

KvCacheConfig LlamaModel::kv_cache_config(int64_t num_blocks, int64_t block_size, DType dtype) const {
  KvCacheConfig c;
  c.num_layers = cfg_.num_layers;
  c.num_kv_heads = cfg_.num_kv_heads;
  c.head_dim = cfg_.head_dim;
  c.block_size = block_size;
  c.num_blocks = num_blocks;
  c.dtype = dtype;
  return c;
}

Status LlamaModel::ensure_workspace(int64_t T, int64_t R) {
  if (T <= ws_tokens_ && R <= ws_rows_) return OkStatus();
  T = std::max(T, ws_tokens_);
  R = std::max(R, ws_rows_);
  const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, D = cfg_.head_dim;
  auto f = [&](Buffer* b, int64_t n) -> Status {
    ASSIGN_OR_RETURN(*b, be_.alloc(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float)));
    return OkStatus();
  };
  RETURN_IF_ERROR(f(&residual_, T * H));
  RETURN_IF_ERROR(f(&hidden_, T * H));
  RETURN_IF_ERROR(f(&q_, T * cfg_.num_heads * D));
  RETURN_IF_ERROR(f(&k_, T * cfg_.num_kv_heads * D));
  RETURN_IF_ERROR(f(&v_, T * cfg_.num_kv_heads * D));
  RETURN_IF_ERROR(f(&attn_, T * cfg_.num_heads * D));
  RETURN_IF_ERROR(f(&proj_, T * H));
  RETURN_IF_ERROR(f(&gate_, T * I));
  RETURN_IF_ERROR(f(&up_, T * I));
  RETURN_IF_ERROR(f(&act_, T * I));
  RETURN_IF_ERROR(f(&sel_, R * H));
  RETURN_IF_ERROR(f(&logits_, R * cfg_.vocab_size));
  ws_tokens_ = T;
  ws_rows_ = R;
  return OkStatus();
}

Status LlamaModel::forward(const StepMetadata& st, PagedKvCache& cache, std::vector<float>* logits) {
  const int64_t T = st.num_tokens, R = st.num_logits_rows;
  logits->clear();
  if (T == 0) return OkStatus();
  if (cache.config().num_layers != cfg_.num_layers || cache.config().num_kv_heads != cfg_.num_kv_heads ||
      cache.config().head_dim != cfg_.head_dim)
    return InvalidArgument("forward: kv cache geometry does not match the model");
  for (int32_t p : st.positions)
    if (p >= max_model_len_)
      return OutOfRange("forward: position " + std::to_string(p) + " past max_model_len " +
                        std::to_string(max_model_len_));
  RETURN_IF_ERROR(ensure_workspace(T, R));
  const int64_t H = cfg_.hidden_size, I = cfg_.intermediate_size, D = cfg_.head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  float* residual = residual_.as<float>();
  float* hidden = hidden_.as<float>();
  float* proj = proj_.as<float>();

  RETURN_IF_ERROR(be_.embedding(w_.embed, st.d_token_ids.as<int32_t>(), T, residual));

  RopeArgs ra;
  ra.num_tokens = T;
  ra.num_heads = cfg_.num_heads;
  ra.num_kv_heads = cfg_.num_kv_heads;
  ra.head_dim = D;
  ra.rotary_dim = rope_.rotary_dim;
  ra.interleaved = cfg_.rope_interleaved;
  ra.q = q_.as<float>();
  ra.k = k_.as<float>();
  ra.positions = st.d_positions.as<int32_t>();
  ra.cos = d_cos_.as<float>();
  ra.sin = d_sin_.as<float>();
  ra.max_positions = rope_.max_positions;

  KvWriteArgs kw;
  kw.num_tokens = T;
  kw.k = k_.as<float>();
  kw.v = v_.as<float>();
  kw.slot_mapping = st.d_slot_mapping.as<int64_t>();

  PagedAttentionArgs pa;
  pa.num_tokens = T;
  pa.num_seqs = st.num_seqs;
  pa.num_heads = cfg_.num_heads;
  pa.max_blocks_per_seq = st.max_blocks_per_seq;
  pa.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  pa.q = q_.as<float>();
  pa.query_start = st.d_query_start.as<int32_t>();
  pa.context_lens = st.d_context_lens.as<int32_t>();
  pa.block_tables = st.d_block_tables.as<int32_t>();
  pa.out = attn_.as<float>();

  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const LlamaLayerWeights& L = w_.layers[l];
    RmsNormArgs n1{T, H, l == 0 ? nullptr : proj, residual, L.input_norm.as<float>(), eps, hidden};
    RETURN_IF_ERROR(be_.rms_norm(n1));
    RETURN_IF_ERROR(be_.matmul(hidden, T, L.q, q_.as<float>()));
    RETURN_IF_ERROR(be_.matmul(hidden, T, L.k, k_.as<float>()));
    RETURN_IF_ERROR(be_.matmul(hidden, T, L.v, v_.as<float>()));
    RETURN_IF_ERROR(be_.rope(ra));
    RETURN_IF_ERROR(be_.kv_write(kw, cache.layer(l)));
    RETURN_IF_ERROR(be_.paged_attention(pa, cache.layer(l)));
    RETURN_IF_ERROR(be_.matmul(attn_.as<float>(), T, L.o, proj));
    RmsNormArgs n2{T, H, proj, residual, L.post_norm.as<float>(), eps, hidden};
    RETURN_IF_ERROR(be_.rms_norm(n2));
    RETURN_IF_ERROR(be_.matmul(hidden, T, L.gate, gate_.as<float>()));
    RETURN_IF_ERROR(be_.matmul(hidden, T, L.up, up_.as<float>()));
    RETURN_IF_ERROR(be_.silu_mul(gate_.as<float>(), up_.as<float>(), T, I, act_.as<float>()));
    RETURN_IF_ERROR(be_.matmul(act_.as<float>(), T, L.down, proj));
  }
  if (R == 0) return OkStatus();
  // Only the rows that need logits go through the final norm and the lm_head.
  RETURN_IF_ERROR(be_.gather_rows(residual, T, H, st.d_logits_rows.as<int32_t>(), R, hidden));
  RETURN_IF_ERROR(be_.gather_rows(proj, T, H, st.d_logits_rows.as<int32_t>(), R, sel_.as<float>()));
  RmsNormArgs nf{R, H, sel_.as<float>(), hidden, w_.final_norm.as<float>(), eps, proj};
  RETURN_IF_ERROR(be_.rms_norm(nf));
  RETURN_IF_ERROR(be_.matmul(proj, R, w_.lm_head, logits_.as<float>()));
  logits->resize(R * cfg_.vocab_size);
  RETURN_IF_ERROR(be_.copy_to_host(logits->data(), logits_.as<float>(), logits->size() * sizeof(float)));
  return be_.synchronize();
}

}  // namespace lancet
