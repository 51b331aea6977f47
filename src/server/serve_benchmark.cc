// The serving load generator (see serve_benchmark.h), on cpp-httplib's client.
#include "server/serve_benchmark.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <mutex>
#include <random>
#include <thread>

#include "server/httplib_include.h"

namespace lancet::server {
namespace {

using Clock = std::chrono::steady_clock;
double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

struct RequestTiming {
  bool ok = false;
  std::string error;
  double sent = 0;  // seconds from the benchmark's start to the send
  double ttft = 0, e2e = 0;
  bool got_token = false;
  std::vector<double> itl;
  std::vector<double> itl_end;  // [itl.size()] seconds from the benchmark's start to each gap's end
  int64_t prompt_tokens = 0, output_tokens = 0;
};

struct RequestShape {
  int64_t index = 0;  // seeds the prompt
  int32_t input_len = 0, output_len = 0;
};

httplib::Headers auth_headers(const ServeBenchConfig& c) {
  httplib::Headers h;
  if (!c.api_key.empty()) h.emplace("Authorization", "Bearer " + c.api_key);
  return h;
}

RequestTiming run_one(httplib::Client& cli, const ServeBenchConfig& c, const std::string& model,
                      const RequestShape& shape, Clock::time_point bench_start) {
  std::mt19937_64 rng(c.seed * 1000003ull + static_cast<uint64_t>(shape.index));
  std::vector<int32_t> prompt(static_cast<size_t>(shape.input_len));
  const int32_t lo = 10, span = std::max(1, c.max_token_id - lo);
  for (auto& t : prompt) t = lo + static_cast<int32_t>(rng() % static_cast<uint64_t>(span));
  Json body = {{"model", model},         {"prompt", prompt},   {"max_tokens", shape.output_len},
               {"min_tokens", shape.output_len}, {"ignore_eos", true}, {"temperature", 0},
               {"stream", true},         {"stream_options", {{"include_usage", true}}}};

  RequestTiming t;
  std::string buffer;
  bool done = false;
  Clock::time_point start = Clock::now(), last{};
  t.sent = seconds(start - bench_start);
  bool first = true;
  httplib::Request req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.headers = auth_headers(c);
  req.headers.emplace("Content-Type", "application/json");
  req.body = dump_json(body);
  req.content_receiver = [&](const char* data, size_t n, uint64_t, uint64_t) {
    buffer.append(data, n);
    size_t cut;
    while ((cut = buffer.find("\n\n")) != std::string::npos) {
      const std::string event = buffer.substr(0, cut);
      buffer.erase(0, cut + 2);
      if (event.rfind("data: ", 0) != 0) continue;  // keep-alive comments
      const std::string payload = event.substr(6);
      if (payload == "[DONE]") {
        done = true;
        continue;
      }
      const Json j = Json::parse(payload, nullptr, false);
      if (j.is_discarded()) {
        t.error = "malformed chunk";
        return false;
      }
      if (j.contains("error")) {
        t.error = dump_json(j["error"]);
        return false;
      }
      if (j.contains("usage") && j["usage"].is_object()) {
        t.output_tokens = j["usage"].value("completion_tokens", int64_t{0});
        t.prompt_tokens = j["usage"].value("prompt_tokens", int64_t{0});
      }
      if (j.contains("choices") && j["choices"].is_array() && !j["choices"].empty()) {
        const Clock::time_point now = Clock::now();
        if (first) {
          t.ttft = seconds(now - start);
          first = false;
        } else {
          t.itl.push_back(seconds(now - last));
          t.itl_end.push_back(seconds(now - bench_start));
        }
        last = now;
      }
    }
    return true;
  };
  auto res = cli.send(req);
  t.e2e = seconds(Clock::now() - start);
  if (!res) {
    t.error = "HTTP error: " + httplib::to_string(res.error());
  } else if (res->status != 200) {
    t.error = "HTTP " + std::to_string(res->status) + ": " + res->body.substr(0, 200);
  } else if (t.error.empty() && !done) {
    t.error = "stream ended without [DONE]";
  }
  t.got_token = !first;
  t.ok = t.error.empty() && !first;
  return t;
}

httplib::Client make_client(const ServeBenchConfig& c) {
  httplib::Client cli(c.url);
  cli.set_read_timeout(static_cast<time_t>(c.timeout_s));
  cli.set_write_timeout(static_cast<time_t>(c.timeout_s));
  return cli;
}

// The background request's own figures, and the short streams' gaps that overlap its prefill.
BackgroundResult summarize_background(const RequestTiming& bg, const std::vector<RequestTiming>& shorts) {
  BackgroundResult b;
  b.completed = bg.ok;
  b.error = bg.error;
  b.prompt_tokens = bg.prompt_tokens;
  b.output_tokens = bg.output_tokens;
  b.ttft_ms = bg.got_token ? 1000.0 * bg.ttft : 0.0;
  b.e2el_ms = 1000.0 * bg.e2e;
  const double w0 = bg.sent, w1 = bg.sent + (bg.got_token ? bg.ttft : bg.e2e);
  std::vector<double> gaps;
  for (const RequestTiming& t : shorts)
    for (size_t i = 0; i < t.itl.size(); ++i)
      if (t.itl_end[i] > w0 && t.itl_end[i] - t.itl[i] < w1) gaps.push_back(t.itl[i]);
  b.itl_during_prefill = summarize_ms(std::move(gaps));
  return b;
}

}  // namespace

LatencySummary summarize_ms(std::vector<double> s) {
  LatencySummary out;
  if (s.empty()) return out;
  out.count = static_cast<int64_t>(s.size());
  std::sort(s.begin(), s.end());
  double sum = 0;
  for (double v : s) sum += v;
  out.mean_ms = 1000.0 * sum / static_cast<double>(s.size());
  const size_t n = s.size();
  out.median_ms = 1000.0 * (n % 2 ? s[n / 2] : 0.5 * (s[n / 2 - 1] + s[n / 2]));
  const size_t rank = static_cast<size_t>(std::ceil(0.99 * static_cast<double>(n)));
  out.p99_ms = 1000.0 * s[std::min(n - 1, rank == 0 ? 0 : rank - 1)];
  return out;
}

StatusOr<ServeBenchResult> run_serve_benchmark(const ServeBenchConfig& c) {
  if (c.concurrency < 1 || c.num_prompts < 1 || c.input_len < 1 || c.output_len < 1)
    return InvalidArgument("--concurrency, --num-prompts, --input-len and --output-len must be positive");
  if (c.background_input_len < 0 || (c.background_input_len > 0 && c.background_output_len < 1))
    return InvalidArgument("--background-input-len must be >= 0 and --background-output-len positive");
  std::string model = c.model;
  {
    httplib::Client cli(c.url);
    if (!cli.is_valid()) return InvalidArgument("bad --url '" + c.url + "'");
    cli.set_connection_timeout(5);
    if (model.empty()) {
      auto r = cli.Get("/v1/models", auth_headers(c));
      if (!r) return IoError("cannot reach " + c.url + ": " + httplib::to_string(r.error()));
      if (r->status != 200) return IoError("GET /v1/models: HTTP " + std::to_string(r->status) + " " + r->body);
      const Json j = Json::parse(r->body, nullptr, false);
      if (j.is_discarded() || !j.contains("data") || j["data"].empty())
        return IoError("GET /v1/models: unexpected answer " + r->body.substr(0, 200));
      model = j["data"][0].value("id", "");
    }
  }
  std::vector<RequestTiming> timings(static_cast<size_t>(c.num_prompts));
  std::atomic<int64_t> next{0};
  const Clock::time_point start = Clock::now();
  // The background request leaves first, on its own connection; its seed index (num_prompts)
  // is one no short prompt uses.
  RequestTiming bg;
  std::thread bg_thread;
  if (c.background_input_len > 0) {
    bg_thread = std::thread([&] {
      httplib::Client cli = make_client(c);
      bg = run_one(cli, c, model, {c.num_prompts, c.background_input_len, c.background_output_len}, start);
    });
  }
  std::vector<std::thread> workers;
  for (int32_t w = 0; w < std::min(c.concurrency, c.num_prompts); ++w) {
    workers.emplace_back([&] {
      httplib::Client cli = make_client(c);
      for (int64_t i = next++; i < c.num_prompts; i = next++)
        timings[static_cast<size_t>(i)] = run_one(cli, c, model, {i, c.input_len, c.output_len}, start);
    });
  }
  for (auto& t : workers) t.join();

  ServeBenchResult r;
  r.duration_s = seconds(Clock::now() - start);
  if (bg_thread.joinable()) {
    bg_thread.join();
    r.has_background = true;
    r.background = summarize_background(bg, timings);
    if (!bg.ok) r.errors.push_back("background request: " + bg.error);
  }
  std::vector<double> ttft, tpot, itl, e2el;
  for (const RequestTiming& t : timings) {
    if (!t.ok) {
      ++r.failed;
      if (r.errors.size() < 5) r.errors.push_back(t.error);
      continue;
    }
    ++r.completed;
    r.total_input_tokens += t.prompt_tokens;
    r.total_output_tokens += t.output_tokens;
    ttft.push_back(t.ttft);
    e2el.push_back(t.e2e);
    if (t.output_tokens > 1) tpot.push_back((t.e2e - t.ttft) / static_cast<double>(t.output_tokens - 1));
    itl.insert(itl.end(), t.itl.begin(), t.itl.end());
  }
  r.request_throughput = r.completed / r.duration_s;
  r.output_throughput = r.total_output_tokens / r.duration_s;
  r.total_token_throughput = (r.total_input_tokens + r.total_output_tokens) / r.duration_s;
  r.ttft = summarize_ms(ttft);
  r.tpot = summarize_ms(tpot);
  r.itl = summarize_ms(itl);
  r.e2el = summarize_ms(e2el);
  return r;
}

Json serve_bench_json(const ServeBenchConfig& c, const ServeBenchResult& r) {
  Json j;
  j["url"] = c.url;
  j["concurrency"] = c.concurrency;
  j["num_prompts"] = c.num_prompts;
  j["input_len"] = c.input_len;
  j["output_len"] = c.output_len;
  j["completed"] = r.completed;
  j["failed"] = r.failed;
  j["errors"] = r.errors;
  j["duration"] = r.duration_s;
  j["total_input_tokens"] = r.total_input_tokens;
  j["total_output_tokens"] = r.total_output_tokens;
  j["request_throughput"] = r.request_throughput;
  j["output_throughput"] = r.output_throughput;
  j["total_token_throughput"] = r.total_token_throughput;
  for (const auto& [name, s] : {std::pair<const char*, LatencySummary>{"ttft", r.ttft}, {"tpot", r.tpot},
                                {"itl", r.itl}, {"e2el", r.e2el}}) {
    j[std::string("mean_") + name + "_ms"] = s.mean_ms;
    j[std::string("median_") + name + "_ms"] = s.median_ms;
    j[std::string("p99_") + name + "_ms"] = s.p99_ms;
  }
  if (r.has_background) {
    const BackgroundResult& b = r.background;
    const LatencySummary& w = b.itl_during_prefill;
    j["background"] = {{"input_len", c.background_input_len},
                       {"output_len", c.background_output_len},
                       {"completed", b.completed},
                       {"error", b.error},
                       {"prompt_tokens", b.prompt_tokens},
                       {"output_tokens", b.output_tokens},
                       {"ttft_ms", b.ttft_ms},
                       {"e2el_ms", b.e2el_ms},
                       {"short_itl_during_prefill",
                        {{"count", w.count},
                         {"mean_ms", w.mean_ms},
                         {"median_ms", w.median_ms},
                         {"p99_ms", w.p99_ms}}}};
  }
  return j;
}

std::string serve_bench_table(const ServeBenchResult& r) {
  std::string out;
  char line[128];
  auto row = [&](const char* k, double v, const char* fmt) {
    std::snprintf(line, sizeof(line), fmt, k, v);
    out += line;
  };
  auto title = [&](const char* t) {
    std::snprintf(line, sizeof(line), "%s\n", t);
    out += line;
  };
  title("============ Serving Benchmark Result ============");
  row("Successful requests:", static_cast<double>(r.completed), "%-40s %-10.0f\n");
  row("Failed requests:", static_cast<double>(r.failed), "%-40s %-10.0f\n");
  row("Benchmark duration (s):", r.duration_s, "%-40s %-10.2f\n");
  row("Total input tokens:", static_cast<double>(r.total_input_tokens), "%-40s %-10.0f\n");
  row("Total generated tokens:", static_cast<double>(r.total_output_tokens), "%-40s %-10.0f\n");
  row("Request throughput (req/s):", r.request_throughput, "%-40s %-10.2f\n");
  row("Output token throughput (tok/s):", r.output_throughput, "%-40s %-10.2f\n");
  row("Total Token throughput (tok/s):", r.total_token_throughput, "%-40s %-10.2f\n");
  auto section = [&](const char* head, const char* name, const LatencySummary& s) {
    title(head);
    std::string k = std::string("Mean ") + name + " (ms):";
    row(k.c_str(), s.mean_ms, "%-40s %-10.2f\n");
    k = std::string("Median ") + name + " (ms):";
    row(k.c_str(), s.median_ms, "%-40s %-10.2f\n");
    k = std::string("P99 ") + name + " (ms):";
    row(k.c_str(), s.p99_ms, "%-40s %-10.2f\n");
  };
  section("---------------Time to First Token----------------", "TTFT", r.ttft);
  section("-----Time per Output Token (excl. 1st token)------", "TPOT", r.tpot);
  section("---------------Inter-token Latency----------------", "ITL", r.itl);
  section("----------------End-to-end Latency----------------", "E2EL", r.e2el);
  if (r.has_background) {
    const BackgroundResult& b = r.background;
    title("----Background Long Prompt (not counted above)----");
    row("Completed:", b.completed ? 1.0 : 0.0, "%-40s %-10.0f\n");
    row("Prompt tokens:", static_cast<double>(b.prompt_tokens), "%-40s %-10.0f\n");
    row("TTFT (ms):", b.ttft_ms, "%-40s %-10.2f\n");
    row("E2EL (ms):", b.e2el_ms, "%-40s %-10.2f\n");
    row("Short-stream ITL gaps during prefill:", static_cast<double>(b.itl_during_prefill.count), "%-40s %-10.0f\n");
    row("Median ITL during prefill (ms):", b.itl_during_prefill.median_ms, "%-40s %-10.2f\n");
    row("P99 ITL during prefill (ms):", b.itl_during_prefill.p99_ms, "%-40s %-10.2f\n");
  }
  title("==================================================");
  return out;
}

}  // namespace lancet::server
