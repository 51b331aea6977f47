// `lancet run-batch IN.jsonl OUT.jsonl --model M [engine flags]`: runs a Batch API input file
// offline, without a server, through the same code as /v1/batches (server/batch_runner.h):
// each line {"custom_id", "method": "POST", "url", "body"} becomes one request, and OUT gets
// one result line per input line, in input order, in the Batch API's result format (failed
// requests and bad lines included, as vLLM's run_batch writes them). Exit 0 once the file ran
// (whatever its lines' outcomes; stderr says how many failed), 1 when IN cannot be read or
// holds no request, or OUT cannot be written, 2 on a usage error.
#include <cstdio>
#include <fstream>
#include <string>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/runtime_flags.h"
#include "core/logging.h"
#include "io/text_file.h"
#include "runtime/runtime.h"
#include "server/batch_runner.h"
#include "server/serving_model.h"

namespace lancet::cli {

int cmd_run_batch(int argc, char** argv) {
  CLI::App app{"Run a Batch API input file (JSONL) offline and write the results", "lancet run-batch"};
  RuntimeConfig rc;
  std::string in_path, out_path;
  server::BatchRunConfig bc;
  bc.max_concurrency = 64;
  app.add_option("input", in_path, "input JSONL: one {custom_id, method, url, body} per line")->required();
  app.add_option("output", out_path, "output JSONL: one result per input line, in input order")->required();
  add_runtime_flags(app, &rc);
  app.add_option("--max-concurrency", bc.max_concurrency, "requests in flight at once")->capture_default_str();
  app.add_option("--max-logprobs", rc.max_logprobs, "largest logprobs/top_logprobs a line may ask for")
      ->capture_default_str();
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  if (bc.max_concurrency < 1) {
    std::fprintf(stderr, "lancet run-batch: --max-concurrency must be at least 1\n");
    return 2;
  }
  bc.limits.max_logprobs = rc.max_logprobs;
  bc.priority = 0;  // nothing else runs here
  auto input = read_text_file(in_path, 1ull << 30);
  if (!input.ok()) {
    std::fprintf(stderr, "lancet run-batch: %s: %s\n", in_path.c_str(), input.status().message().c_str());
    return 1;
  }
  auto prepared = server::prepare_batch(*input, "", bc);
  if (!prepared.ok()) {
    std::fprintf(stderr, "lancet run-batch: %s: %s\n", in_path.c_str(), prepared.status().message().c_str());
    return 1;
  }
  // Refuse an unwritable output before loading the model.
  std::ofstream out(out_path, std::ios::binary | std::ios::trunc);
  if (!out) {
    std::fprintf(stderr, "lancet run-batch: cannot write %s\n", out_path.c_str());
    return 1;
  }
  set_log_level(LogLevel::kWarning);
  auto rt = Runtime::create(rc);
  if (!rt.ok()) {
    std::fprintf(stderr, "lancet run-batch: %s\n", rt.status().message().c_str());
    return 1;
  }
  auto model = server::make_runtime_model(rt->get());
  server::BatchRunner runner(model.get(), bc);
  const server::BatchResult result = runner.run(*prepared);
  out << result.all;
  out.flush();
  if (!out) {
    std::fprintf(stderr, "lancet run-batch: cannot write %s\n", out_path.c_str());
    return 1;
  }
  std::fprintf(stderr, "lancet run-batch: %lld requests: %lld completed, %lld failed; results in %s\n",
               static_cast<long long>(result.counts.total), static_cast<long long>(result.counts.completed),
               static_cast<long long>(result.counts.failed), out_path.c_str());
  return 0;
}

}  // namespace lancet::cli
