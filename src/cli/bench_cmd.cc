// `lancet bench latency|throughput|serve`: benchmarks as users run them against vLLM.
//   latency:    one request at a time; TTFT, TPOT, tok/s (and % of a given roofline).
//   throughput: N requests submitted at once (offline), or the same prompts one by one with
//               --sequential; requests/s and tokens/s.
//   serve:      load against a running server (bench_serve_cmd.cc).
// Results print as a table, or one JSON object with --json.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <numeric>
#include <random>
#include <thread>
#include <unordered_map>

#include <sys/resource.h>

#include "cli/bench_dataset.h"
#include "cli/bench_profile.h"
#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/runtime_flags.h"
#include "core/logging.h"
#include "engine/engine.h"

namespace lancet::cli {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) {
  return std::chrono::duration<double>(Clock::now() - t).count();
}

// The process's peak resident memory (Linux reports ru_maxrss in KiB).
int64_t peak_rss_bytes() {
  struct rusage ru {};
  if (getrusage(RUSAGE_SELF, &ru) != 0) return 0;
  return static_cast<int64_t>(ru.ru_maxrss) * 1024;
}

// Speculative decoding counters of the run (absent when speculation is off): drafted and
// accepted tokens, the acceptance rate, and the k the adaptive policy ended with.
void add_speculation(const EngineStats& st, nlohmann::json* j) {
  if (!st.spec_enabled && st.spec_draft_tokens == 0) return;
  (*j)["speculative"] = {{"num_drafts", st.spec_num_drafts},
                         {"draft_tokens", st.spec_draft_tokens},
                         {"accepted_tokens", st.spec_accepted_tokens},
                         {"acceptance_rate", st.spec_draft_tokens > 0
                                                 ? static_cast<double>(st.spec_accepted_tokens) /
                                                       static_cast<double>(st.spec_draft_tokens)
                                                 : 0.0},
                         {"final_k", st.spec_current_k}};
}

// The engine loop's host work per step (scheduling, block tables, sampling bookkeeping: what
// is not a model pass), totals since the model loaded; and the output thread's work per step
// (detokenization, stop strings, the pushes to the streams), which runs beside the loop.
void add_engine_timing(const EngineStats& st, nlohmann::json* j) {
  if (st.steps == 0) return;
  const double steps = static_cast<double>(st.steps);
  const double host = std::max(st.step_seconds - st.model_seconds, 0.0);
  (*j)["engine"] = {{"steps", st.steps},
                    {"step_ms_mean", 1e3 * st.step_seconds / steps},
                    {"host_ms_per_step", 1e3 * host / steps},
                    {"host_share", st.step_seconds > 0 ? host / st.step_seconds : 0.0},
                    {"output_ms_per_step", 1e3 * st.output_seconds / steps}};
}

void print_engine_timing(const nlohmann::json& j, int width) {
  if (!j.contains("engine")) return;
  const auto& e = j["engine"];
  std::printf("%-*s %.3f ms of %.3f ms per step (%.1f%%); output thread %.3f ms per step\n", width,
              "engine host work", e["host_ms_per_step"].get<double>(), e["step_ms_mean"].get<double>(),
              100.0 * e["host_share"].get<double>(), e["output_ms_per_step"].get<double>());
}

// width: the label column of the report it joins.
void print_speculation(const nlohmann::json& j, int width) {
  if (!j.contains("speculative")) return;
  const auto& s = j["speculative"];
  std::printf("%-*s %lld drafted, %lld accepted (%.1f%%), k now %d\n", width, "speculative",
              static_cast<long long>(s["draft_tokens"].get<int64_t>()),
              static_cast<long long>(s["accepted_tokens"].get<int64_t>()),
              100.0 * s["acceptance_rate"].get<double>(), s["final_k"].get<int>());
}

// Model flags `lancet serve` has, for benchmarks too, unless the shared runtime flags
// (runtime_flags.cc) already define them.
void add_bench_model_flags(CLI::App& app, RuntimeConfig* rc) {
  if (!app.get_option_no_throw("--quantization"))
    app.add_option("--quantization", rc->quantization, "online weight quantization (fp8)");
  if (!app.get_option_no_throw("--gpu-memory-utilization"))
    app.add_option("--gpu-memory-utilization", rc->gpu_memory_utilization,
                   "fraction of GPU memory for weights, activations and KV cache")
        ->capture_default_str();
  app.add_flag("--profile-steps", rc->profile_ops,
               "time every op on the device and report where a step's time goes (steps run eagerly)");
}

