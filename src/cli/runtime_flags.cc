// Shared engine and sampling flags.
#include "cli/runtime_flags.h"

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace lancet::cli {

StatusOr<RuntimeConfig::LoraModule> parse_lora_module(const std::string& spec) {
  RuntimeConfig::LoraModule m;
  if (!spec.empty() && spec.front() == '{') {
    const nlohmann::json j = nlohmann::json::parse(spec, nullptr, /*allow_exceptions=*/false);
    if (j.is_discarded() || !j.is_object() || !j.contains("name") || !j.contains("path") || !j["name"].is_string() ||
        !j["path"].is_string())
      return InvalidArgument("'" + spec + "' is not {\"name\": string, \"path\": string}");
    m.name = j["name"].get<std::string>();
    m.path = j["path"].get<std::string>();
  } else {
    const size_t eq = spec.find('=');
    if (eq == std::string::npos) return InvalidArgument("'" + spec + "' is not name=PATH");
    m.name = spec.substr(0, eq);
    m.path = spec.substr(eq + 1);
  }
  if (m.name.empty() || m.path.empty()) return InvalidArgument("'" + spec + "' needs both a name and a path");
  return m;
}

void add_runtime_flags(CLI::App& app, RuntimeConfig* c) {
  app.add_option("--model,-m", c->model, "HF model directory, config.json (with --load-format dummy) or .gguf")
      ->required();
  app.add_option("--backend", c->backend, "cpu or cuda")->capture_default_str();
  app.add_option("--load-format", c->load_format, "auto, or dummy for random weights")->capture_default_str();
  app.add_option("--max-model-len", c->max_model_len, "context length (default: the model's)");
  app.add_flag("--allow-long-max-model-len", c->allow_long_max_model_len,
               "allow --max-model-len past the model's trained length");
  app.add_option("--block-size", c->block_size, "KV cache block size in tokens")->capture_default_str();
  app.add_option("--kv-cache-memory", c->kv_cache_memory, "KV cache bytes (default: automatic)");
  app.add_option("--gpu-memory-utilization", c->gpu_memory_utilization,
                 "CUDA: share of GPU memory to use (the KV cache gets what the weights leave)")
      ->capture_default_str();
  app.add_flag("--enforce-eager", c->enforce_eager, "launch every kernel each step (no CUDA graphs for decode)");
  app.add_option("--activation-precision", c->activation_precision,
                 "GPU GEMM inputs: fast (bf16) or exact (bf16 hi+lo, twice the tensor-core work)")
      ->capture_default_str();
  app.add_option("--fp8-attention-math", c->fp8_attention_math,
                 "FP8 KV cache: f16 (E4M3 widened, 16-bit query), e4m3 (prompt chunks round the query to "
                 "E4M3 for FP8 Q K^T on sm_90a), e4m3x2 (the query as two E4M3 terms, two FP8 Q K^T products), "
                 "e4m3-pv (P rounded to E4M3 too, FP8 P V), e4m3x2-pv (the two-term query and FP8 P V) or auto "
                 "(e4m3x2 on cuda, f16 on cpu; docs/FP8.md)")
      ->capture_default_str();
  app.add_option("--max-num-seqs", c->max_num_seqs, "sequences per step")->capture_default_str();
  app.add_option("--max-num-batched-tokens", c->max_num_batched_tokens, "tokens per step (chunked prefill)")
      ->capture_default_str();
  app.add_option("--long-prefill-token-threshold", c->long_prefill_token_threshold,
                 "most tokens one prompt computes per step, leaving room for new requests (0 = the whole budget)")
      ->capture_default_str();
  app.add_option("--max-step-ms", c->max_step_ms,
                 "time budget per step in ms: prompt chunks are cut to what the measured step costs say fits "
                 "beside the decodes, bounding the streams' inter-token gaps during long prefills (0 = off)")
      ->capture_default_str();
  app.add_option("--capacity-policy", c->capacity_policy,
                 "when the KV cache fills: max-utilization (admit while the next chunk fits; preempt and "
                 "recompute the newest when blocks run out) or guaranteed-no-evict (admit only what the cache "
                 "holds to every sequence's prompt + max_tokens; new requests wait instead)")
      ->check(CLI::IsMember({"max-utilization", "guaranteed-no-evict"}))
      ->capture_default_str();
  app.add_flag("--enable-prefix-caching,!--no-enable-prefix-caching", c->enable_prefix_caching,
               "reuse KV blocks of shared prompt prefixes (default on)");
  app.add_option("--kv-offload", c->kv_offload.url,
                 "share full KV blocks with other replicas through Redis: redis://HOST:PORT[/DB] or "
                 "unix:///PATH[?db=DB] (docs/KV_OFFLOAD.md)");
  app.add_option("--kv-offload-max-bytes", c->kv_offload.max_bytes,
                 "set the Redis server's maxmemory to this and its policy to allkeys-lru (0 = leave the server's)")
      ->capture_default_str();
  app.add_option("--kv-offload-timeout-ms", c->kv_offload.timeout_ms,
                 "Redis connect/command timeout, and the most one admission spends fetching blocks")
      ->capture_default_str();
  app.add_option("--kv-offload-queue-bytes", c->kv_offload.queue_bytes,
                 "blocks waiting to be written to Redis, at most (more are dropped)")
      ->capture_default_str();
  // Given: on or off (--async-scheduling=false too, as a config file writes it); absent: by backend.
  app.add_flag_function(
      "--async-scheduling,!--no-async-scheduling", [c](int64_t count) { c->async_scheduling = count > 0; },
      "schedule and prepare the next step while the device runs the current one; tokens reach the host one step "
      "later (default: on with --backend cuda, off on the CPU)");
  app.add_option("--chat-template", c->chat_template, "chat template file or text (default: the model's)");
  app.add_option("--kv-cache-dtype", c->kv_cache_dtype, "auto, float32, bfloat16 or fp8 (fp8_e4m3: E4M3 with per-layer K/V scales from the checkpoint, else calibrated at start)")->capture_default_str();
  app.add_option("--quantization", c->quantization,
                 "fp8: quantize the layers' linear weights to FP8 E4M3 (per-channel scales) at load");
  app.add_option("--threads", c->num_threads, "CPU threads (default: all cores)");
  app.add_option("--tensor-parallel-size", c->tensor_parallel_size,
                 "split the model over this many GPUs (NCCL; rank r on GPU r), or simulated CPU ranks")
      ->capture_default_str();
  app.add_option("--speculative-config", c->speculative_config,
                 "speculative decoding, JSON as vLLM: {\"method\": \"draft\", \"model\": PATH, "
                 "\"num_speculative_tokens\": k} or {\"method\": \"ngram\", \"num_speculative_tokens\": k, "
                 "\"prompt_lookup_min\": 2, \"prompt_lookup_max\": 4}");
  app.add_flag("--enable-lora", c->enable_lora,
               "reserve LoRA adapter slots (--max-loras) even with no --lora-modules, for adapters loaded at run time");
  app.add_option_function<std::vector<std::string>>(
         "--lora-modules",
         [c](const std::vector<std::string>& specs) {
           for (const std::string& spec : specs) {
             auto m = parse_lora_module(spec);
             if (!m.ok()) throw CLI::ValidationError("--lora-modules", m.status().message());
             c->lora_modules.push_back(*m);
           }
         },
         "PEFT LoRA adapters served under their own model names: name=PATH (or vLLM's JSON "
         "{\"name\": ..., \"path\": ...}), several allowed")
      ->expected(1, -1);
  app.add_option("--max-loras", c->max_loras, "LoRA adapters resident at once (slots)")->capture_default_str();
  app.add_option("--max-lora-rank", c->max_lora_rank, "the largest LoRA rank an adapter may have")
      ->capture_default_str();
  app.add_flag("--special-tokens-in-content", c->special_tokens_in_content,
               "parse special-token strings inside chat messages (HF behaviour; default: plain text)");
}

void add_sampling_flags(CLI::App& app, SamplingParams* p, int64_t* seed) {
  app.add_option("--max-tokens", p->max_tokens, "tokens to generate")->capture_default_str();
  app.add_option("--temperature", p->temperature, "0 = greedy")->capture_default_str();
  app.add_option("--top-p", p->top_p)->capture_default_str();
  app.add_option("--top-k", p->top_k, "0 = off")->capture_default_str();
  app.add_option("--min-p", p->min_p)->capture_default_str();
  app.add_option("--repetition-penalty", p->repetition_penalty)->capture_default_str();
  app.add_option("--presence-penalty", p->presence_penalty)->capture_default_str();
  app.add_option("--frequency-penalty", p->frequency_penalty)->capture_default_str();
  app.add_option("--seed", *seed, "sampling seed (-1 = random)")->capture_default_str();
  app.add_flag("--ignore-eos", p->ignore_eos, "keep generating past end-of-sequence tokens");
}

}  // namespace lancet::cli
