// CPU throughput of the Llama forward pass, llama-bench style: prompt processing of N tokens
// in one step (pp) and generation of M tokens one at a time through the paged cache (tg,
// after a 16-token prompt, like bench/cpu/llamacpp_bench.py).
// Built and run by bench/cpu/run_bench.sh; prints one JSON line.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/thread_pool.h"
#include "io/model_source.h"
#include "model/llama_model.h"
#include "runner/llama_executor.h"
#include "runner/sequence_runner.h"

using namespace lancet;

int main(int argc, char** argv) {
  if (argc < 2) {
    std::fprintf(stderr, "usage: bench_llama MODEL [pp=512] [tg=128] [threads=2] [reps=3]\n");
    return 2;
  }
  const std::string path = argv[1];
  const int64_t pp = argc > 2 ? std::atoll(argv[2]) : 512;
  const int64_t tg = argc > 3 ? std::atoll(argv[3]) : 128;
  const int threads = argc > 4 ? std::atoi(argv[4]) : 2;
  const int reps = argc > 5 ? std::atoi(argv[5]) : 3;
  set_default_threads(threads);
  auto src = open_model_source(path);
  if (!src.ok()) return std::fprintf(stderr, "%s\n", src.status().to_string().c_str()), 1;
  auto be = make_backend("cpu");
  LlamaModelOptions mo;
  mo.max_model_len = std::max<int64_t>(pp, 16 + tg) + 16;
  auto model = LlamaModel::create(**src, **be, mo);
  if (!model.ok()) return std::fprintf(stderr, "%s\n", model.status().to_string().c_str()), 1;
  const int64_t V = (*model)->config().vocab_size;
  std::mt19937 g(1);
  std::vector<int32_t> prompt(pp);
  for (auto& t : prompt) t = static_cast<int32_t>(g() % V);
  // tg is measured the way bench/cpu/llamacpp_bench.py measures llama.cpp: 16 prompt tokens,
  // then tg single-token steps with greedy picks (a short context, as llama-bench's tg).
  const int64_t tg_prefix = 16;
  auto greedy = [&](const std::vector<float>& logits) {
    int64_t best = 0;
    for (int64_t v = 1; v < V; ++v)
      if (logits[v] > logits[best]) best = v;
    return static_cast<int32_t>(best);
  };
  double best_pp = 1e30, best_tg = 1e30;
  for (int r = 0; r < reps; ++r) {
    std::vector<float> logits;
    {
      auto exec = LlamaExecutor::create(**model, KvBlockConfig{pp / 16 + 2, 16}).value();
      SequenceRunner seq(*exec);
      auto t0 = std::chrono::steady_clock::now();
      Status fs = seq.step_last(prompt, &logits);
      if (!fs.ok()) return std::fprintf(stderr, "%s\n", fs.to_string().c_str()), 1;
      best_pp = std::min(best_pp, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
    }
    auto exec = LlamaExecutor::create(**model, KvBlockConfig{(tg_prefix + tg) / 16 + 2, 16}).value();
    SequenceRunner seq(*exec);
    Status fs = seq.step_last(std::span<const int32_t>(prompt.data(), tg_prefix), &logits);
    if (!fs.ok()) return std::fprintf(stderr, "%s\n", fs.to_string().c_str()), 1;
    auto t1 = std::chrono::steady_clock::now();
    int32_t next = 0;
    for (int64_t i = 0; i < tg; ++i) {
      next = greedy(logits);
      fs = seq.step_last(std::span<const int32_t>(&next, 1), &logits);
      if (!fs.ok()) return std::fprintf(stderr, "%s\n", fs.to_string().c_str()), 1;
    }
    best_tg = std::min(best_tg, std::chrono::duration<double>(std::chrono::steady_clock::now() - t1).count());
  }
  std::printf("{\"engine\": \"lancet\", \"model\": \"%s\", \"threads\": %d, \"pp\": %lld, \"pp_tok_s\": %.1f, \"tg\": %lld, \"tg_tok_s\": %.1f}\n",
              path.c_str(), threads, (long long)pp, pp / best_pp, (long long)tg, tg / best_tg);
  return 0;
}