// The model's tokenizer as the dataset reader uses it (prompts encoded as the API would).
DatasetTokenizer dataset_tokenizer(Runtime& rt) {
  return DatasetTokenizer{[&rt](const std::string& text) { return rt.encode_prompt(text); }, rt.vocab_size()};
}

// Fresh random prompts of len ids (no prefix-cache hits between calls of different seeds).
StatusOr<std::vector<BenchPrompt>> random_prompts(Runtime& rt, int n, int len, uint64_t seed) {
  DatasetOptions o;
  o.num_prompts = n;
  o.input_len = len;
  o.seed = seed;
  return make_bench_prompts(o, dataset_tokenizer(rt));
}

struct RequestTiming {
  double ttft = 0;
  double e2e = 0;
  int64_t output_tokens = 0;
  std::vector<double> itl;  // inter-token latencies
};

// Submits all prompts at once (or one after another) and waits for every token; each prompt
// with sp (its own output length, when it has one, as max_tokens); with LoRA adapters,
// prompt i is computed with adapter i mod their number.
StatusOr<std::vector<RequestTiming>> run_requests(Runtime& rt, const std::vector<BenchPrompt>& prompts,
                                                  const SamplingParams& sp, bool sequential,
                                                  const std::vector<std::shared_ptr<const LoraRef>>& loras = {}) {
  size_t next = 0;
  auto request = [&](const BenchPrompt& p) {
    GenerationRequest r;
    r.prompt = p.ids;
    r.params = sp;
    if (p.output_len > 0) r.params.max_tokens = p.output_len;
    if (!loras.empty()) r.lora = loras[next++ % loras.size()];
    return r;
  };
  std::vector<RequestTiming> timings(prompts.size());
  std::vector<Clock::time_point> last(prompts.size());
  // Request i's event, read at `now` (TTFT, inter-token gaps and e2e are taken when the events
  // are read; the engine does not wait for the reader).
  auto take = [&](size_t i, const TokenEvent& ev, Clock::time_point t0) {
    if (ev.token < 0) return;
    const auto now = Clock::now();
    if (timings[i].output_tokens == 0) timings[i].ttft = std::chrono::duration<double>(now - t0).count();
    else timings[i].itl.push_back(std::chrono::duration<double>(now - last[i]).count());
    last[i] = now;
    timings[i].output_tokens++;
  };
  if (sequential) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      const auto t0 = Clock::now();
      last[i] = t0;
      ASSIGN_OR_RETURN(auto s, rt.async_engine().submit(request(prompts[i])));
      TokenEvent ev;
      while (s->next(&ev)) take(i, ev, t0);
      timings[i].e2e = std::chrono::duration<double>(last[i] - t0).count();
    }
    return timings;
  }
  std::vector<GenerationRequest> reqs;
  for (const auto& p : prompts) reqs.push_back(request(p));
  // All at once, as vLLM's offline benchmark adds them: the engine takes every request before
  // its next step. One reader for all of them (a StreamGroup), as vLLM's offline engine
  // collects its outputs: not a thread per request woken at every step.
  auto group = std::make_shared<StreamGroup>();
  const auto t0 = Clock::now();
  std::fill(last.begin(), last.end(), t0);
  auto submitted = rt.async_engine().submit_all(reqs, group);
  std::unordered_map<const RequestStream*, size_t> index;
  for (size_t i = 0; i < submitted.size(); ++i) {
    if (!submitted[i].ok()) {
      for (auto& open : submitted)
        if (open.ok()) (*open)->cancel();
      return submitted[i].status();
    }
    index.emplace(submitted[i]->get(), i);
  }
  std::vector<bool> ended(prompts.size(), false);
  size_t open = prompts.size();
  std::vector<std::shared_ptr<RequestStream>> ready;
  TokenEvent ev;
  while (open > 0) {
    group->wait(&ready);
    for (const auto& s : ready) {
      const size_t i = index.at(s.get());
      RequestStream::Wait w;
      while ((w = s->next_until(&ev, Clock::time_point{})) == RequestStream::Wait::kEvent) take(i, ev, t0);
      if (w == RequestStream::Wait::kEnded && !ended[i]) {
        ended[i] = true;
        --open;
        timings[i].e2e = std::chrono::duration<double>(last[i] - t0).count();
      }
    }
  }
  return timings;
}

