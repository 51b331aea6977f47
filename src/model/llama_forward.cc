// LlamaModel::enqueue: the one layer loop. Each block runs on every rank before the collective
// that joins them (column-parallel q/k/v and gate/up, row-parallel o_proj and down_proj); on
// one rank the collectives are no-ops and the loop is the plain single-device forward pass.
#include <cmath>
#include <string>

#include "model/llama_model.h"

namespace lancet {

// The activation hook: one linear input of this layer ([n] floats), copied to the host and
// folded into the observer. Only runs while an observer is attached.
Status LlamaModel::observe_input(LlamaRank& rk, int64_t layer, LinearInput which, const float* x, int64_t rows,
                                 int64_t cols) {
  if (!act_observer_) return OkStatus();
  std::vector<float> h(static_cast<size_t>(rows * cols));
  RETURN_IF_ERROR(rk.be->synchronize());
  RETURN_IF_ERROR(rk.be->copy_to_host(h.data(), x, h.size() * sizeof(float)));
  return act_observer_->observe(layer, which, h.data(), rows, cols);
}

// The calibration hook: this layer's K (after rope) and V rows of this rank's heads, copied to
// the host and folded into the observer's per-layer absmax.
Status LlamaModel::observe_kv(LlamaRank& rk, int64_t layer, int64_t T) {
  if (!kv_observer_) return OkStatus();
  const int64_t row = rk.layout.num_kv_heads * cfg_.head_dim;
  std::vector<float> hk(static_cast<size_t>(T * row)), hv(static_cast<size_t>(T * row));
  RETURN_IF_ERROR(rk.be->synchronize());
  RETURN_IF_ERROR(rk.be->copy_to_host(hk.data(), rk.k.as<float>(), hk.size() * sizeof(float)));
  RETURN_IF_ERROR(rk.be->copy_to_host(hv.data(), rk.v.as<float>(), hv.size() * sizeof(float)));
  // Rows seen are counted once per step, on rank 0.
  kv_observer_->observe(layer, hk.data(), hv.data(), T * row, &rk == &ranks_[0] ? T : 0);
  return OkStatus();
}

// Norm, q/k/v over this rank's heads, rope, KV write, paged attention, and this rank's part of
// o_proj (the all-reduce that follows sums the parts).
Status LlamaModel::attention(LlamaRank& rk, int64_t l, const StepView& st, const KvBuffers& kv) {
  Backend& be = *rk.be;
  const LlamaLayerWeights& L = rk.w.layers[l];
  const int64_t T = st.num_tokens, H = cfg_.hidden_size, D = cfg_.head_dim;
  float* hidden = rk.hidden.as<float>();
  RmsNormArgs n1{T, H, l == 0 ? nullptr : rk.proj.as<float>(), rk.residual.as<float>(), L.input_norm.as<float>(),
                 static_cast<float>(cfg_.rms_norm_eps), hidden};
  RETURN_IF_ERROR(be.rms_norm(n1));
  RETURN_IF_ERROR(observe_input(rk, l, LinearInput::kQkv, hidden, T, H));
  const WeightMatrix* qkv[3] = {&L.q, &L.k, &L.v};
  float* qkv_out[3] = {rk.q.as<float>(), rk.k.as<float>(), rk.v.as<float>()};
  RETURN_IF_ERROR(be.matmul_multi(hidden, T, qkv, qkv_out));
  RETURN_IF_ERROR(lora_qkv(rk, l, st, hidden, qkv_out));
  RopeArgs ra;
  ra.num_tokens = T;
  ra.num_heads = rk.layout.num_heads;
  ra.num_kv_heads = rk.layout.num_kv_heads;
  ra.head_dim = D;
  ra.rotary_dim = rope_.rotary_dim;
  ra.interleaved = cfg_.rope_interleaved;
  ra.q = rk.q.as<float>();
  ra.k = rk.k.as<float>();
  ra.positions = st.positions;
  ra.cos = rk.d_cos.as<float>();
  ra.sin = rk.d_sin.as<float>();
  ra.max_positions = rope_.max_positions;
  KvWriteArgs kw;
  kw.num_tokens = T;
  kw.k = rk.k.as<float>();
  kw.v = rk.v.as<float>();
  kw.slot_mapping = st.slot_mapping;
  RETURN_IF_ERROR(be.rope_kv_write(ra, kw, kv.layer(l)));
  RETURN_IF_ERROR(observe_kv(rk, l, T));
  PagedAttentionArgs pa;
  pa.num_tokens = T;
  pa.num_seqs = st.num_seqs;
  pa.num_heads = rk.layout.num_heads;
  pa.max_blocks_per_seq = st.max_blocks_per_seq;
  pa.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
  pa.q = rk.q.as<float>();
  pa.query_start = st.query_start;
  pa.context_lens = st.context_lens;
  pa.block_tables = st.block_tables;
  pa.out = rk.attn.as<float>();
  pa.plan = st.attn_plan;
  pa.device_plan = st.attn_plan_dev;
  RETURN_IF_ERROR(be.paged_attention(pa, kv.layer(l)));
  RETURN_IF_ERROR(observe_input(rk, l, LinearInput::kO, rk.attn.as<float>(), T, rk.layout.num_heads * D));
  RETURN_IF_ERROR(be.matmul(rk.attn.as<float>(), T, L.o, rk.proj.as<float>()));
  return lora(rk, l, LoraTarget::kO, st, rk.attn.as<float>(), rk.proj.as<float>());
}

// Norm, gate/up over this rank's intermediate columns, SiLU, and this rank's part of down_proj.
// With an adapter on gate or up in the step, their outputs get the LoRA terms before SiLU (the
// fused gate/up/SiLU op is then split).
Status LlamaModel::mlp(LlamaRank& rk, int64_t l, const StepView& st) {
  Backend& be = *rk.be;
  const LlamaLayerWeights& L = rk.w.layers[l];
  const int64_t T = st.num_tokens, H = cfg_.hidden_size;
  float* hidden = rk.hidden.as<float>();
  float* proj = rk.proj.as<float>();
  RmsNormArgs n2{T, H, proj, rk.residual.as<float>(), L.post_norm.as<float>(), static_cast<float>(cfg_.rms_norm_eps),
                 hidden};
  RETURN_IF_ERROR(be.rms_norm(n2));
  RETURN_IF_ERROR(observe_input(rk, l, LinearInput::kGateUp, hidden, T, H));
  if (lora_adapts(rk, l, LoraTarget::kGate, st) || lora_adapts(rk, l, LoraTarget::kUp, st)) {
    const WeightMatrix* gu[2] = {&L.gate, &L.up};
    float* gu_out[2] = {rk.gate.as<float>(), rk.up.as<float>()};
    RETURN_IF_ERROR(be.matmul_multi(hidden, T, gu, gu_out));
    RETURN_IF_ERROR(lora(rk, l, LoraTarget::kGate, st, hidden, gu_out[0]));
    RETURN_IF_ERROR(lora(rk, l, LoraTarget::kUp, st, hidden, gu_out[1]));
    RETURN_IF_ERROR(be.silu_mul(gu_out[0], gu_out[1], T, rk.layout.intermediate, rk.act.as<float>()));
  } else {
    RETURN_IF_ERROR(be.matmul_gate_up_silu(hidden, T, L.gate, L.up, rk.gate.as<float>(), rk.up.as<float>(),
                                           rk.act.as<float>()));
  }
  RETURN_IF_ERROR(observe_input(rk, l, LinearInput::kDown, rk.act.as<float>(), T, rk.layout.intermediate));
  RETURN_IF_ERROR(be.matmul(rk.act.as<float>(), T, L.down, proj));
  return lora(rk, l, LoraTarget::kDown, st, rk.act.as<float>(), proj);
}

bool LlamaModel::lora_adapts(const LlamaRank& rk, int64_t l, LoraTarget target, const StepView& st) const {
  if (st.lora.empty() || rk.lora.layers.empty()) return false;
  return rk.lora.layers[static_cast<size_t>(l)][static_cast<size_t>(target)].any_slot();
}

Status LlamaModel::lora_qkv(LlamaRank& rk, int64_t l, const StepView& st, const float* x, float* const* qkv) {
  LoraApplyArgs args[3];
  int n = 0;
  for (int i = 0; i < 3; ++i) {
    const LoraTarget t = static_cast<LoraTarget>(static_cast<int>(LoraTarget::kQ) + i);
    if (!lora_adapts(rk, l, t, st)) continue;
    LoraApplyArgs& a = args[n++];
    a.x = x;
    a.y = qkv[i];
    // Each projection its own third of the scratch ([3, tokens, max_rank]).
    a.scratch = rk.lora_scratch.as<float>() + i * st.num_tokens * lora_.max_rank;
    a.num_tokens = st.num_tokens;
    a.w = &rk.lora.layers[static_cast<size_t>(l)][static_cast<size_t>(t)];
    a.rows = st.lora;
  }
  if (n == 0) return OkStatus();
  return rk.be->lora_apply_multi(std::span<const LoraApplyArgs>(args, static_cast<size_t>(n)));
}

Status LlamaModel::lora(LlamaRank& rk, int64_t l, LoraTarget target, const StepView& st, const float* x, float* y) {
  if (!lora_adapts(rk, l, target, st)) return OkStatus();
  LoraApplyArgs a;
  a.x = x;
  a.y = y;
  a.scratch = rk.lora_scratch.as<float>();
  a.num_tokens = st.num_tokens;
  a.w = &rk.lora.layers[static_cast<size_t>(l)][static_cast<size_t>(target)];
  a.rows = st.lora;
  return rk.be->lora_apply(a);
}

// Only the rows that need logits go through the final norm and this rank's lm_head rows. The
// normed rows stay in proj (final_hidden_device(): the embeddings' hidden states).
Status LlamaModel::final_logits(LlamaRank& rk, const StepView& st) {
  Backend& be = *rk.be;
  const int64_t T = st.num_tokens, R = st.num_logits_rows, H = cfg_.hidden_size;
  float* hidden = rk.hidden.as<float>();
  float* proj = rk.proj.as<float>();
  RETURN_IF_ERROR(be.gather_rows(rk.residual.as<float>(), T, H, st.logits_rows, R, hidden));
  RETURN_IF_ERROR(be.gather_rows(proj, T, H, st.logits_rows, R, rk.sel.as<float>()));
  RmsNormArgs nf{R, H, rk.sel.as<float>(), hidden, rk.w.final_norm.as<float>(), static_cast<float>(cfg_.rms_norm_eps),
                 proj};
  RETURN_IF_ERROR(be.rms_norm(nf));
  return be.matmul(proj, R, rk.w.lm_head, rk.logits.as<float>());
}

AttentionStepPlan LlamaModel::plan_attention(int rank, const KvBuffers& kv, int64_t num_tokens, int64_t num_seqs,
                                             int64_t max_context_len, int64_t decode_seqs, int64_t decode_tokens,
                                             int64_t decode_max_context_len) const {
  AttentionPlanQuery q;
  q.num_tokens = num_tokens;
  q.num_seqs = num_seqs;
  q.num_heads = ranks_.at(rank).layout.num_heads;
  q.max_context_len = max_context_len;
  q.decode_seqs = decode_seqs;
  q.decode_tokens = decode_tokens;
  q.decode_max_context_len = decode_max_context_len;
  return ranks_.at(rank).be->plan_attention(q, kv.layer(0));
}

Status LlamaModel::enqueue(std::span<const StepView> views, std::span<KvBuffers* const> kv) {
  const size_t n = ranks_.size();
  if (views.size() != n || kv.size() != n)
    return InvalidArgument("enqueue: one step view and one set of KV buffers per rank expected");
  const int64_t T = views[0].num_tokens, R = views[0].num_logits_rows, H = cfg_.hidden_size;
  if (T > ws_tokens_ || R > ws_rows_) return FailedPrecondition("enqueue: workspace smaller than the step");
  if (!views[0].lora.empty() && lora_.num_slots == 0)
    return FailedPrecondition("enqueue: the step has LoRA rows and the model has no adapter slots");
  if (!views[0].lora.empty() && (views[0].lora.num_slots != lora_.num_slots || views[0].lora.num_rows > T))
    return InvalidArgument("enqueue: the step's LoRA rows do not match the model's adapter slots");
  for (size_t r = 0; r < n; ++r) {
    RETURN_IF_ERROR(select(ranks_[r]));
    RETURN_IF_ERROR(ranks_[r].be->embedding(ranks_[r].w.embed, views[r].token_ids, T, ranks_[r].residual.as<float>()));
  }
  RETURN_IF_ERROR(all_reduce(&LlamaRank::residual, T * H));
  // One attention plan per step and rank, used by every layer.
  std::vector<StepView> planned(views.begin(), views.end());
  for (size_t r = 0; r < n; ++r)
    if (planned[r].attn_plan.num_splits == 0)
      planned[r].attn_plan = plan_attention(static_cast<int>(r), *kv[r], planned[r].num_tokens, planned[r].num_seqs,
                                            planned[r].max_context_len, planned[r].decode_seqs,
                                            planned[r].decode_tokens, planned[r].decode_max_context_len);
  for (int64_t l = 0; l < cfg_.num_layers; ++l) {
    for (size_t r = 0; r < n; ++r) {
      RETURN_IF_ERROR(select(ranks_[r]));
      RETURN_IF_ERROR(attention(ranks_[r], l, planned[r], *kv[r]));
    }
    RETURN_IF_ERROR(all_reduce(&LlamaRank::proj, T * H));
    for (size_t r = 0; r < n; ++r) {
      RETURN_IF_ERROR(select(ranks_[r]));
      RETURN_IF_ERROR(mlp(ranks_[r], l, planned[r]));
    }
    RETURN_IF_ERROR(all_reduce(&LlamaRank::proj, T * H));
  }
  if (R == 0) return OkStatus();
  for (size_t r = 0; r < n; ++r) {
    RETURN_IF_ERROR(select(ranks_[r]));
    RETURN_IF_ERROR(final_logits(ranks_[r], views[r]));
  }
  return select(ranks_[0]);
}

}  // namespace lancet
