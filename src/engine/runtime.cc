// Runtime assembly: source -> tokenizer + template -> backend -> model -> KV cache -> engine.
#include "engine/runtime.h"

#include <algorithm>
#include <filesystem>

#include "backend/backend.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/llama_executor.h"
#include "io/dummy_source.h"
#include "io/text_file.h"
#include "model/kv_cache.h"
#include "model/llama_model.h"
#include "tokenizer/model_tokenizer.h"

namespace fs = std::filesystem;

namespace lancet {

struct Runtime::Impl {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<PagedKvCache> cache;
  std::unique_ptr<LlamaExecutor> executor;
  std::string bos_text, eos_text;
};

Status RuntimeConfig::validate() const {
  if (model.empty()) return InvalidArgument("--model is required");
  if (load_format != "auto" && load_format != "dummy")
    return InvalidArgument("--load-format must be auto or dummy, got '" + load_format + "'");
  if (block_size < 1 || block_size > 256 || (block_size & (block_size - 1)) != 0)
    return InvalidArgument("--block-size must be a power of two in [1, 256]");
  if (max_model_len < 0) return InvalidArgument("--max-model-len must be positive");
  if (kv_cache_memory < 0) return InvalidArgument("--kv-cache-memory must be positive");
  if (!(gpu_memory_utilization > 0.0 && gpu_memory_utilization <= 1.0))
    return InvalidArgument("--gpu-memory-utilization must be in (0, 1]");
  if (max_num_seqs < 1) return InvalidArgument("--max-num-seqs must be at least 1");
  if (max_num_batched_tokens < 1) return InvalidArgument("--max-num-batched-tokens must be at least 1");
  if (kv_cache_dtype != "auto" && kv_cache_dtype != "float32" && kv_cache_dtype != "bfloat16" &&
      kv_cache_dtype != "bf16")
    return InvalidArgument("--kv-cache-dtype must be auto, float32 or bfloat16 on this backend, got '" +
                           kv_cache_dtype + "'");
  if (!quantization.empty() && quantization != "none")
    return InvalidArgument("--quantization " + quantization + " is not supported by this build");
  if (backend != "cpu" && backend != "cuda") return InvalidArgument("--backend must be cpu or cuda");
  if (num_threads < 0) return InvalidArgument("--threads must be positive");
  if (max_logprobs < 0) return InvalidArgument("--max-logprobs must be positive");
  return OkStatus();
}

Runtime::~Runtime() {
  if (async_) async_->shutdown(/*drain=*/false);
  async_.reset();
  engine_.reset();
}

StatusOr<std::unique_ptr<Runtime>> Runtime::create(const RuntimeConfig& config) {
  RETURN_IF_ERROR(config.validate());
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->config_ = config;
  rt->impl_ = std::make_unique<Impl>();
  Impl& im = *rt->impl_;
  if (config.num_threads > 0) set_default_threads(config.num_threads);

  if (config.load_format == "dummy") {
    ASSIGN_OR_RETURN(rt->source_, open_dummy_source(config.model));
  } else {
    ASSIGN_OR_RETURN(rt->source_, open_model_source(config.model));
  }
  const ModelConfig& mc = rt->source_->config();
  if (rt->source_->tensors().empty())
    return InvalidArgument(config.model + " has no weights; use --load-format dummy for random weights");
  rt->model_name_ = config.served_model_name.empty()
                        ? fs::path(config.model).filename().string()
                        : config.served_model_name;
  if (rt->model_name_.empty()) rt->model_name_ = fs::path(config.model).parent_path().filename().string();

  // Context length: the model's trained length unless asked otherwise.
  const int64_t trained = mc.max_position_embeddings;
  int64_t max_len = config.max_model_len > 0 ? config.max_model_len : trained;
  if (max_len > trained) {
    if (!config.allow_long_max_model_len)
      return InvalidArgument("--max-model-len " + std::to_string(max_len) + " is past the model's trained length " +
                             std::to_string(trained) + "; pass --allow-long-max-model-len to force it");
    LOG_WARN("max_model_len " << max_len << " exceeds the trained length " << trained
                              << "; quality past it is not guaranteed");
  }
  max_len = std::min<int64_t>(max_len, 1 << 20);
  rt->max_model_len_ = max_len;

  // Tokenizer and chat template.
  ASSIGN_OR_RETURN(rt->tokenizer_, load_model_tokenizer(*rt->source_));
  std::string tmpl = rt->source_->tokenizer().chat_template;
  if (!config.chat_template.empty()) {
    if (fs::is_regular_file(config.chat_template)) {
      ASSIGN_OR_RETURN(tmpl, read_text_file(config.chat_template, 1 << 20));
    } else {
      tmpl = config.chat_template;
    }
  }
  if (tmpl.empty() && rt->tokenizer_) tmpl = builtin_llama3_template();
  if (!tmpl.empty()) {
    auto compiled = ChatTemplate::compile(tmpl);
    if (!compiled.ok()) return compiled.status().with_context("chat template");
    rt->chat_template_ = std::make_unique<ChatTemplate>(std::move(*compiled));
  }
  im.bos_text = rt->source_->tokenizer().bos_token;
  im.eos_text = rt->source_->tokenizer().eos_token;
  if (rt->tokenizer_) {
    const SpecialTokenIds& ids = rt->tokenizer_->special_ids();
    if (im.bos_text.empty() && ids.bos >= 0) im.bos_text = std::string(rt->tokenizer_->token_bytes(ids.bos));
    if (im.eos_text.empty() && ids.eos >= 0) im.eos_text = std::string(rt->tokenizer_->token_bytes(ids.eos));
  }

  // Backend, model and KV cache.
  ASSIGN_OR_RETURN(im.backend, make_backend(config.backend));
  LlamaModelOptions mopts;
  mopts.max_model_len = max_len;
  ASSIGN_OR_RETURN(im.model, LlamaModel::create(*rt->source_, *im.backend, mopts));
  const DType kv_dtype = (config.kv_cache_dtype == "bfloat16" || config.kv_cache_dtype == "bf16")
                             ? DType::kBF16 : DType::kF32;
  const int64_t elem = kv_dtype == DType::kBF16 ? 2 : 4;
  const int64_t block_bytes = 2 * mc.num_layers * config.block_size * mc.num_kv_heads * mc.head_dim * elem;
  const int64_t blocks_per_seq = (max_len + config.block_size - 1) / config.block_size;
  int64_t budget = config.kv_cache_memory;
  if (budget == 0) {
    // CPU default: room for every sequence slot at full length, capped at 2 GiB, but never
    // less than one full-length sequence.
    const int64_t want = blocks_per_seq * block_bytes * config.max_num_seqs;
    budget = std::max(std::min<int64_t>(want, int64_t{2} << 30), blocks_per_seq * block_bytes);
  }
  const int64_t num_blocks = budget / block_bytes;
  if (num_blocks < blocks_per_seq)
    return InvalidArgument("the KV cache (" + std::to_string(budget >> 20) + " MiB) cannot hold one sequence of " +
                           std::to_string(max_len) + " tokens (" + std::to_string((blocks_per_seq * block_bytes) >> 20) +
                           " MiB); raise --kv-cache-memory or lower --max-model-len");
  ASSIGN_OR_RETURN(im.cache, PagedKvCache::create(*im.backend, im.model->kv_cache_config(num_blocks, config.block_size, kv_dtype)));
  im.executor = std::make_unique<LlamaExecutor>(*im.backend, *im.model, *im.cache);
  LOG_INFO("model " << rt->model_name_ << ": " << mc.num_layers << " layers, hidden " << mc.hidden_size
                    << ", max_model_len " << max_len << ", KV cache " << num_blocks << " blocks of "
                    << config.block_size << " tokens (" << ((num_blocks * block_bytes) >> 20) << " MiB)");

  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = config.max_num_batched_tokens;
  ec.scheduler.max_num_seqs = config.max_num_seqs;
  ec.scheduler.max_model_len = max_len;
  ec.enable_prefix_caching = config.enable_prefix_caching;
  for (int64_t e : mc.eos_token_ids) ec.eos_token_ids.push_back(static_cast<int32_t>(e));
  if (rt->tokenizer_) {
    const SpecialTokenIds& ids = rt->tokenizer_->special_ids();
    for (int32_t e : {ids.eos, ids.eot})
      if (e >= 0 && std::find(ec.eos_token_ids.begin(), ec.eos_token_ids.end(), e) == ec.eos_token_ids.end())
        ec.eos_token_ids.push_back(e);
  }
  ec.max_logprobs = config.max_logprobs;
  ec.model_id = rt->source_->path() + "|" + config.load_format;
  ec.kv_dtype = dtype_name(kv_dtype);
  rt->engine_ = std::make_unique<Engine>(ec, im.executor.get());
  if (rt->tokenizer_) rt->engine_->set_tokenizer(rt->tokenizer_.get());
  rt->async_ = std::make_unique<AsyncEngine>(rt->engine_.get());
  return rt;
}

StatusOr<std::vector<int32_t>> Runtime::encode_prompt(const std::string& text, bool parse_special) const {
  if (!tokenizer_) return InvalidArgument("this model has no tokenizer: send token ids instead of text");
  return tokenizer_->encode(text, EncodeOptions{.parse_special = parse_special,
                                                .add_bos = tokenizer_->add_bos_by_default()});
}

StatusOr<std::string> Runtime::render_chat(const nlohmann::ordered_json& messages,
                                           const ChatTemplateOptions& options) const {
  if (!chat_template_) return InvalidArgument("this model has no chat template (and no tokenizer)");
  ChatTemplateOptions o = options;
  if (o.bos_token.empty()) o.bos_token = impl_->bos_text;
  if (o.eos_token.empty()) o.eos_token = impl_->eos_text;
  return apply_chat_template(*chat_template_, messages, o);
}

StatusOr<std::vector<int32_t>> Runtime::encode_chat(const nlohmann::ordered_json& messages,
                                                    const ChatTemplateOptions& options) const {
  if (!tokenizer_) return InvalidArgument("this model has no tokenizer");
  ASSIGN_OR_RETURN(std::string text, render_chat(messages, options));
  std::vector<std::string> contents;
  if (messages.is_array()) {
    for (const auto& m : messages) {
      if (!m.is_object() || !m.contains("content")) continue;
      const auto& c = m["content"];
      if (c.is_string()) {
        contents.push_back(c.get<std::string>());
      } else if (c.is_array()) {
        for (const auto& part : c)
          if (part.is_object() && part.contains("text") && part["text"].is_string())
            contents.push_back(part["text"].get<std::string>());
      }
    }
  }
  return encode_chat_prompt(*tokenizer_, text, contents,
                            ChatEncodeOptions{.hf_identical = config_.special_tokens_in_content});
}

std::string Runtime::token_text(int32_t id) const {
  if (!tokenizer_) return "";
  return std::string(tokenizer_->token_bytes(id));
}

}  // namespace lancet
