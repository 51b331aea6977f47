// LlamaModel: weight loading, the rope table upload, and the per-step forward graph.
#include "model/llama_model.h"

#include "model/decode_graphs.h"

#include <algorithm>
#include <cmath>
#include <string>

namespace lancet {

// The calibration hook: this layer's K (after rope) and V rows, copied to the host and folded
// into the observer's per-layer absmax. Only runs while an observer is attached.
static Status observe_kv(Backend& be, KvAbsmaxObserver* obs, int64_t layer, const float* k /*[rows, row]*/,
                         const float* v /*[rows, row]*/, int64_t rows, int64_t row) {
  std::vector<float> hk(rows * row), hv(rows * row);
  RETURN_IF_ERROR(be.synchronize());
  RETURN_IF_ERROR(be.copy_to_host(hk.data(), k, hk.size() * sizeof(float)));
  RETURN_IF_ERROR(be.copy_to_host(hv.data(), v, hv.size() * sizeof(float)));
  obs->observe(layer, hk.data(), hv.data(), rows * row, rows);
  return OkStatus();
}

// The activation hook: one linear input of this layer ([n] floats), copied to the host and
// folded into the observer.
static Status observe_input(Backend& be, LinearInputObserver* obs, int64_t layer, LinearInput which,
                            const float* x /*[rows, cols]*/, int64_t rows, int64_t cols) {
  if (!obs) return OkStatus();
  std::vector<float> h(static_cast<size_t>(rows * cols));
  RETURN_IF_ERROR(be.synchronize());
  RETURN_IF_ERROR(be.copy_to_host(h.data(), x, h.size() * sizeof(float)));
  return obs->observe(layer, which, h.data(), rows, cols);
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::create(const ModelSource& src, Backend& backend,
                                                         const LlamaModelOptions& opts) {
  std::unique_ptr<LlamaModel> m(new LlamaModel(backend));
  m->cfg_ = src.config();
  ASSIGN_OR_RETURN(m->w_, load_llama_weights(src, backend, opts.weights));
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
  if (opts.decode_graphs && backend.supports_graphs())
    m->graphs_ = std::make_unique<DecodeGraphs>(backend, m->max_model_len_);
  return m;
}

LlamaModel::LlamaModel(Backend& be) : be_(be), uploader_(be) {}
LlamaModel::~LlamaModel() = default;

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
  if (graphs_) graphs_->invalidate();
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

Status LlamaModel::enqueue_step(const StepMetadata& st, PagedKvCache& cache) {
  const int64_t T = st.num_tokens, R = st.num_logits_rows;
  if (cache.config().num_layers != cfg_.num_layers || cache.config().num_kv_heads != cfg_.num_kv_heads ||
      cache.config().head_dim != cfg_.head_dim)
    return InvalidArgument("forward: kv cache geometry does not match the model");
  for (int32_t p : st.positions)
    if (p >= max_model_len_)
      return OutOfRange("forward: position " + std::to_string(p) + " past max_model_len " +
                        std::to_string(max_model_len_));
  if (!cache.has_scales())
    return FailedPrecondition("forward: the fp8 kv cache has no K/V scales (set them from the checkpoint or a calibration)");
  if (graphs_ && !kv_observer_ && !act_observer_ && DecodeGraphs::eligible(st)) return graphs_->run(*this, st, cache, nullptr);
  RETURN_IF_ERROR(ensure_workspace(T, R));
  ASSIGN_OR_RETURN(const StepView v, uploader_.upload(st));
  return enqueue(v, cache);
}

Status LlamaModel::forward(const StepMetadata& st, PagedKvCache& cache, std::vector<float>* logits) {
  const int64_t T = st.num_tokens, R = st.num_logits_rows;
  logits->clear();
  if (T == 0) return OkStatus();
  RETURN_IF_ERROR(enqueue_step(st, cache));
  if (R == 0) return be_.synchronize();
  logits->resize(R * cfg_.vocab_size);
  RETURN_IF_ERROR(be_.copy_to_host(logits->data(), logits_.as<float>(), logits->size() * sizeof(float)));
  return be_.synchronize();
}

Status LlamaModel::forward_sampled(const StepMetadata& st, PagedKvCache& cache,
                                   std::span<const DeviceSampleRow> device, int32_t* tokens,
                                   std::vector<float>* host_logits) {
  const int64_t T = st.num_tokens, R = st.num_logits_rows, V = cfg_.vocab_size;
  host_logits->clear();
  std::vector<uint8_t> on_device(static_cast<size_t>(std::max<int64_t>(R, 0)), 0);
  for (const DeviceSampleRow& d : device) {
    if (d.row < 0 || d.row >= R || on_device[d.row])
      return InvalidArgument("forward_sampled: device row " + std::to_string(d.row) +
                             " is outside the step's logits rows or named twice");
    on_device[d.row] = 1;
  }
  if (!device.empty() && !be_.supports_device_sampling())
    return FailedPrecondition(std::string("forward_sampled: the ") + be_.name() + " backend has no device sampling");
  if (T == 0) return OkStatus();
  RETURN_IF_ERROR(enqueue_step(st, cache));
  const float* d_logits = logits_.as<float>();
  if (!device.empty()) RETURN_IF_ERROR(be_.sample_rows(d_logits, R, V, device, tokens));
  // The other rows, one copy per run of consecutive rows.
  host_logits->resize(static_cast<size_t>((R - static_cast<int64_t>(device.size())) * V));
  int64_t out = 0;
  for (int64_t r = 0; r < R;) {
    if (on_device[r]) {
      ++r;
      continue;
    }
    int64_t e = r;
    while (e < R && !on_device[e]) ++e;
    RETURN_IF_ERROR(be_.copy_to_host(host_logits->data() + out * V, d_logits + r * V,
                                     static_cast<size_t>((e - r) * V) * sizeof(float)));
    out += e - r;
    r = e;
  }
  return be_.synchronize();
}

Status LlamaModel::enqueue(const StepView& st, PagedKvCache& cache) {
  const int64_t T = st.num_tokens, R = st.num_logits_rows;
  if (T > ws_tokens_ || R > ws_rows_) return FailedPrecondition("enqueue: workspace smaller than the step");
  const int64_t H = cfg_.hidden_size, D = cfg_.head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  float* residual = residual_.as<float>();
  float* hidden = hidden_.as<float>();
  float* proj = proj_.as<float>();
  RETURN_IF_ERROR(be_.embedding(w_.embed, st.token_ids, T, residual));
  RopeArgs ra;
  ra.num_tokens = T;
  ra.num_heads = cfg_.num_heads;
  ra.num_kv_heads = cfg_.num_kv_heads;
  ra.head_dim = D;
  ra.rotary_dim = rope_.rotary_dim;
  ra.interleaved = cfg_.rope_interleaved;
  ra.q = q_.as<float>();
  ra.k = k_.as<float>();
  ra.positions = st.positions;
  ra.cos = d_cos_.as<float>();
  ra.sin = d_sin_.as<float>();
  ra.max_positions = rope_.max_positions;
  KvWriteArgs kw;
  kw.num_tokens = T;
  kw.k = k_.as<float>();
  kw.v = v_.as<float>();
  kw.slot_mapping = st.slot_mapping;
  PagedAttentionArgs pa;
  pa.num_tokens = T;
  pa.num_seqs = st.num_seqs;
  pa.num_heads = cfg_.num_heads;
  pa.max_blocks_per_seq = st.max_blocks_per_seq;
  pa.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  pa.q = q_.as<float>();
  pa.query_start = st.query_start;
  pa.context_lens = st.context_lens;
  pa.block_tables = st.block_tables;
  pa.out = attn_.as<float>();
  float* qkv_out[3] = {q_.as<float>(), k_.as<float>(), v_.as<float>()};
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    const LlamaLayerWeights& L = w_.layers[l];
    RmsNormArgs n1{T, H, l == 0 ? nullptr : proj, residual, L.input_norm.as<float>(), eps, hidden};
    RETURN_IF_ERROR(be_.rms_norm(n1));
    RETURN_IF_ERROR(observe_input(be_, act_observer_, l, LinearInput::kQkv, hidden, T, H));
    const WeightMatrix* qkv[3] = {&L.q, &L.k, &L.v};
    RETURN_IF_ERROR(be_.matmul_multi(hidden, T, qkv, qkv_out));
    RETURN_IF_ERROR(be_.rope(ra));
    if (kv_observer_) RETURN_IF_ERROR(observe_kv(be_, kv_observer_, l, k_.as<float>(), v_.as<float>(), T,
                                                  cfg_.num_kv_heads * D));
    RETURN_IF_ERROR(be_.kv_write(kw, cache.layer(l)));
    RETURN_IF_ERROR(be_.paged_attention(pa, cache.layer(l)));
    RETURN_IF_ERROR(observe_input(be_, act_observer_, l, LinearInput::kO, attn_.as<float>(), T, cfg_.num_heads * D));
    RETURN_IF_ERROR(be_.matmul(attn_.as<float>(), T, L.o, proj));
    RmsNormArgs n2{T, H, proj, residual, L.post_norm.as<float>(), eps, hidden};
    RETURN_IF_ERROR(be_.rms_norm(n2));
    RETURN_IF_ERROR(observe_input(be_, act_observer_, l, LinearInput::kGateUp, hidden, T, H));
    RETURN_IF_ERROR(be_.matmul_gate_up_silu(hidden, T, L.gate, L.up, gate_.as<float>(), up_.as<float>(),
                                            act_.as<float>()));
    RETURN_IF_ERROR(observe_input(be_, act_observer_, l, LinearInput::kDown, act_.as<float>(), T,
                                  cfg_.intermediate_size));
    RETURN_IF_ERROR(be_.matmul(act_.as<float>(), T, L.down, proj));
  }
  if (R == 0) return OkStatus();
  // Only the rows that need logits go through the final norm and the lm_head.
  RETURN_IF_ERROR(be_.gather_rows(residual, T, H, st.logits_rows, R, hidden));
  RETURN_IF_ERROR(be_.gather_rows(proj, T, H, st.logits_rows, R, sel_.as<float>()));
  RmsNormArgs nf{R, H, sel_.as<float>(), hidden, w_.final_norm.as<float>(), eps, proj};
  RETURN_IF_ERROR(be_.rms_norm(nf));
  return be_.matmul(proj, R, w_.lm_head, logits_.as<float>());
}

}  // namespace lancet
