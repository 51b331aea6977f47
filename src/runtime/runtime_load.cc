// Runtime::create: loading (source, tokenizer, the ranks' backends, model and draft), the KV
// memory budget, and the assembly of executor, FP8 KV scales and engine.
#include <algorithm>
#include <filesystem>

#include "core/logging.h"
#include "core/thread_pool.h"
#include "runtime/kv_memory_plan.h"
#include "runtime/runtime.h"
#include "runtime/runtime_impl.h"
#include "runtime/batch_limits.h"
#include "io/dummy_source.h"
#include "io/hf_config.h"
#include "io/text_file.h"
#include "runner/rank_backends.h"
#include "tokenizer/model_tokenizer.h"

namespace fs = std::filesystem;

namespace lancet {

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

StatusOr<std::unique_ptr<Runtime>> Runtime::create(const RuntimeConfig& config) {
  RETURN_IF_ERROR(config.validate());
  std::unique_ptr<Runtime> rt(new Runtime());
  rt->config_ = config;
  rt->impl_ = std::make_unique<Impl>();
  if (config.num_threads > 0) set_default_threads(config.num_threads);
  RETURN_IF_ERROR(rt->open_source());
  RETURN_IF_ERROR(rt->load_tokenizer());
  RETURN_IF_ERROR(rt->load_models());
  const BatchLimits limits = initial_batch_limits(config.backend, config.max_num_seqs, config.max_num_batched_tokens);
  rt->config_.max_num_seqs = limits.max_num_seqs;
  rt->config_.max_num_batched_tokens = limits.max_num_batched_tokens;
  ASSIGN_OR_RETURN(const int64_t num_blocks, rt->plan_kv_memory());
  if (config.max_num_seqs == 0)
    rt->config_.max_num_seqs = auto_max_num_seqs(config.backend, num_blocks * config.block_size);
  if (config.max_num_seqs == 0 || config.max_num_batched_tokens == 0)
    LOG_INFO("scheduler: --max-num-seqs " << rt->config_.max_num_seqs << (config.max_num_seqs == 0 ? " (chosen)" : "")
                                          << ", --max-num-batched-tokens " << rt->config_.max_num_batched_tokens
                                          << (config.max_num_batched_tokens == 0 ? " (chosen)" : ""));
  rt->config_.async_scheduling = config.async_scheduling.value_or(config.backend == "cuda");
  LOG_INFO("scheduler: asynchronous scheduling " << (*rt->config_.async_scheduling ? "on" : "off")
                                                 << (config.async_scheduling ? "" : " (chosen)"));
  RETURN_IF_ERROR(rt->assemble(num_blocks));
  if (config.lora_enabled()) {
    rt->loras_ = std::make_unique<LoraRegistry>(config.max_loras);
    for (const RuntimeConfig::LoraModule& m : config.lora_modules)
      RETURN_IF_ERROR(rt->load_lora(m.name, m.path).with_context("--lora-modules " + m.name));
  }
  return rt;
}

Status Runtime::open_source() {
  const RuntimeConfig& config = config_;
  if (config.load_format == "dummy") {
    // Refuse a bad context length before minutes of random weights are made.
    const std::string cfg = fs::is_directory(config.model) ? config.model + "/config.json" : config.model;
    ASSIGN_OR_RETURN(const ModelConfig pre, load_hf_config(cfg));
    RETURN_IF_ERROR(check_context_length(pre.max_position_embeddings, config));
    // With --quantization fp8 the dummy weights are made in FP8 directly (as an FP8 checkpoint
    // would hold them), so a 70B shape fits in host memory on its way to the GPU.
    DummySourceOptions dopts;
    dopts.fp8_linear = config.quantization == "fp8";
    ASSIGN_OR_RETURN(source_, open_dummy_source(config.model, dopts));
  } else {
    ASSIGN_OR_RETURN(source_, open_model_source(config.model));
  }
  if (source_->tensors().empty())
    return InvalidArgument(config.model + " has no weights; use --load-format dummy for random weights");
  model_name_ = config.served_model_name.empty() ? fs::path(config.model).filename().string() : config.served_model_name;
  if (model_name_.empty()) model_name_ = fs::path(config.model).parent_path().filename().string();

  // Context length: the model's trained length unless asked otherwise.
  const int64_t trained = source_->config().max_position_embeddings;
  int64_t max_len = config.max_model_len > 0 ? config.max_model_len : trained;
  RETURN_IF_ERROR(check_context_length(trained, config));
  if (max_len > trained) {
    LOG_WARN("max_model_len " << max_len << " exceeds the trained length " << trained
                              << "; quality past it is not guaranteed");
  }
  max_model_len_ = std::min<int64_t>(max_len, 1 << 20);
  return OkStatus();
}

Status Runtime::load_tokenizer() {
  ASSIGN_OR_RETURN(tokenizer_, load_model_tokenizer(*source_));
  std::string tmpl = source_->tokenizer().chat_template;
  if (!config_.chat_template.empty()) {
    if (fs::is_regular_file(config_.chat_template)) {
      ASSIGN_OR_RETURN(tmpl, read_text_file(config_.chat_template, 1 << 20));
    } else {
      tmpl = config_.chat_template;
    }
  }
  if (tmpl.empty() && tokenizer_) tmpl = builtin_llama3_template();
  if (!tmpl.empty()) {
    auto compiled = ChatTemplate::compile(tmpl);
    if (!compiled.ok()) return compiled.status().with_context("chat template");
    chat_template_ = std::make_unique<ChatTemplate>(std::move(*compiled));
  }
  Impl& im = *impl_;
  im.bos_text = source_->tokenizer().bos_token;
  im.eos_text = source_->tokenizer().eos_token;
  if (tokenizer_) {
    const SpecialTokenIds& ids = tokenizer_->special_ids();
    if (im.bos_text.empty() && ids.bos >= 0) im.bos_text = std::string(tokenizer_->token_bytes(ids.bos));
    if (im.eos_text.empty() && ids.eos >= 0) im.eos_text = std::string(tokenizer_->token_bytes(ids.eos));
  }
  return OkStatus();
}

Status Runtime::load_models() {
  const RuntimeConfig& config = config_;
  Impl& im = *impl_;
  // "auto": the activations' precision on each backend: BF16 on GPUs (half the bytes of f32,
  // what the attention kernels read fastest), f32 on the CPU.
  const std::string& kd = config.kv_cache_dtype;
  im.kv_dtype = (kd == "bfloat16" || kd == "bf16" || (kd == "auto" && config.backend == "cuda")) ? DType::kBF16
                : (kd == "fp8" || kd == "fp8_e4m3")                                              ? DType::kF8E4M3
                                                                                                 : DType::kF32;
  const int tp = config.tensor_parallel_size;
  RankBackendOptions ro;
  ro.kind = config.backend;
  ro.size = tp;
  ro.num_threads = tp > 1 ? config.num_threads : 0;
  ro.precision = config.activation_precision == "exact" ? ActivationPrecision::kExact : ActivationPrecision::kFast;
  ro.fp8_attention = resolve_fp8_attention_math(config.fp8_attention_math, config.backend);
  auto backends = make_rank_backends(ro);
  if (!backends.ok()) return backends.status().with_context("--tensor-parallel-size " + std::to_string(tp));
  im.backends = std::move(*backends);
  LlamaModelOptions mopts;
  mopts.max_model_len = max_model_len_;
  // Online FP8: the layers' linear weights are quantized per output channel while loading.
  mopts.weights.quantize_fp8 = config.quantization == "fp8";
  auto model = LlamaModel::create(*source_, rank_pointers(im.backends), mopts);
  if (!model.ok()) return tp > 1 ? model.status().with_context("--tensor-parallel-size " + std::to_string(tp)) : model.status();
  im.model = std::move(*model);
  // LoRA slots take their memory now, before the KV cache is sized from what is left.
  if (config.lora_enabled())
    RETURN_IF_ERROR(im.model->enable_lora(LoraSlotsConfig{config.max_loras, config.max_lora_rank}));
  // Speculative decoding with a draft model: its weights load now (on rank 0), so the memory
  // they take is counted before the KV caches are sized.
  ASSIGN_OR_RETURN(im.spec, parse_speculative_config(config.speculative_config));
  if (im.spec.method == SpecMethod::kDraft) {
    DraftModelOptions dopts;
    dopts.path = im.spec.model;
    dopts.max_model_len = max_model_len_;
    dopts.dummy = config.load_format == "dummy";  // benchmarks: dummy target, dummy draft
    ASSIGN_OR_RETURN(im.draft, load_draft_model(dopts, *im.backends[0], source_->config(), tokenizer_.get()));
  }
  return OkStatus();
}

StatusOr<int64_t> Runtime::plan_kv_memory() const {
  const Impl& im = *impl_;
  KvMemoryInputs in;
  in.block_size = config_.block_size;
  in.max_model_len = max_model_len_;
  in.max_num_seqs = config_.max_num_seqs;
  in.max_num_batched_tokens = config_.max_num_batched_tokens;
  in.kv_cache_memory = config_.kv_cache_memory;
  in.gpu_memory_utilization = config_.gpu_memory_utilization;
  in.tensor_parallel_size = config_.tensor_parallel_size;
  in.block_bytes = im.model->kv_block_bytes(config_.block_size, im.kv_dtype);  // fp8: 1 byte an element
  in.target = &source_->config();
  if (im.draft) {
    in.draft = &im.draft->source->config();
    in.draft_block_bytes = im.draft->kv_block_bytes(config_.block_size, im.kv_dtype);
    in.extra_draft_blocks = config_.max_num_seqs * (im.spec.num_speculative_tokens / config_.block_size + 2);
  }
  return plan_kv_blocks(in, *im.backends[0]);
}

Status Runtime::assemble(int64_t num_blocks) {
  Impl& im = *impl_;
  const RuntimeConfig& config = config_;
  const ModelConfig& mc = source_->config();
  const int tp = config.tensor_parallel_size;
  LlamaExecutorOptions eo;
  eo.decode_graphs = !config.enforce_eager;
  eo.max_graph_batch = config.max_num_seqs;
  eo.op_timing = config.profile_ops;
  ASSIGN_OR_RETURN(im.executor, LlamaExecutor::create(*im.model, KvBlockConfig{num_blocks, config.block_size},
                                                      im.kv_dtype, eo));
  KvScales scales;
  if (im.kv_dtype == DType::kF8E4M3) {
    ASSIGN_OR_RETURN(scales, setup_fp8_kv_scales(*source_, *im.model, *im.executor));
  }
  publish_kv_cache_scales(scales);  // empty: no FP8 scales to export
  const int64_t block_bytes = im.model->kv_block_bytes(config.block_size, im.kv_dtype);
  memory_.kv_num_blocks = num_blocks;
  memory_.kv_block_size = config.block_size;
  memory_.kv_block_bytes = block_bytes * tp;  // every rank's share of the block
  memory_.kv_bytes_per_token = block_bytes * tp / config.block_size;
  memory_.kv_dtype = dtype_name(im.kv_dtype);
  memory_.weight_bytes = loaded_weight_bytes(*source_, config.quantization == "fp8");
  LOG_INFO("model " << model_name_ << ": " << mc.num_layers << " layers, hidden " << mc.hidden_size
                    << ", max_model_len " << max_model_len_ << ", KV cache " << num_blocks << " blocks of "
                    << config.block_size << " tokens, " << dtype_name(im.kv_dtype) << " ("
                    << ((num_blocks * block_bytes) >> 20) << " MiB" << (tp > 1 ? " per rank" : "") << ")"
                    << (tp > 1 ? ", tensor parallel over " + std::to_string(tp) + " " + config.backend + " ranks" : ""));
  EngineConfig ec = engine_config();
  if (im.draft) {
    const int64_t extra = config.max_num_seqs * (im.spec.num_speculative_tokens / config.block_size + 2);
    RETURN_IF_ERROR(create_draft_kv_cache(*im.draft, num_blocks + extra, config.block_size, im.kv_dtype));
    if (im.kv_dtype == DType::kF8E4M3)
      RETURN_IF_ERROR(setup_fp8_kv_scales(*im.draft->source, *im.draft->model, *im.draft->executor).status());
    memory_.draft_weight_bytes = loaded_weight_bytes(*im.draft->source, false);
    memory_.draft_kv_bytes = (num_blocks + extra) * im.draft->kv_block_bytes(config.block_size, im.kv_dtype);
  }
  engine_ = std::make_unique<Engine>(ec, im.executor.get(), im.draft ? im.draft->executor.get() : nullptr);
  if (!config.kv_offload.url.empty()) {
    ASSIGN_OR_RETURN(im.kv_tier, RedisKvTier::create(config.kv_offload, im.executor.get()));
    engine_->set_kv_tier(im.kv_tier.get());
  }
  output_ = std::make_unique<OutputProcessor>(tokenizer_.get());
  async_ = std::make_unique<AsyncEngine>(engine_.get(), output_.get());
  return OkStatus();
}

EngineConfig Runtime::engine_config() const {
  const Impl& im = *impl_;
  const ModelConfig& mc = source_->config();
  EngineConfig ec;
  ec.scheduler.max_num_batched_tokens = config_.max_num_batched_tokens;
  ec.scheduler.max_num_seqs = config_.max_num_seqs;
  ec.scheduler.max_model_len = max_model_len_;
  ec.scheduler.long_prefill_token_threshold = config_.long_prefill_token_threshold;
  ec.scheduler.max_step_ms = config_.max_step_ms;
  ec.scheduler.low_priority_prefill_tokens = config_.low_priority_prefill_tokens;
  ec.scheduler.reserve_whole_length = config_.capacity_policy == "guaranteed-no-evict";
  ec.enable_prefix_caching = config_.enable_prefix_caching;
  ec.async_scheduling = config_.async_scheduling.value_or(false);  // resolved by create()
  for (int64_t e : mc.eos_token_ids) ec.eos_token_ids.push_back(static_cast<int32_t>(e));
  if (tokenizer_) {
    const SpecialTokenIds& ids = tokenizer_->special_ids();
    for (int32_t e : {ids.eos, ids.eot})
      if (e >= 0 && std::find(ec.eos_token_ids.begin(), ec.eos_token_ids.end(), e) == ec.eos_token_ids.end())
        ec.eos_token_ids.push_back(e);
  }
  ec.max_logprobs = config_.max_logprobs;
  ec.model_id = source_->path() + "|" + config_.load_format + "|" + config_.quantization;
  ec.kv_dtype = dtype_name(im.kv_dtype);
  ec.speculative = im.spec;
  if (im.draft) {
    const ModelConfig& dc = im.draft->source->config();
    ec.draft_kv.enable_prefix_caching = config_.enable_prefix_caching;
    // Decode cost follows the weights read: layers x (attention + MLP) + the vocabulary rows.
    auto weights = [](const ModelConfig& c) {
      return static_cast<double>(c.num_layers) * c.hidden_size * (4.0 * c.hidden_size + 3.0 * c.intermediate_size) +
             static_cast<double>(c.vocab_size) * c.hidden_size;
    };
    ec.draft_cost_ratio = weights(dc) / std::max(weights(mc), 1.0);
    ec.draft_kv.salt = kv_cache_salt(im.draft->source->path() + "|draft", dtype_name(im.kv_dtype), "");
  }
  return ec;
}

// FP8 KV: the checkpoint's k_scale/v_scale when it has them, else an online calibration over
// the built-in text (plain, and as a chat when there is a template, so special tokens are
// seen), or over fixed pseudo-random ids when the model has no tokenizer. Never left at 1.0:
// the executor refuses an FP8 cache without scales.
StatusOr<KvScales> Runtime::setup_fp8_kv_scales(const ModelSource& src, LlamaModel& model, LlamaExecutor& exec) {
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
    co.scratch_dtype = model.backend(0).name() == std::string("cpu") ? DType::kF32 : DType::kBF16;
    int64_t n = 0;
    for (const auto& p : prompts) n += static_cast<int64_t>(p.size());
    ASSIGN_OR_RETURN(KvScales cal, calibrate_kv_scales(model, prompts, co));
    LOG_INFO("fp8 kv cache of " << src.path() << ": no k_scale/v_scale in the checkpoint; calibrated on " << n
             << " tokens" << (tokenizer_ ? "" : " (random ids: no tokenizer)") << ", margin " << co.margin);
    scales = std::move(cal);
  }
  RETURN_IF_ERROR(exec.set_kv_scales(scales->k, scales->v));
  LOG_INFO("fp8 kv cache scales (" << scales->source << "): " << format_kv_scales(*scales));
  return *scales;
}

}  // namespace lancet
