// Runtime: the config's validation, prompt encoding and the chat template (create() and its
// loading, memory and assembly steps are in runtime_load.cc).
#include "runtime/runtime.h"
#include "runtime/runtime_impl.h"

#include <algorithm>
#include <filesystem>

#include "core/logging.h"
#include "io/lora_adapter.h"
#include "io/text_file.h"
#include "kv_tier/kv_entry_codec.h"
#include "tokenizer/model_tokenizer.h"

namespace fs = std::filesystem;

namespace lancet {

Fp8AttentionMath resolve_fp8_attention_math(const std::string& flag, const std::string& backend) {
  if (flag == "e4m3") return Fp8AttentionMath::kE4m3Query;
  if (flag == "e4m3-pv") return Fp8AttentionMath::kE4m3QueryAndP;
  if (flag == "e4m3x2-pv") return Fp8AttentionMath::kE4m3x2QueryAndP;
  if (flag == "e4m3x2" || (flag == "auto" && backend == "cuda")) return Fp8AttentionMath::kE4m3x2Query;
  return Fp8AttentionMath::kF16;
}

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
  if (max_num_seqs < 0) return InvalidArgument("--max-num-seqs must be at least 1 (0 = chosen from the KV cache)");
  if (max_num_batched_tokens < 0)
    return InvalidArgument("--max-num-batched-tokens must be at least 1 (0 = chosen for the backend)");
  if (long_prefill_token_threshold < 0) return InvalidArgument("--long-prefill-token-threshold must be positive");
  if (!(max_step_ms >= 0) || max_step_ms > 1e6) return InvalidArgument("--max-step-ms must be between 0 and 1e6");
  if (low_priority_prefill_tokens < 0) return InvalidArgument("--batch-prefill-tokens must not be negative");
  if (capacity_policy != "max-utilization" && capacity_policy != "guaranteed-no-evict")
    return InvalidArgument("--capacity-policy must be max-utilization or guaranteed-no-evict, got '" +
                           capacity_policy + "'");
  if (kv_cache_dtype != "auto" && kv_cache_dtype != "float32" && kv_cache_dtype != "bfloat16" &&
      kv_cache_dtype != "bf16" && kv_cache_dtype != "fp8" && kv_cache_dtype != "fp8_e4m3")
    return InvalidArgument("--kv-cache-dtype must be auto, float32, bfloat16 or fp8 (fp8_e4m3), got '" +
                           kv_cache_dtype + "'");
  if (!quantization.empty() && quantization != "none" && quantization != "fp8")
    return InvalidArgument("--quantization must be fp8 or none, got '" + quantization + "'");
  if (backend != "cpu" && backend != "cuda") return InvalidArgument("--backend must be cpu or cuda");
  if (activation_precision != "fast" && activation_precision != "exact")
    return InvalidArgument("--activation-precision must be fast or exact, got '" + activation_precision + "'");
  const std::string& fm = fp8_attention_math;
  if (fm != "auto" && fm != "f16" && fm != "e4m3" && fm != "e4m3-pv" && fm != "e4m3x2" && fm != "e4m3x2-pv")
    return InvalidArgument("--fp8-attention-math must be auto, f16, e4m3, e4m3x2, e4m3-pv or e4m3x2-pv, got '" +
                           fm + "'");
  if (num_threads < 0) return InvalidArgument("--threads must be positive");
  if (max_logprobs < 0) return InvalidArgument("--max-logprobs must be positive");
  ASSIGN_OR_RETURN(const SpeculativeConfig spec, parse_speculative_config(speculative_config));
  if (spec.force_acceptance_rate >= 0.0 && !allow_forced_acceptance)
    return InvalidArgument(
        "speculative config: force_acceptance_rate changes the output and is for `lancet bench` only");
  if (tensor_parallel_size < 1 || tensor_parallel_size > 64)
    return InvalidArgument("--tensor-parallel-size must be in [1, 64]");
  RETURN_IF_ERROR(kv_offload.validate());
  if (lora_enabled()) {
    if (max_loras < 1 || max_loras > 256) return InvalidArgument("--max-loras must be in [1, 256]");
    if (max_lora_rank < 1 || max_lora_rank > 512) return InvalidArgument("--max-lora-rank must be in [1, 512]");
    for (size_t i = 0; i < lora_modules.size(); ++i) {
      if (lora_modules[i].name.empty() || lora_modules[i].path.empty())
        return InvalidArgument("--lora-modules entries are name=path, with both given");
      for (size_t j = 0; j < i; ++j)
        if (lora_modules[j].name == lora_modules[i].name)
          return InvalidArgument("--lora-modules names '" + lora_modules[i].name + "' twice");
    }
    if (static_cast<int64_t>(lora_modules.size()) > max_loras)
      return InvalidArgument("--lora-modules lists " + std::to_string(lora_modules.size()) + " adapters; --max-loras is " +
                             std::to_string(max_loras));
  }
  if (!kv_offload.url.empty() && !enable_prefix_caching)
    return InvalidArgument("--kv-offload shares prefix-cache blocks: it needs prefix caching (drop --no-enable-prefix-caching)");
  return OkStatus();
}