int bench_throughput(int argc, char** argv) {
  CLI::App app{"Offline throughput: many requests at once", "lancet bench throughput"};
  RuntimeConfig rc;
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.ignore_eos = true;
  int num_prompts = 64, input_len = 128, output_len = 64;
  std::string dataset, dataset_name = "auto";
  int sharegpt_output_len = 0;
  bool json = false, sequential = false;
  uint64_t seed = 0;
  add_runtime_flags(app, &rc);
  add_bench_model_flags(app, &rc);
  rc.allow_forced_acceptance = true;  // benchmarks may force speculative acceptance
  app.add_option("--num-prompts", num_prompts)->capture_default_str();
  app.add_option("--input-len", input_len)->capture_default_str();
  app.add_option("--output-len", output_len)->capture_default_str();
  app.add_option("--dataset", dataset,
                 "prompts file: JSON lines with prompt or prompt_ids (and output_len), or a ShareGPT JSON list");
  app.add_option("--dataset-name", dataset_name, "auto (a file starting with '[' is ShareGPT), jsonl or sharegpt")
      ->capture_default_str();
  app.add_option("--sharegpt-output-len", sharegpt_output_len,
                 "ShareGPT: this output length instead of the second turn's")
      ->capture_default_str();
  app.add_option("--seed", seed)->capture_default_str();
  app.add_option("--temperature", sp.temperature, "0 = greedy (default); vLLM's benchmark samples at 1.0")
      ->capture_default_str();
  app.add_option("--top-p", sp.top_p)->capture_default_str();
  app.add_option("--top-k", sp.top_k, "0 = off")->capture_default_str();
  app.add_flag("--sequential", sequential, "run the same prompts one at a time (the baseline)");
  bool lora_requests = false;
  app.add_flag("--lora-requests", lora_requests,
               "spread the requests over the --lora-modules adapters (request i uses adapter i mod their number)");
  app.add_flag("--json", json);
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  set_log_level(LogLevel::kWarning);
  sp.max_tokens = output_len;
  if (lora_requests && rc.lora_modules.empty()) {
    std::fprintf(stderr, "lancet bench throughput: --lora-requests needs --lora-modules\n");
    return 2;
  }
  auto rt = Runtime::create(rc);
  if (!rt.ok()) {
    std::fprintf(stderr, "lancet bench throughput: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  auto format = parse_dataset_format(dataset_name);
  if (!format.ok()) {
    std::fprintf(stderr, "lancet bench throughput: %s\n", format.status().to_string().c_str());
    return 2;
  }
  DatasetOptions dopt;
  dopt.path = dataset;
  dopt.format = *format;
  dopt.num_prompts = num_prompts;
  dopt.input_len = input_len;
  dopt.fixed_output_len = sharegpt_output_len;
  dopt.seed = seed;
  auto prompts = make_bench_prompts(dopt, dataset_tokenizer(**rt));
  if (!prompts.ok()) {
    std::fprintf(stderr, "lancet bench throughput: %s\n", prompts.status().to_string().c_str());
    return 1;
  }
  std::vector<std::shared_ptr<const LoraRef>> loras;
  if (lora_requests)
    for (const RuntimeConfig::LoraModule& m : rc.lora_modules) loras.push_back((*rt)->find_lora(m.name));
  const auto t0 = Clock::now();
  auto timings = run_requests(**rt, *prompts, sp, sequential, loras);
  const double elapsed = seconds_since(t0);
  if (!timings.ok()) {
    std::fprintf(stderr, "lancet bench throughput: %s\n", timings.status().to_string().c_str());
    return 1;
  }
  int64_t in_tokens = 0, out_tokens = 0;
  for (const auto& p : *prompts) in_tokens += static_cast<int64_t>(p.ids.size());
  for (const auto& t : *timings) out_tokens += t.output_tokens;
  nlohmann::json j = {{"mode", sequential ? "sequential" : "batched"},
                      {"num_prompts", prompts->size()},
                      {"input_tokens", in_tokens},
                      {"output_tokens", out_tokens},
                      {"elapsed_s", elapsed},
                      {"requests_per_s", prompts->size() / elapsed},
                      {"output_tokens_per_s", out_tokens / elapsed},
                      {"total_tokens_per_s", (in_tokens + out_tokens) / elapsed},
                      {"preemptions", (*rt)->async_engine().stats().preemptions},
                      {"lora_adapters", loras.size()}};
  add_speculation((*rt)->async_engine().stats(), &j);
  add_engine_timing((*rt)->async_engine().stats(), &j);
  add_step_profile((*rt)->take_step_profile(), &j);
  add_device_timeline((*rt)->take_device_timeline(), &j);
  if (json) {
    std::printf("%s\n", j.dump().c_str());
  } else {
    std::printf("%-22s %s\n", "mode", j["mode"].get<std::string>().c_str());
    std::printf("%-22s %zu (%lld in / %lld out tokens)\n", "requests", prompts->size(),
                static_cast<long long>(in_tokens), static_cast<long long>(out_tokens));
    std::printf("%-22s %.2f s\n", "elapsed", elapsed);
    std::printf("%-22s %.2f\n", "requests/s", j["requests_per_s"].get<double>());
    std::printf("%-22s %.1f\n", "output tokens/s", j["output_tokens_per_s"].get<double>());
    std::printf("%-22s %.1f\n", "total tokens/s", j["total_tokens_per_s"].get<double>());
    print_speculation(j, 22);
    print_engine_timing(j, 22);
    print_device_timeline(j, 22);
    print_step_profile(j);
  }
  return 0;
}

// The measurement options of bench latency, shared by every context length of one run.
struct LatencyOptions {
  int output_len = 128;
  int iters = 3;
  int warmup = 1;
  int batch_size = 1;
  double weight_gb = 0;
  double bandwidth_tbs = 0;
  bool json = false;
};

// "8192,16384" -> {8192, 16384}; every entry a positive integer.
bool parse_lengths(const std::string& text, std::vector<int>* out) {
  out->clear();
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = std::min(text.find(',', pos), text.size());
    const std::string item = text.substr(pos, comma - pos);
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 9) return false;
    out->push_back(std::stoi(item));
    if (out->back() < 1) return false;
    pos = comma + 1;
  }
  return !out->empty();
}

