// `lancet bench serve`: load-tests a running OpenAI-compatible server (lancet's, vLLM's, any)
// like `vllm bench serve` and prints TTFT / TPOT / ITL percentiles and throughput, as a table
// or (--json) one JSON object. Reached through `lancet bench serve` (bench_cmd.cc); argv[0]
// is "serve". --background-input-len adds one long prompt alongside the short streams to
// measure what its prefill does to their inter-token latency.
#include <cstdio>
#include <cstdlib>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "server/serve_benchmark.h"

namespace lancet::cli {

int cmd_bench_serve(int argc, char** argv) {
  CLI::App app{"Load-test a running OpenAI-compatible server (streaming /v1/completions)", "lancet bench serve"};
  server::ServeBenchConfig c;
  bool json = false;
  app.add_option("--url", c.url, "server base URL")->capture_default_str();
  app.add_option("--model", c.model, "model name (default: the server's first)");
  app.add_option("--api-key", c.api_key, "bearer key (default: LANCET_API_KEY)");
  app.add_option("--concurrency", c.concurrency, "requests in flight")->capture_default_str();
  app.add_option("--num-prompts", c.num_prompts, "requests in total")->capture_default_str();
  app.add_option("--input-len", c.input_len, "prompt tokens per request (random ids)")->capture_default_str();
  app.add_option("--output-len", c.output_len, "generated tokens per request (ignore_eos)")->capture_default_str();
  app.add_option("--max-token-id", c.max_token_id, "prompt ids are drawn below this")->capture_default_str();
  app.add_option("--seed", c.seed, "prompt seed")->capture_default_str();
  app.add_option("--timeout", c.timeout_s, "per-request timeout in seconds")->capture_default_str();
  app.add_option("--background-input-len", c.background_input_len,
                 "also send one request with a prompt of this many tokens at the start; its timings are "
                 "reported apart and left out of the short streams' figures (0 = none)")
      ->capture_default_str();
  app.add_option("--background-output-len", c.background_output_len, "tokens the background request generates")
      ->capture_default_str();
  app.add_flag("--json", json, "print one JSON object instead of the table");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  if (c.api_key.empty()) {
    if (const char* env = std::getenv("LANCET_API_KEY")) c.api_key = env;
  }
  auto r = server::run_serve_benchmark(c);
  if (!r.ok()) {
    std::fprintf(stderr, "lancet bench serve: %s\n", r.status().message().c_str());
    return 1;
  }
  if (json) std::printf("%s\n", server::dump_json(server::serve_bench_json(c, *r)).c_str());
  else std::printf("%s", server::serve_bench_table(*r).c_str());
  for (const auto& e : r->errors) std::fprintf(stderr, "failed request: %s\n", e.c_str());
  const bool background_failed = r->has_background && !r->background.completed;
  return r->failed == 0 && !background_failed ? 0 : 1;
}

}  // namespace lancet::cli
