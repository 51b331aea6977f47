// TpGroup: per-rank backends, weight shards, caches and workspaces, and the forward pass of
// LlamaModel::enqueue split over ranks with all-reduces between the parallel regions.
#include "model/tp_forward.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "model/rope.h"
#include "model/step_tables.h"
#include "model/step_upload.h"

namespace lancet {

struct TpGroup::Rank {
  std::unique_ptr<Backend> be;
  TpRankLayout layout;
  std::vector<std::shared_ptr<TpOwnedTensor>> owned;  // host shards the CPU weights view
  WeightMatrix embed;    // [local vocab + 1, hidden]: the last row is zeros (ids of other ranks)
  WeightMatrix lm_head;  // [local vocab, hidden]
  Buffer final_norm;     // [hidden]
  std::vector<LlamaLayerWeights> layers;
  Buffer d_cos, d_sin;   // [max_positions, rotary_dim / 2]
  std::unique_ptr<PagedKvCache> cache;
  StepMetadata st;
  std::unique_ptr<StepUploader> uploader;  // made with the first step
  StepView view;                           // st on this rank's backend

  Status upload_step() {
    if (!uploader) uploader = std::make_unique<StepUploader>(*be);
    ASSIGN_OR_RETURN(view, uploader->upload(st));
    return OkStatus();
  }
  // Activations ([tokens, ...] with local head / column counts; residual and proj full width).
  Buffer residual, hidden, q, k, v, attn, proj, gate, up, act, sel, logits, local_ids;

