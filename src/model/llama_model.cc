// LlamaModel: loading every rank's weights and rope table, the workspaces, and the collectives
// (the layer loop itself is in llama_forward.cc).
#include "model/llama_model.h"

#include <algorithm>
#include <cstring>
#include <string>

namespace lancet {

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::create(const ModelSource& src, Backend& backend,
                                                         const LlamaModelOptions& opts) {
  Backend* one[1] = {&backend};
  return create(src, std::span<Backend* const>(one, 1), opts, nullptr);
}

StatusOr<std::unique_ptr<LlamaModel>> LlamaModel::create(const ModelSource& src, std::span<Backend* const> ranks,
                                                         const LlamaModelOptions& opts,
                                                         std::unique_ptr<TpCommunicator> comm) {
  if (ranks.empty()) return InvalidArgument("model: no ranks");
  std::unique_ptr<LlamaModel> m(new LlamaModel());
  RETURN_IF_ERROR(m->load(src, ranks, opts));
  const int n = static_cast<int>(ranks.size());
  if (n > 1) {
    if (comm) {
      m->comm_ = std::move(comm);
    } else {
      ASSIGN_OR_RETURN(m->comm_, make_tp_communicator(m->backends_));
    }
    if (m->comm_->size() != n)
      return InvalidArgument("tensor parallel: communicator has " + std::to_string(m->comm_->size()) +
                             " ranks, the model " + std::to_string(n));
  }
  return m;
}

Status LlamaModel::load(const ModelSource& src, std::span<Backend* const> ranks, const LlamaModelOptions& opts) {
  cfg_ = src.config();
  const int n = static_cast<int>(ranks.size());
  RETURN_IF_ERROR(validate_tp_config(cfg_, n));
  int64_t len = opts.max_model_len;
  if (len <= 0) len = std::min<int64_t>(cfg_.max_position_embeddings > 0 ? cfg_.max_position_embeddings : 8192, 131072);
  max_model_len_ = len;
  ranks_.resize(n);
  for (int r = 0; r < n; ++r) {
    LlamaRank& rk = ranks_[r];
    rk.be = ranks[r];
    RETURN_IF_ERROR(rk.be->make_current());
    ASSIGN_OR_RETURN(rk.layout, tp_rank_layout(cfg_, TpShardSpec{r, n}));
    auto w = load_llama_weights(src, *rk.be, opts.weights, rk.layout);
    if (!w.ok()) return n > 1 ? w.status().with_context("tensor parallel rank " + std::to_string(r)) : w.status();
    rk.w = std::move(*w);
    if (r == 0) {
      DType freq_dtype = DType::kF32;
      if (opts.hf_rope_rounding && std::string(src.format()) == "safetensors" &&
          (cfg_.dtype == DType::kBF16 || cfg_.dtype == DType::kF16))
        freq_dtype = cfg_.dtype;
      const float* factors = rk.w.rope_freq_factors.empty() ? nullptr : rk.w.rope_freq_factors.data();
      ASSIGN_OR_RETURN(rope_, build_rope_table(cfg_, len, factors, freq_dtype));
    }
    const size_t tb = rope_.cos.size() * sizeof(float);
    ASSIGN_OR_RETURN(rk.d_cos, rk.be->alloc(tb));
    ASSIGN_OR_RETURN(rk.d_sin, rk.be->alloc(tb));
    RETURN_IF_ERROR(rk.be->copy_to_device(rk.d_cos.data(), rope_.cos.data(), tb));
    RETURN_IF_ERROR(rk.be->copy_to_device(rk.d_sin.data(), rope_.sin.data(), tb));
    RETURN_IF_ERROR(rk.be->synchronize());
    backends_.push_back(rk.be);
  }
  reduce_ptrs_.resize(n);
  return select(ranks_[0]);
}

LlamaModel::~LlamaModel() = default;

KvBufferConfig LlamaModel::kv_buffer_config(int rank, const KvBlockConfig& blocks, DType dtype) const {
  KvBufferConfig c;
  c.num_blocks = blocks.num_blocks;
  c.block_size = blocks.block_size;
  c.num_layers = cfg_.num_layers;
  c.num_kv_heads = ranks_.at(rank).layout.num_kv_heads;
  c.head_dim = cfg_.head_dim;
  c.dtype = dtype;
  return c;
}

int64_t LlamaModel::kv_block_bytes(int32_t block_size, DType dtype) const {
  return 2 * cfg_.num_layers * block_size * ranks_.at(0).layout.num_kv_heads * cfg_.head_dim *
         kv_cache_element_bytes(dtype);
}

Status LlamaModel::select(LlamaRank& rk) {
  return ranks_.size() > 1 ? rk.be->make_current() : OkStatus();
}

Status LlamaModel::ensure_workspace(int64_t T, int64_t R) {
  if (T <= ws_tokens_ && R <= ws_rows_) return OkStatus();
  ++ws_generation_;
  T = std::max(T, ws_tokens_);
  R = std::max(R, ws_rows_);
  const int64_t H = cfg_.hidden_size, D = cfg_.head_dim;
  for (LlamaRank& rk : ranks_) {
    const TpRankLayout& l = rk.layout;
    RETURN_IF_ERROR(select(rk));
    auto f = [&](Buffer* b, int64_t n) -> Status {
      ASSIGN_OR_RETURN(*b, rk.be->alloc(static_cast<size_t>(std::max<int64_t>(n, 1)) * sizeof(float)));
      return OkStatus();
    };
    for (Buffer* b : {&rk.residual, &rk.hidden, &rk.proj}) RETURN_IF_ERROR(f(b, T * H));
    for (Buffer* b : {&rk.q, &rk.attn}) RETURN_IF_ERROR(f(b, T * l.num_heads * D));
    for (Buffer* b : {&rk.k, &rk.v}) RETURN_IF_ERROR(f(b, T * l.num_kv_heads * D));
    for (Buffer* b : {&rk.gate, &rk.up, &rk.act}) RETURN_IF_ERROR(f(b, T * l.intermediate));
    RETURN_IF_ERROR(f(&rk.sel, R * H));
    if (lora_.num_slots > 0) RETURN_IF_ERROR(f(&rk.lora_scratch, 3 * T * lora_.max_rank));
    RETURN_IF_ERROR(f(&rk.logits, R * l.vocab));
  }
  if (ranks_.size() > 1) {
    RETURN_IF_ERROR(select(ranks_[0]));
    ASSIGN_OR_RETURN(gathered_, ranks_[0].be->alloc(static_cast<size_t>(std::max<int64_t>(R, 1) * cfg_.vocab_size) *
                                                    sizeof(float)));
  }
  ws_tokens_ = T;
  ws_rows_ = R;
  return OkStatus();
}

Status LlamaModel::enable_lora(const LoraSlotsConfig& config) {
  if (lora_.num_slots > 0) return FailedPrecondition("LoRA adapter slots are already allocated");
  for (LlamaRank& rk : ranks_) {
    RETURN_IF_ERROR(select(rk));
    ASSIGN_OR_RETURN(rk.lora, alloc_lora_weights(*rk.be, cfg_, rk.layout, config));
    if (ws_tokens_ > 0) {
      ASSIGN_OR_RETURN(rk.lora_scratch,
                       rk.be->alloc(static_cast<size_t>(3 * ws_tokens_ * config.max_rank) * sizeof(float)));
    }
  }
  lora_ = config;
  return select(ranks_[0]);
}

Status LlamaModel::set_lora_slot(int64_t slot, const LoraAdapter* adapter) {
  if (lora_.num_slots == 0) return FailedPrecondition("the model has no LoRA adapter slots (enable_lora)");
  ++lora_generation_;
  for (size_t r = 0; r < ranks_.size(); ++r) {
    LlamaRank& rk = ranks_[r];
    RETURN_IF_ERROR(select(rk));
    Status s = set_lora_weights_slot(*rk.be, cfg_, rk.layout, rk.lora, slot, adapter);
    if (!s.ok()) {
      // Every rank serves the slot or none does.
      for (size_t q = 0; q < r; ++q) {
        RETURN_IF_ERROR(select(ranks_[q]));
        RETURN_IF_ERROR(set_lora_weights_slot(*ranks_[q].be, cfg_, ranks_[q].layout, ranks_[q].lora, slot, nullptr));
      }
      RETURN_IF_ERROR(select(ranks_[0]));
      return s;
    }
  }
  return select(ranks_[0]);
}

Status LlamaModel::all_reduce(Buffer LlamaRank::*member, int64_t n) {
  if (!comm_) return OkStatus();
  for (size_t r = 0; r < ranks_.size(); ++r) reduce_ptrs_[r] = (ranks_[r].*member).as<float>();
  return comm_->all_reduce_sum(backends_, reduce_ptrs_, n);
}

Status LlamaModel::gather_logits(int64_t R) {
  if (ranks_.size() == 1) return OkStatus();
  if (R == 0) {
    // Nothing to gather: wait for the ranks so that their errors surface in this step.
    for (LlamaRank& rk : ranks_) {
      RETURN_IF_ERROR(select(rk));
      RETURN_IF_ERROR(rk.be->synchronize());
    }
    return select(ranks_[0]);
  }
  if (R > ws_rows_) return FailedPrecondition("gather_logits: more rows than the workspace holds");
  // Rank r's [R, local vocab] block goes to columns [vocab_begin, + local vocab).
  const int64_t V = cfg_.vocab_size;
  host_logits_.resize(static_cast<size_t>(R * V));
  std::vector<float> part;
  for (LlamaRank& rk : ranks_) {
    const int64_t lv = rk.layout.vocab, v0 = rk.layout.vocab_begin;
    part.resize(static_cast<size_t>(R * lv));
    RETURN_IF_ERROR(select(rk));
    RETURN_IF_ERROR(rk.be->copy_to_host(part.data(), rk.logits.data(), part.size() * sizeof(float)));
    RETURN_IF_ERROR(rk.be->synchronize());
    for (int64_t i = 0; i < R; ++i)
      std::memcpy(host_logits_.data() + i * V + v0, part.data() + i * lv, lv * sizeof(float));
  }
  RETURN_IF_ERROR(select(ranks_[0]));
  RETURN_IF_ERROR(ranks_[0].be->copy_to_device(gathered_.data(), host_logits_.data(), host_logits_.size() * sizeof(float)));
  return ranks_[0].be->synchronize();
}

const float* LlamaModel::final_hidden_device() const { return ranks_[0].proj.as<float>(); }

const float* LlamaModel::logits_device() const {
  return ranks_.size() == 1 ? ranks_[0].logits.as<float>() : gathered_.as<float>();
}

}  // namespace lancet
