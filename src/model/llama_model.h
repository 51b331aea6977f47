// The Llama forward pass, written once against backend.h: embedding, per layer fused
// add+RMSNorm -> q/k/v -> rope -> KV write -> paged attention -> o_proj -> add+RMSNorm ->
// SwiGLU MLP, then the final norm and the logits of only the rows the step asks for.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "backend/backend.h"
#include "io/model_source.h"
#include "model/fp8_scales.h"
#include "model/kv_cache.h"
#include "model/llama_weights.h"
#include "model/rope.h"
#include "model/step.h"
#include "model/step_upload.h"

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
  // Replay decode steps as captured graphs on backends that have them (model/decode_graphs.h).
  bool decode_graphs = true;
};

class DecodeGraphs;

class LlamaModel {
 public:
  // The source must outlive the model (weights are views into it on CPU).
  static StatusOr<std::unique_ptr<LlamaModel>> create(const ModelSource& src, Backend& backend,
                                                      const LlamaModelOptions& opts = {});

  const ModelConfig& config() const { return cfg_; }
  int64_t max_model_len() const { return max_model_len_; }
  const RopeTable& rope_table() const { return rope_; }
  // A cache config that fits this model.
  KvCacheConfig kv_cache_config(int64_t num_blocks, int64_t block_size = 16,
                                DType dtype = DType::kF32) const;

  // Runs one step; logits (host) get [step.num_logits_rows, vocab], rows in step order.
  Status forward(const StepMetadata& step, PagedKvCache& cache, std::vector<float>* logits);
  // Runs one step like forward(), then samples the rows named in `device` where they are
  // (Backend::sample_rows; DeviceSampleRow::row numbers the step's logits rows, each at most
  // once): tokens[i] is device[i]'s token. host_logits gets only the other rows,
  // [num_logits_rows - device.size(), vocab], in row order. A non-empty `device` needs a
  // backend with device sampling.
  Status forward_sampled(const StepMetadata& step, PagedKvCache& cache, std::span<const DeviceSampleRow> device,
                         int32_t* tokens /*[device.size()]*/, std::vector<float>* host_logits);

  // The step's work enqueued on the backend (nothing waited for, nothing copied to the host):
  // the logits of its rows land in logits_device(). Callers size the workspace first.
  Status enqueue(const StepView& v, PagedKvCache& cache);
  // Grows the activation buffers to num_tokens rows and logits_rows logits rows; growing
  // drops the captured decode graphs (they point at the old buffers).
  Status ensure_workspace(int64_t num_tokens, int64_t logits_rows);
  const float* logits_device() const { return logits_.as<float>(); }
  Backend& backend() { return be_; }
  // FP8 KV calibration hook (model/kv_calibration.h): while set, every step copies each
  // layer's K (after rope) and V rows to the host and folds their absmax into the observer.
  // Null (the default) costs one pointer test per layer.
  void set_kv_observer(KvAbsmaxObserver* observer) { kv_observer_ = observer; }
  // Static activation scale and second-moment calibration (model/fp8_scales.h): while set,
  // every step copies the inputs of each layer's linear projections to the host and hands
  // them to the observer.
  void set_activation_observer(LinearInputObserver* observer) { act_observer_ = observer; }
  ~LlamaModel();

 private:
  explicit LlamaModel(Backend& be);
  // Checks the step and enqueues it (replaying a decode graph where one fits); its logits
  // rows [0, num_logits_rows) are in logits_device() once the queued work is done.
  Status enqueue_step(const StepMetadata& step, PagedKvCache& cache);

  Backend& be_;
  ModelConfig cfg_;
  LlamaWeights w_;
  RopeTable rope_;
  Buffer d_cos_, d_sin_;
  int64_t max_model_len_ = 0;
  // Activations, grown to the largest step seen.
  int64_t ws_tokens_ = 0, ws_rows_ = 0;
  Buffer residual_, hidden_, q_, k_, v_, attn_, proj_, gate_, up_, act_, sel_, logits_;
  std::unique_ptr<DecodeGraphs> graphs_;  // null when disabled or unsupported
  StepUploader uploader_;                 // the metadata of steps that run eagerly
  KvAbsmaxObserver* kv_observer_ = nullptr;  // calibration only
  LinearInputObserver* act_observer_ = nullptr;  // likewise
};

}  // namespace lancet