  StatusOr<WeightMatrix> upload(TpOwnedTensor t, const std::string& name) {
    auto p = std::make_shared<TpOwnedTensor>(std::move(t));
    const TensorView view = p->view();
    WeightSpec spec;
    spec.name = name;
    spec.tensor = &view;
    ASSIGN_OR_RETURN(WeightMatrix w, be->upload_weight(spec));
    // The CPU backend wraps the host bytes; a GPU has its own copy once upload_weight returns.
    if (std::string(be->name()) == "cpu") owned.push_back(std::move(p));
    return w;
  }
  StatusOr<WeightMatrix> shard(const ModelSource& src, const std::string& name) {
    ASSIGN_OR_RETURN(TpOwnedTensor t, tp_shard_tensor(src, name, layout));
    return upload(std::move(t), name);
  }
  StatusOr<Buffer> vec(const ModelSource& src, const std::string& name, int64_t n) {
    const TensorView* t = src.find(name);
    if (!t) return NotFound(src.path() + ": missing tensor " + name);
    if (t->numel() != n)
      return InvalidArgument(src.path() + ": tensor " + name + " has shape " + shape_to_string(t->shape) +
                             ", expected [" + std::to_string(n) + "]");
    return be->upload_vector_f32(*t, src.path() + ": " + name);
  }
};

TpGroup::~TpGroup() = default;

const TpRankLayout& TpGroup::layout(int rank) const { return ranks_.at(rank)->layout; }
Backend& TpGroup::backend(int rank) { return *ranks_.at(rank)->be; }
const PagedKvCache& TpGroup::cache(int rank) const { return *ranks_.at(rank)->cache; }

StatusOr<std::unique_ptr<TpGroup>> TpGroup::create(const ModelSource& src,
                                                                     const TpGroupOptions& opts,
                                                                     std::unique_ptr<TpCommunicator> comm) {
  const ModelConfig& c = src.config();
  RETURN_IF_ERROR(validate_tp_config(c, opts.size));
  if (c.attention_bias || c.mlp_bias) return Unimplemented(src.path() + ": attention/mlp biases are not supported");
  std::unique_ptr<TpGroup> g(new TpGroup());
  g->cfg_ = c;
  const int64_t H = c.hidden_size;
  g->max_model_len_ = opts.max_model_len > 0 ? opts.max_model_len : 4096;
  // The rope table exactly as LlamaModel::create builds it (same frequency rounding).
  std::vector<float> freq_factors;
  for (const char* name : {"rope_freqs.weight", "model.rope_freqs.weight", "rope_freqs"}) {
    if (const TensorView* t = src.find(name)) {
      if (t->numel() != c.head_dim / 2)
        return InvalidArgument(src.path() + ": " + name + " has " + std::to_string(t->numel()) +
                               " values, expected head_dim / 2");
      freq_factors.resize(c.head_dim / 2);
      if (!convert_to_f32(t->dtype, t->data, freq_factors.data(), c.head_dim / 2))
        return InvalidArgument(src.path() + ": " + name + " must be a float tensor");
      break;
    }
  }
  DType freq_dtype = DType::kF32;
  if (opts.hf_rope_rounding && std::string(src.format()) == "safetensors" &&
      (c.dtype == DType::kBF16 || c.dtype == DType::kF16))
    freq_dtype = c.dtype;
  ASSIGN_OR_RETURN(RopeTable rope, build_rope_table(c, g->max_model_len_,
                                                    freq_factors.empty() ? nullptr : freq_factors.data(),
                                                    freq_dtype));
  g->rotary_dim_ = rope.rotary_dim;
  const bool tied = c.tie_word_embeddings || !src.find("lm_head.weight");
  for (int r = 0; r < opts.size; ++r) {
    auto rk = std::make_unique<Rank>();
    if (opts.backend == "cpu") {
      CpuBackendOptions bo;
      bo.isa = opts.isa;
      bo.num_threads = opts.num_threads;
      ASSIGN_OR_RETURN(rk->be, make_cpu_backend(bo));
    } else {
      auto be = make_backend_on_device(opts.backend, r);
      if (!be.ok()) return be.status().with_context("tensor parallel rank " + std::to_string(r));
      rk->be = std::move(be).value();
    }
    RETURN_IF_ERROR(rk->be->make_current());
    rk->be->set_activation_precision(opts.precision);
    ASSIGN_OR_RETURN(rk->layout, tp_rank_layout(c, TpShardSpec{r, opts.size}));
    // Vocab-parallel embedding: ids owned by other ranks are mapped to an extra zero row, so
    // their contribution to the all-reduce is exactly 0.
    ASSIGN_OR_RETURN(TpOwnedTensor emb, tp_shard_tensor(src, "model.embed_tokens.weight", rk->layout));
    TpOwnedTensor head = emb;
    emb.shape[0] += 1;
    emb.bytes.resize(emb.bytes.size() + static_cast<size_t>(H) * dtype_info(emb.dtype).block_bytes, 0);
    ASSIGN_OR_RETURN(rk->embed, rk->upload(std::move(emb), "model.embed_tokens.weight"));
    if (tied) {
      ASSIGN_OR_RETURN(rk->lm_head, rk->upload(std::move(head), "model.embed_tokens.weight (tied lm_head)"));
    } else {
      ASSIGN_OR_RETURN(rk->lm_head, rk->shard(src, "lm_head.weight"));
    }
    ASSIGN_OR_RETURN(rk->final_norm, rk->vec(src, "model.norm.weight", H));
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      LlamaLayerWeights L;
      ASSIGN_OR_RETURN(L.input_norm, rk->vec(src, p + "input_layernorm.weight", H));
      ASSIGN_OR_RETURN(L.post_norm, rk->vec(src, p + "post_attention_layernorm.weight", H));
      ASSIGN_OR_RETURN(L.q, rk->shard(src, p + "self_attn.q_proj.weight"));
      ASSIGN_OR_RETURN(L.k, rk->shard(src, p + "self_attn.k_proj.weight"));
      ASSIGN_OR_RETURN(L.v, rk->shard(src, p + "self_attn.v_proj.weight"));
      ASSIGN_OR_RETURN(L.o, rk->shard(src, p + "self_attn.o_proj.weight"));
      ASSIGN_OR_RETURN(L.gate, rk->shard(src, p + "mlp.gate_proj.weight"));
      ASSIGN_OR_RETURN(L.up, rk->shard(src, p + "mlp.up_proj.weight"));
      ASSIGN_OR_RETURN(L.down, rk->shard(src, p + "mlp.down_proj.weight"));
      rk->layers.push_back(std::move(L));
    }
    const size_t tb = rope.cos.size() * sizeof(float);
    ASSIGN_OR_RETURN(rk->d_cos, rk->be->alloc(tb));
    ASSIGN_OR_RETURN(rk->d_sin, rk->be->alloc(tb));
    RETURN_IF_ERROR(rk->be->copy_to_device(rk->d_cos.data(), rope.cos.data(), tb));
    RETURN_IF_ERROR(rk->be->copy_to_device(rk->d_sin.data(), rope.sin.data(), tb));
    RETURN_IF_ERROR(rk->be->synchronize());
    g->backends_.push_back(rk->be.get());
    g->ranks_.push_back(std::move(rk));
  }
  if (comm) {
    g->comm_ = std::move(comm);
  } else {
    ASSIGN_OR_RETURN(g->comm_, make_tp_communicator(g->backends_));
  }
  if (g->comm_->size() != opts.size)
    return InvalidArgument("tensor parallel: communicator has " + std::to_string(g->comm_->size()) +
                           " ranks, the group " + std::to_string(opts.size));
  if (opts.kv_num_blocks > 0) RETURN_IF_ERROR(g->allocate_kv_cache(opts.kv_num_blocks, opts.kv_block_size, opts.kv_dtype));
  return g;
}