// One context length: warm-up and measured iterations, then one result (a JSON line or text).
int latency_at(Runtime& rt, const RuntimeConfig& rc, const SamplingParams& sp, int input_len,
               const LatencyOptions& o) {
  std::vector<double> ttft, tpot, e2e;
  const int batch_size = o.batch_size, output_len = o.output_len, iters = o.iters;
  if (o.warmup == 0) {  // nothing from before this length
    rt.take_step_profile();
    rt.take_device_timeline();
  }
  int64_t hits_before = rt.async_engine().stats().prefix_hits;
  for (int it = 0; it < o.warmup + iters; ++it) {
    // Fresh prompts every iteration and every length: no prefix-cache hits (the prompts of one
    // seed share their first ids, so a shorter length's prompt is a longer one's prefix).
    const uint64_t seed = 1000 + static_cast<uint64_t>(it) * batch_size + 1000003ULL * static_cast<uint64_t>(input_len);
    auto prompts = random_prompts(rt, batch_size, input_len, seed);
    if (!prompts.ok()) {
      std::fprintf(stderr, "lancet bench latency: %s\n", prompts.status().to_string().c_str());
      return 2;
    }
    auto t = run_requests(rt, *prompts, sp, /*sequential=*/batch_size == 1);
    if (!t.ok()) {
      std::fprintf(stderr, "lancet bench latency: input length %d: %s\n", input_len, t.status().to_string().c_str());
      return 1;
    }
    if (it + 1 == o.warmup) {
      rt.take_step_profile();  // the profile and the timeline cover the measured iterations
      rt.take_device_timeline();
      hits_before = rt.async_engine().stats().prefix_hits;
    }
    if (it < o.warmup) continue;
    // A batch counts as one measurement: its first tokens are in when the slowest request's
    // is, it ends with the last one, and each request's TPOT is the median's input.
    double it_ttft = 0, it_e2e = 0;
    for (const RequestTiming& r : *t) {
      it_ttft = std::max(it_ttft, r.ttft);
      it_e2e = std::max(it_e2e, r.e2e);
      if (r.output_tokens > 1) tpot.push_back((r.e2e - r.ttft) / static_cast<double>(r.output_tokens - 1));
    }
    ttft.push_back(it_ttft);
    e2e.push_back(it_e2e);
  }
  const double tpot_med = percentile(tpot, 50);
  // Decode rate of the whole batch (one token per request per TPOT).
  const double tok_s = tpot_med > 0 ? batch_size / tpot_med : 0;
  nlohmann::json j = {{"input_len", input_len}, {"output_len", output_len}, {"batch_size", batch_size}, {"iters", iters},
                      {"ttft_s_median", percentile(ttft, 50)}, {"tpot_ms_median", tpot_med * 1e3},
                      {"decode_tok_per_s", tok_s}, {"e2e_s_median", percentile(e2e, 50)}};
  // Memory at this length: what the long-context table (bench/long_context) reports.
  const Runtime::MemoryReport& mem = rt.memory_report();
  const int64_t seq_tokens = static_cast<int64_t>(input_len) + output_len;
  const int64_t seq_blocks = (seq_tokens + mem.kv_block_size - 1) / mem.kv_block_size;
  j["backend"] = rc.backend;
  j["max_model_len"] = rt.max_model_len();
  j["weight_bytes"] = mem.weight_bytes;
  j["kv_cache"] = {{"dtype", mem.kv_dtype},
                   {"num_blocks", mem.kv_num_blocks},
                   {"block_size", mem.kv_block_size},
                   {"bytes", mem.kv_num_blocks * mem.kv_block_bytes},
                   {"bytes_per_token", mem.kv_bytes_per_token},
                   {"bytes_per_seq", seq_blocks * mem.kv_block_bytes}};
  // Sequences of input_len + output_len tokens the cache holds at once (what bounds batching
  // at this context length).
  j["max_concurrent_seqs"] = seq_blocks > 0 ? mem.kv_num_blocks / seq_blocks : 0;
  if (mem.draft_weight_bytes > 0)
    j["draft"] = {{"weight_bytes", mem.draft_weight_bytes}, {"kv_cache_bytes", mem.draft_kv_bytes}};
  j["peak_rss_bytes"] = peak_rss_bytes();
  // Prompt tokens the measured iterations took from the prefix cache (0: every TTFT computed
  // its whole prompt).
  j["prefix_cache_hit_tokens"] = rt.async_engine().stats().prefix_hits - hits_before;
  add_speculation(rt.async_engine().stats(), &j);  // totals since the model loaded (all lengths so far)
  add_engine_timing(rt.async_engine().stats(), &j);  // likewise
  add_step_profile(rt.take_step_profile(), &j);      // this length's measured iterations
  add_device_timeline(rt.take_device_timeline(), &j);
  if (o.weight_gb > 0 && o.bandwidth_tbs > 0) {
    const double roof = o.bandwidth_tbs * 1e3 / o.weight_gb;
    j["roofline_tok_per_s"] = roof;
    j["pct_of_roofline"] = 100.0 * tok_s / roof;
  }
  if (o.json) {
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);  // a later length may fail: this one's result is already out
  } else {
    std::printf("%-18s %d in / %d out, batch %d, %d iterations\n", "request", input_len, output_len, batch_size,
                iters);
    std::printf("%-18s %.3f s\n", "TTFT (median)", j["ttft_s_median"].get<double>());
    std::printf("%-18s %.2f ms\n", "TPOT (median)", j["tpot_ms_median"].get<double>());
    std::printf("%-18s %.1f tok/s\n", "decode", tok_s);
    std::printf("%-18s %.2f GiB weights + %.2f GiB KV per sequence (%s)\n", "memory",
                static_cast<double>(mem.weight_bytes) / (1 << 30),
                static_cast<double>(seq_blocks * mem.kv_block_bytes) / (1 << 30), mem.kv_dtype.c_str());
    std::printf("%-18s %lld blocks of %lld tokens: %lld sequences of %lld tokens\n", "KV cache",
                static_cast<long long>(mem.kv_num_blocks), static_cast<long long>(mem.kv_block_size),
                static_cast<long long>(j["max_concurrent_seqs"].get<int64_t>()), static_cast<long long>(seq_tokens));
    if (j.contains("pct_of_roofline"))
      std::printf("%-18s %.1f%% of %.0f tok/s\n", "roofline", j["pct_of_roofline"].get<double>(),
                  j["roofline_tok_per_s"].get<double>());
    print_speculation(j, 18);
    print_engine_timing(j, 18);
    print_device_timeline(j, 18);
    print_step_profile(j);
  }
  return 0;
}

