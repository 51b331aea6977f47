// A serving load generator in the manner of `vllm bench serve`: C clients keep one streaming
// /v1/completions request each in flight until N prompts are done; each prompt is I random
// token ids and asks for exactly O tokens (ignore_eos). Per request it records TTFT, the gaps
// between streamed chunks (ITL) and the end-to-end time; the report gives mean / median / p99
// of TTFT, TPOT and ITL, request and token throughput.
// With background_input_len N > 0, one more request with an N-token prompt is sent at the
// start, alongside the short streams: the latency a long prefill adds to everyone else's
// decoding (the short streams' ITL p99) is what it measures. Its own timings are reported
// apart and left out of every short-stream figure.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "server/openai_json.h"

namespace lancet::server {

struct ServeBenchConfig {
  std::string url = "http://127.0.0.1:8000";
  std::string model;    // "" = ask /v1/models
  std::string api_key;
  int32_t concurrency = 8;
  int32_t num_prompts = 64;
  int32_t input_len = 128;
  int32_t output_len = 128;
  int32_t max_token_id = 1000;  // prompt ids are drawn from [10, max_token_id)
  uint64_t seed = 0;
  double timeout_s = 600;
  int32_t background_input_len = 0;   // 0 = no background request
  int32_t background_output_len = 1;
};

struct LatencySummary {
  double mean_ms = 0, median_ms = 0, p99_ms = 0;
  int64_t count = 0;  // samples
};

// The long background request, timed on its own.
struct BackgroundResult {
  bool completed = false;
  std::string error;
  int64_t prompt_tokens = 0, output_tokens = 0;
  double ttft_ms = 0, e2el_ms = 0;
  // The short streams' ITL gaps that overlap the background's prefill (from its send to its
  // first token): the stalls a long prompt causes.
  LatencySummary itl_during_prefill;
};

struct ServeBenchResult {
  int64_t completed = 0;
  int64_t failed = 0;
  std::vector<std::string> errors;  // first few failures
  double duration_s = 0;  // from the start to the last short stream's end
  int64_t total_input_tokens = 0;
  int64_t total_output_tokens = 0;
  double request_throughput = 0;        // req/s
  double output_throughput = 0;         // output tok/s
  double total_token_throughput = 0;    // (input + output) tok/s
  LatencySummary ttft, tpot, itl, e2el;  // short streams only
  bool has_background = false;
  BackgroundResult background;
};

StatusOr<ServeBenchResult> run_serve_benchmark(const ServeBenchConfig& config);
Json serve_bench_json(const ServeBenchConfig& config, const ServeBenchResult& result);
std::string serve_bench_table(const ServeBenchResult& result);
// Mean, median and p99 (nearest rank) of samples in seconds, reported in milliseconds.
LatencySummary summarize_ms(std::vector<double> seconds);

}  // namespace lancet::server
