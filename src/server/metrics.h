// Prometheus metrics with vLLM's names, so dashboards built for vLLM work unchanged.
// Request-level observations (latencies, token counts, finish reasons) are recorded by the
// request handlers; engine gauges (running, waiting, KV usage, prefix cache, preemptions)
// are read from EngineStats when /metrics is scraped.
#pragma once

#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "core/histogram.h"
#include "engine/engine.h"

namespace lancet::server {

// Appends the _bucket/_sum/_count lines of `h` as metric `name` (with labels, e.g. model_name="x").
void render_histogram(const Histogram& h, const std::string& name, const std::string& labels, std::string* out);

// What one finished request reports.
struct RequestObservation {
  double ttft_s = -1;                // < 0: no token was produced
  std::vector<double> itl_s;         // gaps between consecutive tokens
  double e2e_s = 0;
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  std::string finish_reason;         // "stop", "length", "abort", "error"
  // vLLM's request phases in seconds, < 0 when the request did not reach them: queued (arrival
  // to first scheduled), prefill (to the first token), decode (first to last token),
  // inference (first scheduled to last token = prefill + decode).
  double queue_s = -1;
  double prefill_s = -1;
  double decode_s = -1;
  double inference_s = -1;
  int64_t params_n = 1;
  int64_t params_max_tokens = 0;  // as the engine ran it (the default filled in)
};

class Metrics {
 public:
  Metrics();
  void record(const RequestObservation& obs);
  void count_http_error(int status);
  // Content rules: one count per rule that matched a request's prompt or output ("where"),
  // and the time the rules took for the whole request.
  void count_guard_match(const std::string& rule, const char* action, const char* where);
  void observe_guard_seconds(double s);
  // The guard model (--guard-model): one verdict per classified prompt ("safe", "unsafe",
  // "unknown" for an answer it could not read, "error" when the guard could not answer), the
  // categories of unsafe ones, and the classification's time.
  void count_guard_model(const char* verdict, const std::vector<std::string>& categories, double seconds);
  std::string render(const std::string& model_name, const EngineStats& stats, int64_t http_in_flight) const;

 private:
  mutable std::mutex mu_;
  Histogram ttft_, itl_, tpot_, e2e_, prompt_len_, gen_len_;
  Histogram queue_, prefill_, decode_, inference_, params_n_, params_max_tokens_;
  int64_t prompt_tokens_ = 0;
  int64_t generation_tokens_ = 0;
  std::map<std::string, int64_t> finished_;
  std::map<int, int64_t> http_errors_;
  Histogram guard_time_;
  std::map<std::string, int64_t> guard_matches_;  // the rendered label set -> count
  Histogram guard_model_time_;
  std::map<std::string, int64_t> guard_model_verdicts_, guard_model_categories_;
};

}  // namespace lancet::server
