// Prometheus text exposition (format 0.0.4) of the server's metrics; names follow vLLM.
#include "server/metrics.h"

#include <algorithm>
#include <charconv>

#include "runner/kv_calibration.h"

namespace lancet::server {
namespace {

// vLLM's bucket boundaries for the latency histograms.
const std::vector<double> kTtftBuckets = {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5,
                                          0.75,  1.0,   2.5,  5.0,  7.5,  10.0, 20.0, 40.0, 80.0, 160.0};
const std::vector<double> kItlBuckets = {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5,
                                         0.75, 1.0,   2.5,  5.0,   7.5, 10.0, 20.0, 40.0, 80.0};
// Guard time per request: tens of microseconds for typical prompts, up to a millisecond.
const std::vector<double> kGuardBuckets = {0.00001, 0.000025, 0.00005, 0.0001, 0.00025, 0.0005,
                                           0.001,   0.0025,   0.005,   0.01,   0.025};
const std::vector<double> kE2eBuckets = {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0,
                                         20.0, 30.0, 40.0, 50.0, 60.0, 120.0, 240.0, 480.0, 960.0};
const std::vector<double> kParamsNBuckets = {1, 2, 5, 10, 20};
const std::vector<double> kTokenBuckets = {1, 2, 5, 10, 20, 50, 100, 200, 500, 1000, 2000, 5000, 10000,
                                           20000, 50000, 100000, 200000};

// Shortest text that reads back as the same double ("0.04", not "0.040000000000000001").
std::string num(double v) {
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof(buf), v);
  return std::string(buf, res.ptr);
}

std::string escape_label(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out;
}

void header(std::string* out, const std::string& name, const char* type, const char* help) {
  *out += "# HELP " + name + " " + help + "\n# TYPE " + name + " " + type + "\n";
}

void sample(std::string* out, const std::string& name, const std::string& labels, double v) {
  *out += name + "{" + labels + "} " + num(v) + "\n";
}

}  // namespace

void render_histogram(const Histogram& h, const std::string& name, const std::string& labels, std::string* out) {
  uint64_t cum = 0;
  for (size_t i = 0; i < h.bounds().size(); ++i) {
    cum += h.counts()[i];
    *out += name + "_bucket{" + labels + ",le=\"" + num(h.bounds()[i]) + "\"} " + std::to_string(cum) + "\n";
  }
  *out += name + "_bucket{" + labels + ",le=\"+Inf\"} " + std::to_string(h.count()) + "\n";
  *out += name + "_sum{" + labels + "} " + num(h.sum()) + "\n";
  *out += name + "_count{" + labels + "} " + std::to_string(h.count()) + "\n";
}

Metrics::Metrics()
    : ttft_(kTtftBuckets),
      itl_(kItlBuckets),
      tpot_(kItlBuckets),
      e2e_(kE2eBuckets),
      prompt_len_(kTokenBuckets),
      gen_len_(kTokenBuckets),
      queue_(kE2eBuckets),
      prefill_(kE2eBuckets),
      decode_(kE2eBuckets),
      inference_(kE2eBuckets),
      params_n_(kParamsNBuckets),
      params_max_tokens_(kTokenBuckets),
      guard_time_(kGuardBuckets),
      guard_model_time_(kE2eBuckets) {}

void Metrics::count_guard_match(const std::string& rule, const char* action, const char* where) {
  std::lock_guard<std::mutex> lock(mu_);
  // Rule ids come from the operator's file; quotes and backslashes are escaped for Prometheus.
  std::string id;
  for (char c : rule) {
    if (c == '"' || c == '\\') id += '\\';
    id += c == '\n' ? ' ' : c;
  }
  ++guard_matches_["rule=\"" + id + "\",action=\"" + action + "\",where=\"" + where + "\""];
}

void Metrics::observe_guard_seconds(double s) {
  std::lock_guard<std::mutex> lock(mu_);
  guard_time_.observe(s);
}