int64_t TpGroup::kv_block_bytes(int64_t block_size, DType dtype) const {
  return 2 * cfg_.num_layers * block_size * ranks_.at(0)->layout.num_kv_heads * cfg_.head_dim *
         kv_cache_element_bytes(dtype);
}

Status TpGroup::allocate_kv_cache(int64_t num_blocks, int64_t block_size, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    return Unimplemented("tensor parallel: the KV cache must be float32 or bfloat16 (FP8 KV scales are not "
                         "sharded yet)");
  for (auto& rk : ranks_) {
    RETURN_IF_ERROR(rk->be->make_current());
    rk->cache.reset();
    KvCacheConfig kc;
    kc.num_layers = cfg_.num_layers;
    kc.num_kv_heads = rk->layout.num_kv_heads;
    kc.head_dim = cfg_.head_dim;
    kc.block_size = block_size;
    kc.num_blocks = num_blocks;
    kc.dtype = dtype;
    ASSIGN_OR_RETURN(rk->cache, PagedKvCache::create(*rk->be, kc));
  }
  return OkStatus();
}

StatusOr<int64_t> TpGroup::add_sequence() {
  if (!ranks_[0]->cache) return FailedPrecondition("tensor parallel: no KV cache allocated");
  // Every cache hands out ids in the same order, so one id names the sequence everywhere.
  const int64_t id = ranks_[0]->cache->add_sequence();
  for (size_t r = 1; r < ranks_.size(); ++r)
    if (ranks_[r]->cache->add_sequence() != id) return Internal("tensor parallel: rank caches disagree on sequence ids");
  return id;
}

void TpGroup::free_sequence(int64_t seq) {
  for (auto& rk : ranks_) rk->cache->free_sequence(seq);
}

Status TpGroup::ensure_workspace(int64_t T, int64_t R) {
  if (T <= ws_tokens_ && R <= ws_rows_) return OkStatus();
  T = std::max(T, ws_tokens_);
  R = std::max(R, ws_rows_);
  const int64_t H = cfg_.hidden_size, D = cfg_.head_dim;
  for (auto& rk : ranks_) {
    const TpRankLayout& l = rk->layout;
    Backend& be = *rk->be;
    RETURN_IF_ERROR(be.make_current());
    auto f = [&](Buffer* b, int64_t n) -> Status {
      ASSIGN_OR_RETURN(*b, be.alloc(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float)));
      return OkStatus();
    };
    RETURN_IF_ERROR(f(&rk->residual, T * H));
    RETURN_IF_ERROR(f(&rk->hidden, T * H));
    RETURN_IF_ERROR(f(&rk->q, T * l.num_heads * D));
    RETURN_IF_ERROR(f(&rk->k, T * l.num_kv_heads * D));
    RETURN_IF_ERROR(f(&rk->v, T * l.num_kv_heads * D));
    RETURN_IF_ERROR(f(&rk->attn, T * l.num_heads * D));
    RETURN_IF_ERROR(f(&rk->proj, T * H));
    RETURN_IF_ERROR(f(&rk->gate, T * l.intermediate));
    RETURN_IF_ERROR(f(&rk->up, T * l.intermediate));
    RETURN_IF_ERROR(f(&rk->act, T * l.intermediate));
    RETURN_IF_ERROR(f(&rk->sel, R * H));
    RETURN_IF_ERROR(f(&rk->logits, R * l.vocab));
    ASSIGN_OR_RETURN(rk->local_ids, be.alloc(static_cast<size_t>(T) * sizeof(int32_t)));
  }
  ws_tokens_ = T;
  ws_rows_ = R;
  return OkStatus();
}

Status TpGroup::forward(const std::vector<SequenceStep>& seqs, std::vector<float>* logits) {
  logits->clear();
  if (!ranks_[0]->cache) return FailedPrecondition("tensor parallel: no KV cache allocated");
  for (auto& rk : ranks_) {
    RETURN_IF_ERROR(rk->be->make_current());
    ASSIGN_OR_RETURN(rk->st, build_step(*rk->cache, seqs));
    RETURN_IF_ERROR(rk->upload_step());
  }
  return run(logits);
}

