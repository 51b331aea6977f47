// The engine's host work per step, without a model: the scheduler, block tables, the step
// metadata a GPU executor builds and copies (build_step and the
// packed upload, here into host memory), the sampling bookkeeping of device-sampled rows, and
// detokenization with stop checks. The executor returns its tokens at once, as a GPU that
// samples on the device hands back only token ids, so each step's wall time is the host work
// that a GPU decode step waits on (kernel launches and graph replays aside).
// Built and run by bench/engine/run.sh; prints one JSON line per batch size.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "instant_executor.h"
#include "core/logging.h"
#include "engine/engine.h"
#include "io/model_source.h"
#include "output/output_processor.h"
#include "tokenizer/model_tokenizer.h"

using namespace lancet;
using lancet::bench::InstantExecutor;

namespace {

std::vector<int> parse_list(const char* s) {
  std::vector<int> out;
  std::string cur;
  for (const char* p = s;; ++p) {
    if (*p == ',' || *p == '\0') {
      if (!cur.empty()) out.push_back(std::atoi(cur.c_str()));
      cur.clear();
      if (*p == '\0') break;
    } else {
      cur += *p;
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr,
                 "usage: host_overhead TOKENIZER_MODEL [batches=1,64,256] [prompt=1000] [decode=200] [sync|async]\n");
    return 2;
  }
  set_log_level(LogLevel::kWarning);
  const std::vector<int> batches = parse_list(argc > 2 ? argv[2] : "1,64,256");
  const int prompt_len = argc > 3 ? std::atoi(argv[3]) : 1000;
  const int decode = argc > 4 ? std::atoi(argv[4]) : 200;
  // async: the engine launches step N+1 before it takes step N's tokens, as on CUDA.
  const bool async = argc > 5 && std::string(argv[5]) == "async";
  auto src = open_model_source(argv[1]);
  if (!src.ok()) return std::fprintf(stderr, "%s\n", src.status().to_string().c_str()), 1;
  auto tok = load_model_tokenizer(**src);
  if (!tok.ok() || !*tok) return std::fprintf(stderr, "%s has no tokenizer\n", argv[1]), 1;
  auto be = make_backend("cpu");
  if (!be.ok()) return std::fprintf(stderr, "%s\n", be.status().to_string().c_str()), 1;
  const int32_t bs = 16;
  for (int batch : batches) {
    // Prompt chunks share each step's token budget with the decodes of the sequences already in,
    // so the last prompt is in after about batch * prompt_len / (budget - batch) steps.
    const int64_t budget = std::max(2048, 2 * batch);
    const int64_t prefill_steps = int64_t{batch} * prompt_len / (budget - batch) + 2;
    const int64_t max_output = decode + prefill_steps;
    const int64_t blocks_per_seq = (prompt_len + max_output + 2 * bs) / bs + 1;
    InstantExecutor exec(**be, (*tok)->vocab_size(), blocks_per_seq * batch + 16, bs);
    EngineConfig cfg;
    cfg.scheduler.max_num_seqs = batch;
    cfg.scheduler.max_num_batched_tokens = budget;
    cfg.scheduler.max_model_len = prompt_len + max_output + 16;
    cfg.enable_prefix_caching = true;
    cfg.async_scheduling = async;
    Engine engine(cfg, &exec);
    OutputProcessor out(tok->get());  // detokenization and stop checks, as the AsyncEngine runs them
    for (int r = 0; r < batch; ++r) {
      GenerationRequest q;
      q.prompt.resize(prompt_len);
      for (int i = 0; i < prompt_len; ++i) q.prompt[i] = 1000 + (r * 131 + i * 17) % 20000;  // distinct prompts
      q.params.temperature = 0.7f;
      q.params.top_p = 0.95f;
      // Long enough that every sequence is still decoding once the last prompt is in: then
      // `decode` steps run the whole batch.
      q.params.max_tokens = static_cast<int>(max_output);
      q.params.ignore_eos = true;
      auto id = engine.add_request(q);
      if (!id.ok()) return std::fprintf(stderr, "%s\n", id.status().to_string().c_str()), 1;
      out.add_request(*id, q);
    }
    // Prefill first (not timed), then the decode steps, every sequence in every step.
    std::vector<SequenceKey> ended;
    int64_t decode_steps = 0, events = 0;
    double decode_s = 0, metadata_s = 0;
    while (engine.has_work()) {
      const EngineStats before = engine.stats();
      const auto t0 = std::chrono::steady_clock::now();
      auto ev = engine.step();
      if (!ev.ok()) return std::fprintf(stderr, "%s\n", ev.status().to_string().c_str()), 1;
      ended.clear();
      out.process(&*ev, &ended);
      engine.finish_sequences(ended);
      const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      const EngineStats after = engine.stats();
      const bool pure_decode = after.prompt_tokens_computed == before.prompt_tokens_computed &&
                               static_cast<int64_t>(ev->size()) == batch;
      if (pure_decode) {
        ++decode_steps;
        decode_s += s;
        metadata_s += after.model_seconds - before.model_seconds;  // the executor: step metadata and its copy
        events += static_cast<int64_t>(ev->size());
      }
    }
    const double us = decode_steps > 0 ? 1e6 * decode_s / static_cast<double>(decode_steps) : 0;
    std::printf("{\"batch\": %d, \"prompt_len\": %d, \"async\": %s, \"decode_steps\": %lld, "
                "\"host_us_per_decode_step\": %.1f, \"metadata_us_per_decode_step\": %.1f, \"host_us_per_token\": %.2f}\n",
                batch, prompt_len, async ? "true" : "false", static_cast<long long>(decode_steps), us,
                decode_steps > 0 ? 1e6 * metadata_s / static_cast<double>(decode_steps) : 0.0,
                events > 0 ? 1e6 * decode_s / static_cast<double>(events) : 0.0);
    std::fflush(stdout);
  }
  return 0;
}
