// The Llama forward pass, written once against backend.h for one rank or N tensor-parallel
// ranks (Megatron style, model/tp_shard.h): embedding; per layer fused add+RMSNorm -> q/k/v ->
// rope -> KV write -> paged attention -> o_proj -> add+RMSNorm -> SwiGLU MLP; then the final
// norm and the logits of only the rows the step asks for. The collective hooks (an all-reduce
// after the vocab-parallel embedding, after o_proj and after down_proj, and the gather of the
// vocab-parallel logits onto rank 0) do nothing on one rank. One thread drives every rank:
// each op is enqueued on every rank's backend before the next, so GPUs run concurrently.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "backend/tp_communicator.h"
#include "io/model_source.h"
#include "model/fp8_scales.h"
#include "model/kv_buffers.h"
#include "model/llama_weights.h"
#include "model/lora_weights.h"
#include "model/rope.h"
#include "model/step.h"
#include "model/tp_shard.h"

namespace lancet {

struct LlamaModelOptions {
  // Longest sequence (positions) the rope table covers; 0 = the config's
  // max_position_embeddings (capped at 131072).
  int64_t max_model_len = 0;
  // Round rope frequencies to the checkpoint dtype the way transformers does for its
  // inv_freq buffer (rope.h), for HF checkpoints in bf16/f16. GGUF files are never rounded.
  bool hf_rope_rounding = true;
  // Weight conversions at load (online FP8 quantization, GGUF -> BF16 reference).
  LlamaWeightOptions weights;
};

// One rank: its backend, what it holds of the model, and its activations.
struct LlamaRank {
  Backend* be = nullptr;
  TpRankLayout layout;
  LlamaWeights w;
  Buffer d_cos, d_sin;  // [max_positions, rotary_dim / 2]
  // Activations ([tokens, ...] with this rank's head / column counts; residual and proj full
  // width), grown to the largest step seen; logits [rows, local vocab].
  Buffer residual, hidden, q, k, v, attn, proj, gate, up, act, sel, logits;
  // LoRA adapters (LlamaModel::enable_lora): their factors and the shrinks' scratch
  // [3, tokens, max_rank] (q, k and v each their own).
  LoraRankWeights lora;
  Buffer lora_scratch;
};

class LlamaModel {
 public:
  // The source must outlive the model (weights are views into it on CPU).
  static StatusOr<std::unique_ptr<LlamaModel>> create(const ModelSource& src, Backend& backend,
                                                      const LlamaModelOptions& opts = {});
  // N ranks, rank r on ranks[r] (not owned). comm defaults to make_tp_communicator(ranks)
  // when there are several; one rank needs none.
  static StatusOr<std::unique_ptr<LlamaModel>> create(const ModelSource& src, std::span<Backend* const> ranks,
                                                      const LlamaModelOptions& opts,
                                                      std::unique_ptr<TpCommunicator> comm = nullptr);
  ~LlamaModel();

  const ModelConfig& config() const { return cfg_; }
  int64_t max_model_len() const { return max_model_len_; }
  const RopeTable& rope_table() const { return rope_; }
  int num_ranks() const { return static_cast<int>(ranks_.size()); }
  Backend& backend(int rank = 0) { return *ranks_.at(rank).be; }
  const TpRankLayout& layout(int rank) const { return ranks_.at(rank).layout; }
  // The KV buffers that fit rank `rank` (its KV heads) for this block geometry.
  KvBufferConfig kv_buffer_config(int rank, const KvBlockConfig& blocks, DType dtype) const;
  // Bytes of one KV block on one rank (all layers, K and V).
  int64_t kv_block_bytes(int32_t block_size, DType dtype) const;

  // Grows every rank's activations to num_tokens rows and logits_rows logits rows. Growing
  // moves the buffers: workspace_generation() changes (captured graphs point at the old ones).
  Status ensure_workspace(int64_t num_tokens, int64_t logits_rows);
  uint64_t workspace_generation() const { return ws_generation_; }
  // The step's work enqueued on every rank (nothing waited for, nothing copied to the host):
  // views[r] and kv[r] are rank r's. Each rank's logits land in its own vocab slice; callers
  // size the workspace first and check the step (positions, ids, KV scales).
  Status enqueue(std::span<const StepView> views, std::span<KvBuffers* const> kv);
  // Rank rank's attention plan for a step of these rows whose longest context is
  // max_context_len, the first decode_seqs sequences (decode_tokens rows, longest context
  // decode_max_context_len) decodes (Backend::plan_attention over its heads and KV cache).
  AttentionStepPlan plan_attention(int rank, const KvBuffers& kv, int64_t num_tokens, int64_t num_seqs,
                                   int64_t max_context_len, int64_t decode_seqs = 0, int64_t decode_tokens = 0,
                                   int64_t decode_max_context_len = 0) const;
  // The vocab slices of the first `rows` logits rows, gathered into logits_device() (nothing
  // to do on one rank). Waits for every rank (also with no rows).
  Status gather_logits(int64_t rows);
  const float* logits_device() const;  // [rows, vocab] on rank 0's backend
  // The last step's logits rows after the final norm, before lm_head: [rows, hidden] on rank
  // 0's backend (every rank holds the whole hidden state), valid until the next step.
  const float* final_hidden_device() const;