Status TpGroup::forward_with_tables(const std::vector<SequenceStep>& seqs,
                                    const std::vector<std::span<const int32_t>>& tables,
                                    std::vector<float>* logits) {
  logits->clear();
  if (!ranks_[0]->cache) return FailedPrecondition("tensor parallel: no KV cache allocated");
  for (auto& rk : ranks_) {
    RETURN_IF_ERROR(rk->be->make_current());
    ASSIGN_OR_RETURN(rk->st, build_step_with_tables(rk->cache->block_size(), rk->cache->config().num_blocks, seqs,
                                                    tables));
    RETURN_IF_ERROR(rk->upload_step());
  }
  return run(logits);
}

Status TpGroup::run(std::vector<float>* logits) {
  const StepMetadata& s0 = ranks_[0]->st;
  const int64_t T = s0.num_tokens, R = s0.num_logits_rows;
  if (T == 0) return OkStatus();
  for (int32_t p : s0.positions)
    if (p >= max_model_len_)
      return OutOfRange("tp forward: position " + std::to_string(p) + " past max_model_len " +
                        std::to_string(max_model_len_));
  for (int32_t id : s0.token_ids)
    if (id < 0 || id >= cfg_.vocab_size)
      return InvalidArgument("tp forward: token id " + std::to_string(id) + " outside the vocabulary");
  RETURN_IF_ERROR(ensure_workspace(T, R));
  const int64_t H = cfg_.hidden_size, D = cfg_.head_dim;
  const float eps = static_cast<float>(cfg_.rms_norm_eps);
  const int n = size();
  std::vector<float*> ptrs(n);
  auto all_reduce = [&](Buffer Rank::*member, int64_t count) -> Status {
    for (int r = 0; r < n; ++r) ptrs[r] = (ranks_[r].get()->*member).as<float>();
    return comm_->all_reduce_sum(backends_, ptrs, count);
  };

  // Vocab-parallel embedding: local ids, the zero row for ids another rank owns.
  std::vector<int32_t> local(T);
  for (auto& rk : ranks_) {
    const TpRankLayout& l = rk->layout;
    RETURN_IF_ERROR(rk->be->make_current());
    for (int64_t i = 0; i < T; ++i) {
      const int64_t id = s0.token_ids[i] - l.vocab_begin;
      local[i] = static_cast<int32_t>(id >= 0 && id < l.vocab ? id : l.vocab);
    }
    RETURN_IF_ERROR(rk->be->copy_to_device(rk->local_ids.data(), local.data(), T * sizeof(int32_t)));
    RETURN_IF_ERROR(rk->be->embedding(rk->embed, rk->local_ids.as<int32_t>(), T, rk->residual.as<float>()));
  }
  RETURN_IF_ERROR(all_reduce(&Rank::residual, T * H));

  for (int64_t li = 0; li < cfg_.num_layers; ++li) {
    // Attention: column-parallel q/k/v over the rank's heads, row-parallel o_proj.
    for (auto& rk : ranks_) {
      Backend& be = *rk->be;
      RETURN_IF_ERROR(be.make_current());
      const StepMetadata& st = rk->st;
      const TpRankLayout& l = rk->layout;
      const LlamaLayerWeights& L = rk->layers[li];
      float* residual = rk->residual.as<float>();
      float* hidden = rk->hidden.as<float>();
      float* proj = rk->proj.as<float>();
      RmsNormArgs n1{T, H, li == 0 ? nullptr : proj, residual, L.input_norm.as<float>(), eps, hidden};
      RETURN_IF_ERROR(be.rms_norm(n1));
      const WeightMatrix* qkv[3] = {&L.q, &L.k, &L.v};
      float* qkv_out[3] = {rk->q.as<float>(), rk->k.as<float>(), rk->v.as<float>()};
      RETURN_IF_ERROR(be.matmul_multi(hidden, T, qkv, qkv_out));
      RopeArgs ra;
      ra.num_tokens = T;
      ra.num_heads = l.num_heads;
      ra.num_kv_heads = l.num_kv_heads;
      ra.head_dim = D;
      ra.rotary_dim = rotary_dim_;
      ra.interleaved = cfg_.rope_interleaved;
      ra.q = rk->q.as<float>();
      ra.k = rk->k.as<float>();
      ra.positions = rk->view.positions;
      ra.cos = rk->d_cos.as<float>();
      ra.sin = rk->d_sin.as<float>();
      ra.max_positions = max_model_len_;
      RETURN_IF_ERROR(be.rope(ra));
      KvWriteArgs kw;
      kw.num_tokens = T;
      kw.k = rk->k.as<float>();
      kw.v = rk->v.as<float>();
      kw.slot_mapping = rk->view.slot_mapping;
      RETURN_IF_ERROR(be.kv_write(kw, rk->cache->layer(li)));
      PagedAttentionArgs pa;
      pa.num_tokens = T;
      pa.num_seqs = st.num_seqs;
      pa.num_heads = l.num_heads;
      pa.max_blocks_per_seq = st.max_blocks_per_seq;
      pa.scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(D)));
      pa.q = rk->q.as<float>();
      pa.query_start = rk->view.query_start;
      pa.context_lens = rk->view.context_lens;
      pa.block_tables = rk->view.block_tables;
      pa.out = rk->attn.as<float>();
      RETURN_IF_ERROR(be.paged_attention(pa, rk->cache->layer(li)));
      RETURN_IF_ERROR(be.matmul(rk->attn.as<float>(), T, L.o, proj));  // partial [T, H]
    }
    RETURN_IF_ERROR(all_reduce(&Rank::proj, T * H));
    // MLP: column-parallel gate/up over the rank's intermediate columns, row-parallel down.
    for (auto& rk : ranks_) {
      Backend& be = *rk->be;
      RETURN_IF_ERROR(be.make_current());
      const LlamaLayerWeights& L = rk->layers[li];
      float* proj = rk->proj.as<float>();
      RmsNormArgs n2{T, H, proj, rk->residual.as<float>(), L.post_norm.as<float>(), eps, rk->hidden.as<float>()};
      RETURN_IF_ERROR(be.rms_norm(n2));
      RETURN_IF_ERROR(be.matmul_gate_up_silu(rk->hidden.as<float>(), T, L.gate, L.up, rk->gate.as<float>(),
                                             rk->up.as<float>(), rk->act.as<float>()));
      RETURN_IF_ERROR(be.matmul(rk->act.as<float>(), T, L.down, proj));  // partial [T, H]
    }
    RETURN_IF_ERROR(all_reduce(&Rank::proj, T * H));
  }
  if (R == 0) {
    // Nothing to copy back: wait for the ranks so that errors surface in this step.
    for (auto& rk : ranks_) {
      RETURN_IF_ERROR(rk->be->make_current());
      RETURN_IF_ERROR(rk->be->synchronize());
    }
    return OkStatus();
  }
  // Final norm on the rows that need logits (replicated), then each rank's vocab slice,
  // enqueued on every rank before any is waited for.
  for (int r = 0; r < n; ++r) {
    Rank& rk = *ranks_[r];
    Backend& be = *rk.be;
    RETURN_IF_ERROR(be.make_current());
    const int32_t* rows = rk.view.logits_rows;
    RETURN_IF_ERROR(be.gather_rows(rk.residual.as<float>(), T, H, rows, R, rk.hidden.as<float>()));
    RETURN_IF_ERROR(be.gather_rows(rk.proj.as<float>(), T, H, rows, R, rk.sel.as<float>()));
    RmsNormArgs nf{R, H, rk.sel.as<float>(), rk.hidden.as<float>(), rk.final_norm.as<float>(), eps,
                   rk.proj.as<float>()};
    RETURN_IF_ERROR(be.rms_norm(nf));
    RETURN_IF_ERROR(be.matmul(rk.proj.as<float>(), R, rk.lm_head, rk.logits.as<float>()));
  }
  // Gather: rank r's [R, local vocab] block goes to columns [vocab_begin, + local vocab).
  const int64_t V = cfg_.vocab_size;
  logits->resize(R * V);
  for (int r = 0; r < n; ++r) {
    Rank& rk = *ranks_[r];
    const int64_t lv = rk.layout.vocab, v0 = rk.layout.vocab_begin;
    part_.resize(R * lv);
    RETURN_IF_ERROR(rk.be->make_current());
    RETURN_IF_ERROR(rk.be->copy_to_host(part_.data(), rk.logits.data(), part_.size() * sizeof(float)));
    RETURN_IF_ERROR(rk.be->synchronize());
    for (int64_t i = 0; i < R; ++i)
      std::memcpy(logits->data() + i * V + v0, part_.data() + i * lv, lv * sizeof(float));
  }
  return OkStatus();
}

}  // namespace lancet
