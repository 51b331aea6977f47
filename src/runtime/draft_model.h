// Loading the draft model of speculative decoding (method draft): a second Llama checkpoint
// on the target's backend (rank 0's with tensor parallelism), with its own KV buffers and
// executor. It must share the
// target's tokenizer, checked at start: same vocabulary size, the same bytes for every token
// id, and the same special tokens (bos, eos, end of turn). Drafts and target logits are then
// comparable id for id.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "backend/backend.h"
#include "core/status.h"
#include "runner/llama_executor.h"
#include "io/model_source.h"
#include "model/llama_model.h"
#include "tokenizer/tokenizer.h"

namespace lancet {

struct DraftModelOptions {
  std::string path;           // HF directory or .gguf
  int64_t max_model_len = 0;  // the target's
  bool dummy = false;         // random weights of path's config (the target's --load-format dummy)
};

struct DraftModel {
  std::unique_ptr<ModelSource> source;
  std::unique_ptr<Tokenizer> tokenizer;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<LlamaExecutor> executor;    // with its KV buffers; null until create_draft_kv_cache

  // Bytes of one KV block of the draft (K and V of every layer).
  int64_t kv_block_bytes(int64_t block_size, DType kv_dtype) const;
};

// Opens the draft, checks it against the target and loads its weights on `backend`. The KV
// cache comes later (create_draft_kv_cache), once the runtime has sized both models' caches
// from the memory both models' weights leave. target_tokenizer may be null (checkpoints
// without one): then only the vocabulary sizes and the special ids of the configs are
// compared.
StatusOr<std::unique_ptr<DraftModel>> load_draft_model(const DraftModelOptions& options, Backend& backend,
                                                       const ModelConfig& target_config,
                                                       const Tokenizer* target_tokenizer);

// The draft's executor, with KV buffers of num_blocks blocks.
Status create_draft_kv_cache(DraftModel& draft, int64_t num_blocks, int32_t block_size, DType kv_dtype);

// The start-up check alone (for tests): OK when the draft can propose tokens for the target.
Status check_draft_compatible(const ModelConfig& target, const Tokenizer* target_tok, const ModelConfig& draft,
                              const Tokenizer* draft_tok);

}  // namespace lancet
