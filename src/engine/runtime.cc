// Runtime assembly: source -> tokenizer + template -> backend -> model -> KV cache -> engine.
#include "engine/runtime.h"

#include <algorithm>
#include <filesystem>

#include "backend/backend.h"
#include "core/logging.h"
#include "core/thread_pool.h"
#include "engine/draft_model.h"
#include "engine/llama_executor.h"
#include "engine/tp_executor.h"
#include "io/dummy_source.h"
#include "io/hf_config.h"
#include "io/text_file.h"
#include "model/kv_cache.h"
#include "model/kv_calibration.h"
#include "model/llama_model.h"
#include "model/tp_forward.h"
#include "tokenizer/model_tokenizer.h"

namespace fs = std::filesystem;

namespace lancet {

struct Runtime::Impl {
  std::unique_ptr<Backend> backend;
  std::unique_ptr<LlamaModel> model;
  std::unique_ptr<PagedKvCache> cache;
  std::unique_ptr<TpGroup> tp;  // tensor parallelism: the ranks, their shards and caches
  std::unique_ptr<ModelExecutor> executor;
  std::unique_ptr<DraftModel> draft;  // speculative decoding, method draft
  std::string bos_text, eos_text;
};

namespace {
// Bytes of the weights as the model holds them: the checkpoint's tensors, with the decoder
// layers' linear projections at one byte per element plus per-channel f32 scales under online
// FP8, and 32-bit embedding / lm_head tables halved (they become BF16).
int64_t loaded_weight_bytes(const ModelSource& src, bool quantize_fp8) {
  int64_t total = 0;
  for (const auto& [name, t] : src.tensors()) {
    int64_t b = static_cast<int64_t>(t.nbytes);
    if (quantize_fp8 && t.shape.size() == 2) {
      const bool layer_linear = name.find(".self_attn.") != std::string::npos || name.find(".mlp.") != std::string::npos;
      if (layer_linear && t.dtype != DType::kF8E4M3) b = t.numel() + t.shape[0] * 4;
      else if (!layer_linear && t.dtype == DType::kF32) b = t.numel() * 2;
    }
    total += b;
  }
  return total;
}
// --max-model-len past the trained length needs --allow-long-max-model-len.
Status check_context_length(int64_t trained, const RuntimeConfig& config) {
  if (config.max_model_len > trained && !config.allow_long_max_model_len)
    return InvalidArgument("--max-model-len " + std::to_string(config.max_model_len) +
                           " is past the model's trained length " + std::to_string(trained) +
                           "; pass --allow-long-max-model-len to force it");
  return OkStatus();
}
}  // namespace

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
  if (long_prefill_token_threshold < 0) return InvalidArgument("--long-prefill-token-threshold must be positive");
  if (kv_cache_dtype != "auto" && kv_cache_dtype != "float32" && kv_cache_dtype != "bfloat16" &&
      kv_cache_dtype != "bf16" && kv_cache_dtype != "fp8" && kv_cache_dtype != "fp8_e4m3")
    return InvalidArgument("--kv-cache-dtype must be auto, float32, bfloat16 or fp8 (fp8_e4m3), got '" +
                           kv_cache_dtype + "'");
  if (!quantization.empty() && quantization != "none" && quantization != "fp8")
    return InvalidArgument("--quantization must be fp8 or none, got '" + quantization + "'");
  if (backend != "cpu" && backend != "cuda") return InvalidArgument("--backend must be cpu or cuda");
  if (activation_precision != "fast" && activation_precision != "exact")
    return InvalidArgument("--activation-precision must be fast or exact, got '" + activation_precision + "'");
  if (num_threads < 0) return InvalidArgument("--threads must be positive");
  if (max_logprobs < 0) return InvalidArgument("--max-logprobs must be positive");
  ASSIGN_OR_RETURN(const SpeculativeConfig spec, parse_speculative_config(speculative_config));
  if (spec.force_acceptance_rate >= 0.0 && !allow_forced_acceptance)
    return InvalidArgument(
        "speculative config: force_acceptance_rate changes the output and is for `lancet bench` only");
  if (tensor_parallel_size < 1 || tensor_parallel_size > 64)
    return InvalidArgument("--tensor-parallel-size must be in [1, 64]");
  if (tensor_parallel_size > 1) {
    if (spec.method != SpecMethod::kNone)
      return InvalidArgument("--tensor-parallel-size > 1 with --speculative-config is not supported yet");
    if (quantization == "fp8")
      return InvalidArgument("--tensor-parallel-size > 1 with --quantization fp8 is not supported yet "
                             "(the shards are BF16/F16/F32)");
    if (kv_cache_dtype == "fp8" || kv_cache_dtype == "fp8_e4m3")
      return InvalidArgument("--tensor-parallel-size > 1 with --kv-cache-dtype fp8 is not supported yet");
  }
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
    // Refuse a bad context length before minutes of random weights are made.
    const std::string cfg = fs::is_directory(config.model) ? config.model + "/config.json" : config.model;
    ASSIGN_OR_RETURN(const ModelConfig pre, load_hf_config(cfg));
    RETURN_IF_ERROR(check_context_length(pre.max_position_embeddings, config));
    // With --quantization fp8 the dummy weights are made in FP8 directly (as an FP8 checkpoint
    // would hold them), so a 70B shape fits in host memory on its way to the GPU.
    DummySourceOptions dopts;
    dopts.fp8_linear = config.quantization == "fp8";  // validate() keeps fp8 off tensor parallelism
    ASSIGN_OR_RETURN(rt->source_, open_dummy_source(config.model, dopts));
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
  RETURN_IF_ERROR(check_context_length(trained, config));
  if (max_len > trained) {
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

  // Backend, model and KV cache: one backend, or a tensor-parallel group of them.
  // "auto": the activations' precision on each backend: BF16 on GPUs (half the bytes of f32,
  // what the attention kernels read fastest), f32 on the CPU.
  const bool kv_auto = config.kv_cache_dtype == "auto";
  const DType kv_dtype = (config.kv_cache_dtype == "bfloat16" || config.kv_cache_dtype == "bf16" ||
                          (kv_auto && config.backend == "cuda"))
                             ? DType::kBF16
                         : (config.kv_cache_dtype == "fp8" || config.kv_cache_dtype == "fp8_e4m3") ? DType::kF8E4M3
                                                                                                  : DType::kF32;
  const ActivationPrecision precision =
      config.activation_precision == "exact" ? ActivationPrecision::kExact : ActivationPrecision::kFast;
  const int tp = config.tensor_parallel_size;
  Backend* be0 = nullptr;  // the backend whose device memory sizes the KV cache
  if (tp > 1) {
    TpGroupOptions go;
    go.size = tp;
    go.backend = config.backend;
    go.isa = "auto";
    go.num_threads = config.num_threads;
    go.precision = precision;
    go.max_model_len = max_len;
    go.kv_num_blocks = 0;  // sized below, after the weights
    auto group = TpGroup::create(*rt->source_, go);
    if (!group.ok()) return group.status().with_context("--tensor-parallel-size " + std::to_string(tp));
    im.tp = std::move(group).value();
    be0 = &im.tp->backend(0);
    RETURN_IF_ERROR(be0->make_current());
  } else {
    ASSIGN_OR_RETURN(im.backend, make_backend(config.backend));
    im.backend->set_activation_precision(precision);
    LlamaModelOptions mopts;
    mopts.max_model_len = max_len;
    mopts.decode_graphs = !config.enforce_eager;
    // Online FP8: the layers' linear weights are quantized per output channel while loading.
    mopts.weights.quantize_fp8 = config.quantization == "fp8";
    ASSIGN_OR_RETURN(im.model, LlamaModel::create(*rt->source_, *im.backend, mopts));
    be0 = im.backend.get();
  }
  // Speculative decoding with a draft model: its weights load now, so the memory they take is
  // counted before the KV caches are sized (TP excludes speculation: validate()).
  ASSIGN_OR_RETURN(const SpeculativeConfig spec, parse_speculative_config(config.speculative_config));
  if (spec.method == SpecMethod::kDraft) {
    DraftModelOptions dopts;
    dopts.path = spec.model;
    dopts.max_model_len = max_len;
    dopts.dummy = config.load_format == "dummy";  // benchmarks: dummy target, dummy draft
    ASSIGN_OR_RETURN(im.draft, load_draft_model(dopts, *im.backend, mc, rt->tokenizer_.get()));
  }
  const int64_t elem = kv_cache_element_bytes(kv_dtype);  // fp8: 1 byte, so more blocks per byte budget
  // One block on one rank (all of them without tensor parallelism), K and V of every layer.
  const int64_t block_bytes = im.tp ? im.tp->kv_block_bytes(config.block_size, kv_dtype)
                                    : 2 * mc.num_layers * config.block_size * mc.num_kv_heads * mc.head_dim * elem;
  const int64_t blocks_per_seq = (max_len + config.block_size - 1) / config.block_size;
  // The draft's cache, when there is one, takes as many blocks as the target's plus room for
  // each sequence's drafts, all from the same budget: `pair_bytes` per target block, plus
  // `fixed_bytes` once.
  const int64_t draft_block_bytes = im.draft ? im.draft->kv_block_bytes(config.block_size, kv_dtype) : 0;
  const int64_t draft_extra_blocks =
      im.draft ? config.max_num_seqs * (spec.num_speculative_tokens / config.block_size + 2) : 0;
  const int64_t pair_bytes = block_bytes + draft_block_bytes;
  const int64_t fixed_bytes = draft_extra_blocks * draft_block_bytes;
  const int64_t one_seq_bytes = blocks_per_seq * pair_bytes + fixed_bytes;
  int64_t budget = config.kv_cache_memory;
  size_t dev_free = 0, dev_total = 0;
  if (budget == 0 && be0->memory_info(&dev_free, &dev_total)) {
    // GPU: the KV caches take what --gpu-memory-utilization leaves of the device after the
    // weights (already loaded, the draft's too) and a reserve for activations at the largest
    // step of each model. With tensor parallelism every GPU holds the same share, so rank 0's
    // device sizes all of them.
    const int64_t used = static_cast<int64_t>(dev_total - dev_free);
    const int64_t tokens = std::max(config.max_num_batched_tokens, config.max_num_seqs);
    auto activations = [&](const ModelConfig& c) {
      return tokens * (8 * c.hidden_size + (4 * c.intermediate_size + 4 * c.num_heads * c.head_dim) / tp) * 4 +
             config.max_num_seqs * c.vocab_size * 4 * 2 / tp;
    };
    const int64_t reserve =
        activations(mc) + (im.draft ? activations(im.draft->source->config()) : 0) + (int64_t{1} << 30);
    budget = static_cast<int64_t>(config.gpu_memory_utilization * static_cast<double>(dev_total)) - used - reserve;
    if (budget < one_seq_bytes)
      return ResourceExhausted("GPU memory: " + std::to_string(used >> 20) + " MiB in use of " +
                               std::to_string(dev_total >> 20) + " MiB leaves no room for one sequence of " +
                               std::to_string(max_len) + " tokens at --gpu-memory-utilization " +
                               std::to_string(config.gpu_memory_utilization) + "; lower --max-model-len");
  } else if (budget > 0 && im.tp) {
    budget /= tp;  // --kv-cache-memory is the whole group's
  }
  if (budget == 0) {
    // CPU default: room for every sequence slot at full length, capped at 2 GiB, but never
    // less than one full-length sequence.
    const int64_t want = blocks_per_seq * pair_bytes * config.max_num_seqs + fixed_bytes;
    budget = std::max(std::min<int64_t>(want, int64_t{2} << 30), one_seq_bytes);
  }
  const int64_t num_blocks = std::max<int64_t>(budget - fixed_bytes, 0) / pair_bytes;
  if (num_blocks < blocks_per_seq)
    return InvalidArgument("the KV cache (" + std::to_string(budget >> 20) + " MiB) cannot hold one sequence of " +
                           std::to_string(max_len) + " tokens (" + std::to_string(one_seq_bytes >> 20) + " MiB" +
                           (im.draft ? " with the draft model's cache" : "") +
                           "); raise --kv-cache-memory or lower --max-model-len");
  if (im.tp) {
    RETURN_IF_ERROR(im.tp->allocate_kv_cache(num_blocks, config.block_size, kv_dtype));
    publish_kv_cache_scales({});
    im.executor = std::make_unique<TpExecutor>(*im.tp);
  } else {
    ASSIGN_OR_RETURN(im.cache, PagedKvCache::create(*im.backend, im.model->kv_cache_config(num_blocks, config.block_size, kv_dtype)));
    if (kv_dtype == DType::kF8E4M3) {
      ASSIGN_OR_RETURN(KvScales scales, rt->setup_fp8_kv_scales(*rt->source_, *im.model, *im.cache));
      publish_kv_cache_scales(scales);
    } else {
      publish_kv_cache_scales({});  // no FP8 scales to export
    }
    im.executor = std::make_unique<LlamaExecutor>(*im.backend, *im.model, *im.cache);
  }
  rt->memory_.kv_num_blocks = num_blocks;
  rt->memory_.kv_block_size = config.block_size;
  rt->memory_.kv_block_bytes = block_bytes * tp;  // every rank's share of the block
  rt->memory_.kv_bytes_per_token = block_bytes * tp / config.block_size;
  rt->memory_.kv_dtype = dtype_name(kv_dtype);
  rt->memory_.weight_bytes = loaded_weight_bytes(*rt->source_, config.quantization == "fp8");
  LOG_INFO("model " << rt->model_name_ << ": " << mc.num_layers << " layers, hidden " << mc.hidden_size
                    << ", max_model_len " << max_len << ", KV cache " << num_blocks << " blocks of "
                    << config.block_size << " tokens, " << dtype_name(kv_dtype) << " ("
                    << ((num_blocks * block_bytes) >> 20) << " MiB" << (tp > 1 ? " per rank" : "") << ")"
                    << (tp > 1 ? ", tensor parallel over " + std::to_string(tp) + " " + config.backend + " ranks" : ""));

  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = config.max_num_batched_tokens;
  ec.scheduler.max_num_seqs = config.max_num_seqs;
  ec.scheduler.max_model_len = max_len;
  ec.scheduler.long_prefill_token_threshold = config.long_prefill_token_threshold;
  ec.enable_prefix_caching = config.enable_prefix_caching;
  for (int64_t e : mc.eos_token_ids) ec.eos_token_ids.push_back(static_cast<int32_t>(e));
  if (rt->tokenizer_) {
    const SpecialTokenIds& ids = rt->tokenizer_->special_ids();
    for (int32_t e : {ids.eos, ids.eot})
      if (e >= 0 && std::find(ec.eos_token_ids.begin(), ec.eos_token_ids.end(), e) == ec.eos_token_ids.end())
        ec.eos_token_ids.push_back(e);
  }
  ec.max_logprobs = config.max_logprobs;
  ec.model_id = rt->source_->path() + "|" + config.load_format + "|" + config.quantization;
  ec.kv_dtype = dtype_name(kv_dtype);
  ec.speculative = spec;
  if (im.draft) {
    RETURN_IF_ERROR(create_draft_kv_cache(*im.draft, *im.backend, num_blocks + draft_extra_blocks, config.block_size,
                                          kv_dtype));
    if (kv_dtype == DType::kF8E4M3)
      RETURN_IF_ERROR(rt->setup_fp8_kv_scales(*im.draft->source, *im.draft->model, *im.draft->cache).status());
    ec.draft_kv.enable_prefix_caching = config.enable_prefix_caching;
    // Decode cost follows the weights read: layers x (attention + MLP) + the vocabulary rows.
    auto weights = [](const ModelConfig& c) {
      return static_cast<double>(c.num_layers) * c.hidden_size * (4.0 * c.hidden_size + 3.0 * c.intermediate_size) +
             static_cast<double>(c.vocab_size) * c.hidden_size;
    };
    ec.draft_cost_ratio = weights(im.draft->source->config()) / std::max(weights(mc), 1.0);
    ec.draft_kv.salt = kv_cache_salt(im.draft->source->path() + "|draft", dtype_name(kv_dtype), "");
    rt->memory_.draft_weight_bytes = loaded_weight_bytes(*im.draft->source, false);
    rt->memory_.draft_kv_bytes = (num_blocks + draft_extra_blocks) * draft_block_bytes;
  }
  rt->engine_ = std::make_unique<Engine>(ec, im.executor.get(), im.draft ? im.draft->executor.get() : nullptr);
  if (rt->tokenizer_) rt->engine_->set_tokenizer(rt->tokenizer_.get());
  rt->async_ = std::make_unique<AsyncEngine>(rt->engine_.get());
  return rt;
}

// FP8 KV: the checkpoint's k_scale/v_scale when it has them, else an online calibration over
// the built-in text (plain, and as a chat when there is a template, so special tokens are
// seen), or over fixed pseudo-random ids when the model has no tokenizer. Never left at 1.0:
// the model refuses an FP8 cache without scales.
StatusOr<KvScales> Runtime::setup_fp8_kv_scales(const ModelSource& src, LlamaModel& model, PagedKvCache& cache) {
  ASSIGN_OR_RETURN(std::optional<KvScales> scales, kv_scales_from_checkpoint(src));
  if (!scales) {
    std::vector<std::vector<int32_t>> prompts;
    if (tokenizer_) {
      ASSIGN_OR_RETURN(auto text, encode_prompt(std::string(kv_calibration_text())));
      prompts.push_back(std::move(text));
      if (chat_template_) {
        ChatTemplateOptions co;
        co.add_generation_prompt = false;
        auto chat = encode_chat(nlohmann::ordered_json::parse(kv_calibration_chat_json()), co);
        if (chat.ok()) prompts.push_back(std::move(*chat));
        else LOG_WARN("kv calibration: skipping the chat prompt: " << chat.status().to_string());
      }
    } else {
      prompts.push_back(kv_calibration_random_tokens(src.config().vocab_size, 512));
    }
    KvCalibrationOptions co;
    co.block_size = config_.block_size;
    Backend& be = *impl_->backend;
    co.scratch_dtype = be.name() == std::string("cpu") ? DType::kF32 : DType::kBF16;
    int64_t n = 0;
    for (const auto& p : prompts) n += static_cast<int64_t>(p.size());
    ASSIGN_OR_RETURN(KvScales cal, calibrate_kv_scales(model, be, prompts, co));
    LOG_INFO("fp8 kv cache of " << src.path() << ": no k_scale/v_scale in the checkpoint; calibrated on " << n
             << " tokens" << (tokenizer_ ? "" : " (random ids: no tokenizer)") << ", margin " << co.margin);
    scales = std::move(cal);
  }
  RETURN_IF_ERROR(cache.set_scales(scales->k, scales->v));
  LOG_INFO("fp8 kv cache scales (" << scales->source << "): " << format_kv_scales(*scales));
  return *scales;
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
