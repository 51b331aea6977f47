// The Llama forward pass, written once against backend.h: embedding, per layer fused
// add+RMSNorm -> q/k/v -> rope -> KV write -> paged attention -> o_proj -> add+RMSNorm ->
// SwiGLU MLP, then the final norm and the logits of only the rows the step asks for.
#pragma once

#include <memory>
#include <vector>

#include "backend/backend.h"
#include "io/model_source.h"
#include "model/kv_cache.h"
#include "model/llama_weights.h"
#include "model/rope.h"
#include "model/step.h"

namespace lancet {

struct LlamaModelOptions {
  // Longest sequence (positions) the rope table covers; 0 = the config's
  // max_position_embeddings (capped at 131072).
  int64_t max_model_len = 0;
  // Round rope frequencies to the checkpoint dtype the way transformers does for its
  // inv_freq buffer (rope.h), for HF checkpoints in bf16/f16. GGUF files are never rounded.
  bool hf_rope_rounding = true;
};

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

 private:
  LlamaModel(Backend& be) : be_(be) {}
  Status ensure_workspace(int64_t num_tokens, int64_t logits_rows);

  Backend& be_;
  ModelConfig cfg_;
  LlamaWeights w_;
  RopeTable rope_;
  Buffer d_cos_, d_sin_;
  int64_t max_model_len_ = 0;
  // Activations, grown to the largest step seen.
  int64_t ws_tokens_ = 0, ws_rows_ = 0;
  Buffer residual_, hidden_, q_, k_, v_, attn_, proj_, gate_, up_, act_, sel_, logits_;
};

}  // namespace lancet
