// Runtime: everything a front end needs to serve one model, assembled from one validated
// config: the model source, tokenizer, chat template, backend, Llama model, KV cache, the
// Engine, the output side (detokenization, stop strings) and the AsyncEngine loop that joins
// them. `lancet serve`, `run`, `generate` and the benchmarks all start from here, so they agree
// on defaults and validation. The assembly is the only layer that knows both the tokenizer and
// the engine: the engine below it works on token ids.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "core/status.h"
#include "engine/async_engine.h"
#include "engine/engine.h"
#include "io/model_source.h"
#include "kv_tier/redis_kv_tier.h"
#include "output/output_processor.h"
#include "runner/kv_calibration.h"
#include "runner/llama_executor.h"
#include "runtime/lora_registry.h"
#include "tokenizer/chat_template/chat_template.h"
#include "tokenizer/tokenizer.h"

namespace lancet {

struct RuntimeConfig {
  std::string model;                 // HF dir, config.json (with load_format dummy) or .gguf
  std::string served_model_name;     // "" = the model path's base name
  std::string backend = "cpu";       // "cpu" or "cuda"
  std::string load_format = "auto";  // "auto" or "dummy" (random weights of the config's shape)
  int64_t max_model_len = 0;         // 0 = the model's trained context length
  bool allow_long_max_model_len = false;  // permit max_model_len past the trained length
  int32_t block_size = 16;
  int64_t kv_cache_memory = 0;       // bytes for the KV cache; 0 = automatic
  double gpu_memory_utilization = 0.9;
  // 0 = chosen at start (runtime/batch_limits.h; printed): on a GPU as many sequences as the KV
  // cache holds at 2048 tokens each (64 to 1024) and 8192 tokens per step, on the CPU 64 and
  // 2048. Runtime::config() holds the chosen values.
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
  int64_t long_prefill_token_threshold = 0;  // most prompt tokens one sequence computes per step; 0 = budget
  // A time budget per step (ms; 0 = none): prompt chunks cut to what the measured step costs
  // say fits beside the step's decodes (SchedulerConfig::max_step_ms).
  double max_step_ms = 0;
  // Prompt tokens per step of all low-priority (batch) sequences together; 0 = no cap.
  int64_t low_priority_prefill_tokens = 0;
  // Admission when the KV cache fills (SchedulerConfig::reserve_whole_length):
  // "max-utilization" admits while the next chunk fits and preempts (recompute) when blocks run
  // out; "guaranteed-no-evict" admits only what the cache holds to every sequence's whole length.
  std::string capacity_policy = "max-utilization";
  bool enable_prefix_caching = true;
  // Schedule and prepare step N+1 while the device runs step N (EngineConfig::async_scheduling).
  // Unset: on with the CUDA backend (same tokens, 3-4% more throughput on an H200,
  // docs/BENCHMARKS.md run R), off on the CPU, whose steps run on the thread that would
  // prepare the next one.
  std::optional<bool> async_scheduling;
  std::string chat_template;         // a file path or the template text; "" = the model's
  std::string kv_cache_dtype = "auto";
  std::string quantization;          // "" or "fp8" (online quantization)
  int num_threads = 0;               // CPU threads; 0 = all cores
  // Benchmarks may force speculative acceptance (SpeculativeConfig::force_acceptance_rate);
  // serving never does.
  bool allow_forced_acceptance = false;
  bool enforce_eager = false;        // no decode graphs (CUDA): every kernel launched each step
  // Time every op of the target model on the device, by kind (Runtime::take_step_profile);
  // the steps then run eagerly and a little slower. For benchmarks (--profile-steps).
  bool profile_ops = false;
  std::string activation_precision = "fast";  // "fast" (bf16 GEMM inputs) or "exact" (backend.h)
  // Attention over an FP8 KV cache: "f16" (E4M3 widened, 16-bit Q), "e4m3" (prompt chunks
  // round Q to E4M3 per row for FP8 Q K^T), "e4m3x2" (Q as two E4M3 terms, two FP8 products),
  // "e4m3-pv" (P in E4M3 too, FP8 P V; backend.h Fp8AttentionMath), "e4m3x2-pv" (both) or
  // "auto" (resolve_fp8_attention_math).
  std::string fp8_attention_math = "auto";
  int32_t max_logprobs = 20;
  // Parse special-token strings inside chat message content too (what HF's
  // apply_chat_template(tokenize=True) does). Off: users cannot inject control tokens.
  bool special_tokens_in_content = false;
  // Speculative decoding, vLLM's --speculative-config JSON (engine/speculative_config.h);
  // "" = off.
  std::string speculative_config;
  // GPUs (or, with the cpu backend, simulated ranks) the model is split over: Megatron-style
  // tensor parallelism, one thread driving every rank (model/llama_model.h). 1 = no split.
  int tensor_parallel_size = 1;
  // The shared prefix-KV tier in Redis (--kv-offload; kv_tier/redis_kv_tier.h); url "" = off.
  KvOffloadConfig kv_offload;
  // LoRA adapters (PEFT folders) served by name: those of lora_modules from the start, others
  // loaded at run time (load_lora). Slots for max_loras adapters of rank <= max_lora_rank are
  // reserved when enable_lora is set or lora_modules is not empty.
  bool enable_lora = false;
  struct LoraModule {
    std::string name, path;
  };
  std::vector<LoraModule> lora_modules;
  int64_t max_loras = 4;
  int64_t max_lora_rank = 64;
  bool lora_enabled() const { return enable_lora || !lora_modules.empty(); }