void Metrics::count_guard_model(const char* verdict, const std::vector<std::string>& categories, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  ++guard_model_verdicts_[verdict];
  for (const std::string& c : categories) ++guard_model_categories_[escape_label(c)];
  guard_model_time_.observe(seconds);
}

void Metrics::record(const RequestObservation& obs) {
  std::lock_guard<std::mutex> lock(mu_);
  if (obs.ttft_s >= 0) ttft_.observe(obs.ttft_s);
  for (double g : obs.itl_s) itl_.observe(g);
  if (obs.generation_tokens > 1 && obs.ttft_s >= 0)
    tpot_.observe((obs.e2e_s - obs.ttft_s) / static_cast<double>(obs.generation_tokens - 1));
  e2e_.observe(obs.e2e_s);
  prompt_len_.observe(static_cast<double>(obs.prompt_tokens));
  gen_len_.observe(static_cast<double>(obs.generation_tokens));
  if (obs.queue_s >= 0) queue_.observe(obs.queue_s);
  if (obs.prefill_s >= 0) prefill_.observe(obs.prefill_s);
  if (obs.decode_s >= 0) decode_.observe(obs.decode_s);
  if (obs.inference_s >= 0) inference_.observe(obs.inference_s);
  params_n_.observe(static_cast<double>(obs.params_n));
  params_max_tokens_.observe(static_cast<double>(obs.params_max_tokens));
  prompt_tokens_ += obs.prompt_tokens;
  generation_tokens_ += obs.generation_tokens;
  ++finished_[obs.finish_reason.empty() ? "unknown" : obs.finish_reason];
}

void Metrics::count_http_error(int status) {
  std::lock_guard<std::mutex> lock(mu_);
  ++http_errors_[status];
}