int bench_latency(int argc, char** argv) {
  CLI::App app{"Latency: one request at a time", "lancet bench latency"};
  RuntimeConfig rc;
  rc.max_num_seqs = 1;
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.ignore_eos = true;
  LatencyOptions o;
  std::string input_lens = "32";
  add_runtime_flags(app, &rc);
  add_bench_model_flags(app, &rc);
  rc.allow_forced_acceptance = true;  // benchmarks may force speculative acceptance
  app.add_option("--input-len", input_lens,
                 "prompt tokens; a comma-separated list measures each length in turn with the model loaded once")
      ->capture_default_str();
  app.add_option("--output-len", o.output_len)->capture_default_str();
  app.add_option("--batch-size", o.batch_size, "requests submitted together each iteration")->capture_default_str();
  app.add_option("--num-iters", o.iters)->capture_default_str();
  app.add_option("--num-iters-warmup", o.warmup)->capture_default_str();
  app.add_option("--roofline-weight-gb", o.weight_gb, "bytes read per token (GB), for % of roofline");
  app.add_option("--roofline-bandwidth-tbs", o.bandwidth_tbs, "memory bandwidth (TB/s), for % of roofline");
  app.add_flag("--json", o.json);
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  set_log_level(LogLevel::kWarning);
  sp.max_tokens = o.output_len;
  std::vector<int> lengths;
  if (!parse_lengths(input_lens, &lengths)) {
    std::fprintf(stderr, "lancet bench latency: --input-len takes positive integers separated by commas, not '%s'\n",
                 input_lens.c_str());
    return 2;
  }
  if (o.batch_size < 1 || o.output_len < 1 || o.iters < 1 || o.warmup < 0) {
    std::fprintf(stderr,
                 "lancet bench latency: --batch-size, --output-len and --num-iters must be at least 1, "
                 "--num-iters-warmup at least 0\n");
    return 2;
  }
  const int longest = *std::max_element(lengths.begin(), lengths.end());
  rc.max_num_seqs = std::max<int64_t>(rc.max_num_seqs, o.batch_size);
  // Unless given, the step budget grows to the prompt (up to 16384) so TTFT is one prefill;
  // a budget given on the command line is kept (it bounds the activations at long context).
  if (rc.max_num_batched_tokens < longest && app.count("--max-num-batched-tokens") == 0)
    rc.max_num_batched_tokens = std::max<int64_t>(rc.max_num_batched_tokens, std::min(longest, 16384));
  auto rt = Runtime::create(rc);
  if (!rt.ok()) {
    std::fprintf(stderr, "lancet bench latency: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  for (int len : lengths)
    if (int rc_len = latency_at(**rt, rc, sp, len, o); rc_len != 0) return rc_len;
  return 0;
}

}  // namespace

int cmd_bench(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: lancet bench latency|throughput|serve [options]\n");
    return 2;
  }
  const std::string sub = argv[1];
  if (sub == "throughput") return bench_throughput(argc - 1, argv + 1);
  if (sub == "latency") return bench_latency(argc - 1, argv + 1);
  if (sub == "serve") return cmd_bench_serve(argc - 1, argv + 1);
  std::fprintf(stderr, "lancet bench: unknown benchmark '%s' (latency, throughput, serve)\n", sub.c_str());
  return 2;
}

}  // namespace lancet::cli