  // LoRA adapters (model/lora_weights.h): room for config.num_slots adapters of rank up to
  // config.max_rank on every rank, all slots empty. Once, before the first step.
  Status enable_lora(const LoraSlotsConfig& config);
  const LoraSlotsConfig& lora_config() const { return lora_; }
  // Changes whenever a slot is filled or emptied (captured graphs hold the LoRA ops of the
  // projections some slot adapted when they were captured).
  uint64_t lora_generation() const { return lora_generation_; }
  // Slot `slot` takes the adapter on every rank (null: empties it), ordered with the ranks'
  // queued work; a step's rows name slots in StepView::lora.
  Status set_lora_slot(int64_t slot, const LoraAdapter* adapter);

  // FP8 KV calibration hook (runner/kv_calibration.h): while set, every step copies each
  // layer's K (after rope) and V rows to the host and folds their absmax into the observer
  // (every rank's heads). Null (the default) costs one pointer test per layer.
  void set_kv_observer(KvAbsmaxObserver* observer) { kv_observer_ = observer; }
  // Static activation scale and second-moment calibration (model/fp8_scales.h): while set,
  // every step copies the inputs of each layer's linear projections to the host and hands
  // them to the observer.
  void set_activation_observer(LinearInputObserver* observer) { act_observer_ = observer; }
  bool observing() const { return kv_observer_ || act_observer_; }  // steps must then run eagerly

 private:
  LlamaModel() = default;
  Status load(const ModelSource& src, std::span<Backend* const> ranks, const LlamaModelOptions& opts);
  Status select(LlamaRank& rk);  // makes rk's device current (several ranks only)
  // The collective hook: member[0, n) summed over ranks in place; nothing on one rank.
  Status all_reduce(Buffer LlamaRank::*member, int64_t n);
  Status attention(LlamaRank& rk, int64_t layer, const StepView& v, const KvBuffers& kv);
  Status mlp(LlamaRank& rk, int64_t layer, const StepView& v);
  // y += the LoRA term of projection `target` for the step's adapted rows (nothing when no
  // row has an adapter or no loaded adapter changes that projection).
  Status lora(LlamaRank& rk, int64_t layer, LoraTarget target, const StepView& v, const float* x, float* y);
  // The same for q, k and v (qkv[3] their outputs) of one input, in one backend call.
  Status lora_qkv(LlamaRank& rk, int64_t layer, const StepView& v, const float* x, float* const* qkv);
  bool lora_adapts(const LlamaRank& rk, int64_t layer, LoraTarget target, const StepView& v) const;
  Status final_logits(LlamaRank& rk, const StepView& v);
  Status observe_input(LlamaRank& rk, int64_t layer, LinearInput which, const float* x /*[rows, cols]*/, int64_t rows,
                       int64_t cols);
  Status observe_kv(LlamaRank& rk, int64_t layer, int64_t num_tokens);

  ModelConfig cfg_;
  RopeTable rope_;
  int64_t max_model_len_ = 0;
  std::vector<LlamaRank> ranks_;
  std::vector<Backend*> backends_;
  std::unique_ptr<TpCommunicator> comm_;  // null on one rank
  LoraSlotsConfig lora_;  // num_slots 0: no LoRA
  uint64_t lora_generation_ = 0;
  int64_t ws_tokens_ = 0, ws_rows_ = 0;
  uint64_t ws_generation_ = 0;
  Buffer gathered_;                 // [ws_rows, vocab] on rank 0 (several ranks only)
  std::vector<float> host_logits_;  // the gather's staging
  std::vector<float*> reduce_ptrs_;
  KvAbsmaxObserver* kv_observer_ = nullptr;           // calibration only
  LinearInputObserver* act_observer_ = nullptr;     // likewise
};

}  // namespace lancet