std::string Metrics::render(const std::string& model_name, const EngineStats& st, int64_t http_in_flight) const {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string l = "model_name=\"" + escape_label(model_name) + "\"";
  std::string out;
  auto gauge = [&](const char* name, const char* help, double v) {
    header(&out, name, "gauge", help);
    sample(&out, name, l, v);
  };
  auto counter = [&](const char* name, const char* help, double v) {
    header(&out, name, "counter", help);
    sample(&out, name, l, v);
  };
  gauge("vllm:num_requests_running", "Number of requests in model execution batches.",
        static_cast<double>(st.num_running));
  gauge("vllm:num_requests_waiting", "Number of requests waiting to be processed.",
        static_cast<double>(st.num_waiting));
  gauge("vllm:kv_cache_usage_perc", "KV-cache usage. 1 means 100 percent usage.", st.kv_usage);
  gauge("vllm:gpu_cache_usage_perc", "KV-cache usage (older name). 1 means 100 percent usage.", st.kv_usage);
  gauge("lancet:kv_cache_blocks", "Number of KV-cache blocks.", static_cast<double>(st.num_blocks));
  gauge("lancet:kv_cache_free_blocks", "Number of free KV-cache blocks.", static_cast<double>(st.num_free_blocks));
  gauge("lancet:http_requests_in_flight", "Completion requests being served over HTTP.",
        static_cast<double>(http_in_flight));
  counter("vllm:prefix_cache_queries_total", "Prefix cache queries, in tokens.",
          static_cast<double>(st.prefix_queries));
  counter("vllm:prefix_cache_hits_total", "Prefix cache hits, in tokens.", static_cast<double>(st.prefix_hits));
  counter("vllm:num_preemptions_total", "Cumulative number of preemptions.", static_cast<double>(st.preemptions));
  counter("vllm:prompt_tokens_total", "Number of prefill tokens of finished requests.",
          static_cast<double>(prompt_tokens_));
  counter("vllm:generation_tokens_total", "Number of generation tokens of finished requests.",
          static_cast<double>(generation_tokens_));
  counter("lancet:engine_steps_total", "Engine steps run.", static_cast<double>(st.steps));
  counter("lancet:engine_step_seconds_total", "Wall seconds in engine steps.", st.step_seconds);
  counter("lancet:engine_model_seconds_total", "Wall seconds of engine steps spent in model passes (target and draft).",
          st.model_seconds);
  // The shared prefix-KV tier (--kv-offload), in blocks; zero without it.
  const KvTierStats& kt = st.kv_offload;
  counter("lancet:kv_offload_queries_total", "KV-offload tier blocks looked up.", static_cast<double>(kt.queried_blocks));
  counter("lancet:kv_offload_hits_total", "KV-offload tier blocks loaded instead of computed.",
          static_cast<double>(kt.hit_blocks));
  counter("lancet:kv_offload_fetched_bytes_total", "Bytes of KV-offload entries loaded.",
          static_cast<double>(kt.fetched_bytes));
  counter("lancet:kv_offload_stored_total", "Blocks written to the KV-offload tier.", static_cast<double>(kt.stored_blocks));
  counter("lancet:kv_offload_stored_bytes_total", "Bytes written to the KV-offload tier.",
          static_cast<double>(kt.stored_bytes));
  counter("lancet:kv_offload_store_drops_total", "Blocks not written (queue full or tier unreachable).",
          static_cast<double>(kt.store_drops));
  counter("lancet:kv_offload_corrupt_total", "KV-offload entries that failed their checks (ignored, deleted).",
          static_cast<double>(kt.corrupt_entries));
  counter("lancet:kv_offload_errors_total", "Failed KV-offload connections and commands.", static_cast<double>(kt.errors));
  gauge("lancet:kv_offload_connected", "1 when the KV-offload tier is reachable (0 when down or off).",
        kt.connected ? 1.0 : 0.0);
  if (st.spec_enabled) {
    // Speculative decoding, with vLLM's counter names; the acceptance rate is accepted / drafted.
    counter("vllm:spec_decode_num_drafts_total", "Verifications of a sequence's draft tokens.",
            static_cast<double>(st.spec_num_drafts));
    counter("vllm:spec_decode_num_draft_tokens_total", "Draft tokens verified.",
            static_cast<double>(st.spec_draft_tokens));
    counter("vllm:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.",
            static_cast<double>(st.spec_accepted_tokens));
    header(&out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", "counter",
           "Accepted draft tokens by position in the draft.");
    for (size_t i = 0; i < st.spec_accepted_per_pos.size(); ++i)
      sample(&out, "vllm:spec_decode_num_accepted_tokens_per_pos_total", l + ",position=\"" + std::to_string(i) + "\"",
             static_cast<double>(st.spec_accepted_per_pos[i]));
    gauge("lancet:spec_decode_acceptance_rate", "Accepted / verified draft tokens since start.",
          st.spec_draft_tokens > 0 ? static_cast<double>(st.spec_accepted_tokens) / st.spec_draft_tokens : 0.0);
    gauge("lancet:spec_decode_num_speculative_tokens", "Draft tokens per sequence chosen for the latest step (0 = off).",
          static_cast<double>(st.spec_current_k));
  }

  header(&out, "vllm:request_success_total", "counter", "Count of finished requests by finish reason.");
  for (const char* reason : {"stop", "length", "abort", "error", "content_filter"}) {
    auto it = finished_.find(reason);
    sample(&out, "vllm:request_success_total", l + ",finished_reason=\"" + reason + "\"",
           it == finished_.end() ? 0.0 : static_cast<double>(it->second));
  }
  // The KV cache's configuration as labels of a constant 1, as vLLM exports it.
  header(&out, "vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig.");
  sample(&out, "vllm:cache_config_info",
         "block_size=\"" + std::to_string(st.block_size) + "\",cache_dtype=\"" + escape_label(st.kv_dtype) +
             "\",enable_prefix_caching=\"" + (st.enable_prefix_caching ? "True" : "False") +
             "\",num_gpu_blocks=\"" + std::to_string(st.num_blocks) + "\"",
         1.0);
  header(&out, "lancet:http_errors_total", "counter", "Error responses by HTTP status.");
  for (const auto& [status, n] : http_errors_)
    sample(&out, "lancet:http_errors_total", l + ",status=\"" + std::to_string(status) + "\"", static_cast<double>(n));

  // FP8 KV cache: the per-layer scales in use (checkpoint or calibration), so a scrape shows
  // what the cache quantizes with. Absent when the cache is not FP8.
  if (const auto scales = published_kv_cache_scales(); scales && !scales->k.empty()) {
    header(&out, "lancet:kv_cache_scale", "gauge", "FP8 KV cache scale per layer (stored = e4m3(x / scale)).");
    for (size_t i = 0; i < scales->k.size() && i < scales->v.size(); ++i) {
      const std::string layer = "layer=\"" + std::to_string(i) + "\"";
      sample(&out, "lancet:kv_cache_scale", layer + ",kind=\"k\"", scales->k[i]);
      sample(&out, "lancet:kv_cache_scale", layer + ",kind=\"v\"", scales->v[i]);
    }
  }

  auto hist = [&](const char* name, const char* help, const Histogram& h) {
    header(&out, name, "histogram", help);
    render_histogram(h, name, l, &out);
  };
  hist("vllm:time_to_first_token_seconds", "Histogram of time to first token in seconds.", ttft_);
  hist("vllm:inter_token_latency_seconds", "Histogram of inter-token latency in seconds.", itl_);
  hist("vllm:time_per_output_token_seconds", "Histogram of time per output token in seconds.", tpot_);
  hist("vllm:e2e_request_latency_seconds", "Histogram of end to end request latency in seconds.", e2e_);
  hist("vllm:request_prompt_tokens", "Number of prefill tokens processed.", prompt_len_);
  hist("vllm:request_generation_tokens", "Number of generation tokens processed.", gen_len_);
  if (!guard_matches_.empty() || guard_time_.count() > 0) {
    header(&out, "lancet:guard_matches_total", "counter", "Requests matching a content rule, by rule, action and where.");
    for (const auto& [labels, n] : guard_matches_)
      sample(&out, "lancet:guard_matches_total", l + "," + labels, static_cast<double>(n));
    hist("lancet:guard_seconds", "Histogram of content-rule time per request in seconds.", guard_time_);
  }
  if (guard_model_time_.count() > 0) {
    header(&out, "lancet:guard_model_verdicts_total", "counter",
           "Prompts the guard model classified, by verdict (safe, unsafe, unknown, error).");
    for (const auto& [v, n] : guard_model_verdicts_)
      sample(&out, "lancet:guard_model_verdicts_total", l + ",verdict=\"" + v + "\"", static_cast<double>(n));
    header(&out, "lancet:guard_model_unsafe_categories_total", "counter",
           "Categories the guard model named in unsafe verdicts.");
    for (const auto& [c, n] : guard_model_categories_)
      sample(&out, "lancet:guard_model_unsafe_categories_total", l + ",category=\"" + c + "\"", static_cast<double>(n));
    hist("lancet:guard_model_seconds", "Histogram of the guard model's time per classified prompt in seconds.",
         guard_model_time_);
  }
  hist("vllm:request_queue_time_seconds", "Histogram of time spent in WAITING phase for request.", queue_);
  hist("vllm:request_prefill_time_seconds", "Histogram of time spent in PREFILL phase for request.", prefill_);
  hist("vllm:request_decode_time_seconds", "Histogram of time spent in DECODE phase for request.", decode_);
  hist("vllm:request_inference_time_seconds", "Histogram of time spent in RUNNING phase for request.", inference_);
  hist("vllm:request_params_n", "Histogram of the n request parameter.", params_n_);
  hist("vllm:request_params_max_tokens", "Histogram of the max_tokens request parameter.", params_max_tokens_);
  hist("vllm:iteration_tokens_total", "Histogram of number of tokens per engine_step.", st.iteration_tokens);
  return out;
}

}  // namespace lancet::server