  Status validate() const;
};

// The attention math --fp8-attention-math names on a backend ("cpu" or "cuda"). "auto": the
// two-term E4M3 query on CUDA (a 16-bit query's precision at a BF16 cache's speed in the sm_90a
// prompt kernel; docs/FP8.md), f16 on the CPU, whose kernels compute in f32 and would only pay
// for emulating it.
Fp8AttentionMath resolve_fp8_attention_math(const std::string& flag, const std::string& backend);

class Runtime {
 public:
  static StatusOr<std::unique_ptr<Runtime>> create(const RuntimeConfig& config);
  ~Runtime();

  const RuntimeConfig& config() const { return config_; }
  const ModelConfig& model_config() const { return source_->config(); }
  const std::string& model_name() const { return model_name_; }
  int64_t max_model_len() const { return max_model_len_; }
  int64_t vocab_size() const { return source_->config().vocab_size; }

  // Null when the checkpoint ships no tokenizer (prompts must then be token ids).
  const Tokenizer* tokenizer() const { return tokenizer_.get(); }
  bool has_chat_template() const { return chat_template_ != nullptr; }
  // The chat template's source ("" without one); the server checks it for tool support.
  std::string chat_template_source() const { return chat_template_ ? chat_template_->source() : std::string(); }

  // Prompt text -> ids, with the model's BOS when it wants one. Special-token strings in
  // the text are plain text unless parse_special.
  StatusOr<std::vector<int32_t>> encode_prompt(const std::string& text, bool parse_special = false) const;
  // Messages (OpenAI shape) -> prompt text through the chat template, and -> ids. Special
  // tokens that the template writes are parsed; the same strings inside message content are
  // encoded as plain text (see docs/TOKENIZER.md).
  StatusOr<std::string> render_chat(const nlohmann::ordered_json& messages,
                                    const ChatTemplateOptions& options) const;
  StatusOr<std::vector<int32_t>> encode_chat(const nlohmann::ordered_json& messages,
                                             const ChatTemplateOptions& options) const;
  // Text of one token id (for logprobs): its decoded bytes, possibly a partial character.
  std::string token_text(int32_t id) const;

  // The engine runs on its own thread; everything goes through the AsyncEngine (thread-safe),
  // whose events carry their text (the output processor runs in its loop).
  AsyncEngine& async_engine() { return *async_; }

  // Memory, for reports (bench latency, the long-context table): the KV cache's blocks and
  // bytes (K and V of every layer), and the weights' bytes as loaded (after --quantization).
  struct MemoryReport {
    int64_t kv_num_blocks = 0;
    int64_t kv_block_size = 0;     // tokens per block
    int64_t kv_block_bytes = 0;    // one block, all layers, K and V
    int64_t kv_bytes_per_token = 0;
    int64_t weight_bytes = 0;
    std::string kv_dtype;
    // Speculative decoding with a draft model: its weights and its KV cache (from the same
    // budget as the target's); 0 without one.
    int64_t draft_weight_bytes = 0;
    int64_t draft_kv_bytes = 0;
  };
  const MemoryReport& memory_report() const { return memory_; }

  // With profile_ops: the target's op times by kind since the last call, and starts over
  // (zero without profile_ops). Any thread.
  StepProfile take_step_profile();
  // The target's asynchronous steps since the last call: device busy time per step and the gaps
  // in which the device waited for the host between steps (runner/device_timeline.h), and
  // starts over. Empty where steps run at launch (several ranks, profile_ops). Any thread.
  DeviceTimelineStats take_device_timeline();

  // LoRA adapters (RuntimeConfig::lora_modules, load_lora). find_lora: the adapter served as
  // `name`, null when there is none (a request's model name that is no adapter).
  bool lora_enabled() const;
  std::shared_ptr<const LoraRef> find_lora(const std::string& name) const;
  std::vector<LoraRegistry::Entry> lora_adapters() const;
  // Loads the PEFT adapter at `path` into a free slot (on the engine's loop, between steps)
  // and serves it as `name`: InvalidArgument for a bad adapter, a name in use or the base
  // model's name, ResourceExhausted when every slot is held, FailedPrecondition without LoRA.
  Status load_lora(const std::string& name, const std::string& path);
  // Stops serving `name`; requests already running with it finish with it.
  Status unload_lora(const std::string& name);

  // The shared prefix-KV tier, null without --kv-offload.
  RedisKvTier* kv_offload() const;
  // The tier's keys of the full blocks of `tokens`, in order (empty without --kv-offload):
  // for tools that inspect or drop a prompt's entries.
  std::vector<std::string> kv_offload_keys(std::span<const int32_t> tokens) const;

 private:
  Runtime() = default;
  // create(), in order: the checkpoint (source, name, context length); the tokenizer and chat
  // template; the ranks' backends, the model and the draft model; the KV memory budget; then
  // the executor, its FP8 KV scales and the engine.
  Status open_source();
  Status load_tokenizer();
  Status load_models();
  StatusOr<int64_t> plan_kv_memory() const;
  Status assemble(int64_t num_blocks);
  EngineConfig engine_config() const;
  // FP8 KV cache: the checkpoint's scales or an online calibration, set on every rank of
  // `exec` (the target's, or the draft model's, which shares the tokenizer).
  StatusOr<KvScales> setup_fp8_kv_scales(const ModelSource& src, LlamaModel& model, LlamaExecutor& exec);
  struct Impl;
  RuntimeConfig config_;
  std::unique_ptr<ModelSource> source_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ChatTemplate> chat_template_;
  std::string model_name_;
  int64_t max_model_len_ = 0;
  MemoryReport memory_;
  std::unique_ptr<Impl> impl_;  // the ranks' backends, the model, its executor (KV buffers), the draft
  std::unique_ptr<Engine> engine_;
  std::unique_ptr<OutputProcessor> output_;  // over tokenizer_
  std::unique_ptr<AsyncEngine> async_;
  std::unique_ptr<LoraRegistry> loras_;  // null without LoRA
};

}  // namespace lancet
