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
  double ttft = 0, e2e = 0;
  std::vector<double> itl;
  int64_t prompt_tokens = 0, output_tokens = 0;
};

httplib::Headers auth_headers(const ServeBenchConfig& c) {
  httplib::Headers h;
  if (!c.api_key.empty()) h.emplace("Authorization", "Bearer " + c.api_key);
  return h;
}

RequestTiming run_one(httplib::Client& cli, const ServeBenchConfig& c, const std::string& model, int64_t index) {
  std::mt19937_64 rng(c.seed * 1000003ull + static_cast<uint64_t>(index));
  std::vector<int32_t> prompt(static_cast<size_t>(c.input_len));
  const int32_t lo = 10, span = std::max(1, c.max_token_id - lo);
  for (auto& t : prompt) t = lo + static_cast<int32_t>(rng() % static_cast<uint64_t>(span));
  Json body = {{"model", model},         {"prompt", prompt},   {"max_tokens", c.output_len},
               {"min_tokens", c.output_len}, {"ignore_eos", true}, {"temperature", 0},
               {"stream", true},         {"stream_options", {{"include_usage", true}}}};

  RequestTiming t;
  std::string buffer;
  bool done = false;
  Clock::time_point start = Clock::now(), last{};
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
  t.ok = t.error.empty() && !first;
  return t;
}

}  // namespace

LatencySummary summarize_ms(std::vector<double> s) {
  LatencySummary out;
  if (s.empty()) return out;
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
  std::vector<std::thread> workers;
  for (int32_t w = 0; w < std::min(c.concurrency, c.num_prompts); ++w) {
    workers.emplace_back([&] {
      httplib::Client cli(c.url);
      cli.set_read_timeout(static_cast<time_t>(c.timeout_s));
      cli.set_write_timeout(static_cast<time_t>(c.timeout_s));
      for (int64_t i = next++; i < c.num_prompts; i = next++) timings[static_cast<size_t>(i)] = run_one(cli, c, model, i);
    });
  }
  for (auto& t : workers) t.join();

  ServeBenchResult r;
  r.duration_s = seconds(Clock::now() - start);
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
  title("==================================================");
  return out;
}

}  // namespace lancet::server
