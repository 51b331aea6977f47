// Draft model loading and the shared-tokenizer check.
#include "runtime/draft_model.h"

#include "core/logging.h"
#include "io/dummy_source.h"
#include "tokenizer/model_tokenizer.h"

namespace lancet {

Status check_draft_compatible(const ModelConfig& target, const Tokenizer* tt, const ModelConfig& draft,
                              const Tokenizer* dt) {
  if (target.vocab_size != draft.vocab_size)
    return InvalidArgument("speculative draft model: vocabulary size " + std::to_string(draft.vocab_size) +
                           " differs from the target's " + std::to_string(target.vocab_size));
  if ((tt == nullptr) != (dt == nullptr))
    return InvalidArgument(std::string("speculative draft model: ") +
                           (tt ? "the draft has no tokenizer to compare with the target's"
                               : "the target has no tokenizer to compare with the draft's"));
  if (!tt) {
    if (target.bos_token_id != draft.bos_token_id || target.eos_token_ids != draft.eos_token_ids)
      return InvalidArgument("speculative draft model: bos/eos token ids differ from the target's");
    return OkStatus();
  }
  if (tt->vocab_size() != dt->vocab_size())
    return InvalidArgument("speculative draft model: tokenizer size " + std::to_string(dt->vocab_size()) +
                           " differs from the target's " + std::to_string(tt->vocab_size()));
  for (int32_t id = 0; id < tt->vocab_size(); ++id) {
    if (tt->token_bytes(id) != dt->token_bytes(id))
      return InvalidArgument("speculative draft model: token " + std::to_string(id) +
                             " differs from the target's (the models must share a tokenizer)");
  }
  const SpecialTokenIds& a = tt->special_ids();
  const SpecialTokenIds& b = dt->special_ids();
  if (a.bos != b.bos || a.eos != b.eos || a.eot != b.eot)
    return InvalidArgument("speculative draft model: special tokens (bos/eos/eot) differ from the target's");
  return OkStatus();
}

StatusOr<std::unique_ptr<DraftModel>> load_draft_model(const DraftModelOptions& o, Backend& backend,
                                                       const ModelConfig& target_config,
                                                       const Tokenizer* target_tokenizer) {
  auto d = std::make_unique<DraftModel>();
  auto src = o.dummy ? open_dummy_source(o.path) : open_model_source(o.path);
  if (!src.ok()) return src.status().with_context("speculative draft model " + o.path);
  d->source = std::move(*src);
  if (d->source->tensors().empty()) return InvalidArgument("speculative draft model " + o.path + " has no weights");
  ASSIGN_OR_RETURN(d->tokenizer, load_model_tokenizer(*d->source));
  RETURN_IF_ERROR(check_draft_compatible(target_config, target_tokenizer, d->source->config(), d->tokenizer.get()));
  LlamaModelOptions mopts;
  mopts.max_model_len = o.max_model_len;
  auto model = LlamaModel::create(*d->source, backend, mopts);
  if (!model.ok()) return model.status().with_context("speculative draft model " + o.path);
  d->model = std::move(*model);
  const ModelConfig& mc = d->source->config();
  LOG_INFO("speculative draft model " << o.path << ": " << mc.num_layers << " layers, hidden " << mc.hidden_size);
  return d;
}

int64_t DraftModel::kv_block_bytes(int64_t block_size, DType kv_dtype) const {
  return model->kv_block_bytes(static_cast<int32_t>(block_size), kv_dtype);
}

Status create_draft_kv_cache(DraftModel& d, int64_t num_blocks, int32_t block_size, DType kv_dtype) {
  auto exec = LlamaExecutor::create(*d.model, KvBlockConfig{num_blocks, block_size}, kv_dtype);
  if (!exec.ok()) return exec.status().with_context("speculative draft model KV cache");
  d.executor = std::move(*exec);
  LOG_INFO("speculative draft model KV cache: " << num_blocks << " blocks of " << block_size << " tokens ("
                                                << ((num_blocks * d.kv_block_bytes(block_size, kv_dtype)) >> 20)
                                                << " MiB)");
  return OkStatus();
}

}  // namespace lancet