Runtime::~Runtime() {
  if (async_) async_->shutdown(/*drain=*/false);
  async_.reset();
  output_.reset();
  engine_.reset();
}

StepProfile Runtime::take_step_profile() { return impl_->executor->take_step_profile(); }

DeviceTimelineStats Runtime::take_device_timeline() { return impl_->executor->take_device_timeline(); }

bool Runtime::lora_enabled() const { return loras_ != nullptr; }

std::shared_ptr<const LoraRef> Runtime::find_lora(const std::string& name) const {
  return loras_ ? loras_->find(name) : nullptr;
}

std::vector<LoraRegistry::Entry> Runtime::lora_adapters() const {
  return loras_ ? loras_->list() : std::vector<LoraRegistry::Entry>{};
}

Status Runtime::load_lora(const std::string& name, const std::string& path) {
  if (!loras_) return FailedPrecondition("LoRA adapters are not enabled (start with --enable-lora or --lora-modules)");
  if (name.empty()) return InvalidArgument("a LoRA adapter needs a name");
  if (name == model_name_) return InvalidArgument("'" + name + "' is the base model's name");
  ASSIGN_OR_RETURN(std::unique_ptr<LoraAdapter> adapter, LoraAdapter::open(path));
  if (adapter->rank() > config_.max_lora_rank)
    return InvalidArgument("LoRA adapter '" + name + "' has rank " + std::to_string(adapter->rank()) +
                           ", past --max-lora-rank " + std::to_string(config_.max_lora_rank));
  LlamaModel& model = *impl_->model;
  const LoraAdapter* a = adapter.get();
  auto loaded = loras_->load(name, path, [&](int32_t slot) {
    return async_->run_on_loop([&] { return model.set_lora_slot(slot, a); });
  });
  if (!loaded.ok()) return loaded.status().with_context("LoRA adapter '" + name + "'");
  LOG_INFO("LoRA adapter '" << name << "' (rank " << adapter->rank() << ", " << adapter->factors().size()
                            << " projections) from " << path << " in slot " << (*loaded)->slot);
  return OkStatus();
}

Status Runtime::unload_lora(const std::string& name) {
  if (!loras_) return FailedPrecondition("LoRA adapters are not enabled (start with --enable-lora or --lora-modules)");
  return loras_->unload(name);
}

RedisKvTier* Runtime::kv_offload() const { return impl_ ? impl_->kv_tier.get() : nullptr; }

std::vector<std::string> Runtime::kv_offload_keys(std::span<const int32_t> tokens) const {
  std::vector<std::string> keys;
  if (!kv_offload()) return keys;
  // The engine's prefix-cache keys: the same salt (Engine's constructor) and chain.
  const EngineConfig ec = engine_config();
  BlockHash key = kv_cache_salt(ec.model_id, ec.kv_dtype, "");
  const size_t bs = static_cast<size_t>(config_.block_size);
  for (size_t at = 0; at + bs <= tokens.size(); at += bs) {
    key = chain_block_hash(key, tokens.subspan(at, bs));
    keys.push_back(kv_entry_key(impl_->kv_tier->layout(), key));
  }
  return keys;
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
