// The AsyncEngine loop without a model: requests submitted at once, as `lancet bench
// throughput` submits them, over InstantExecutor (step metadata built and copied, tokens back at
// once) with asynchronous scheduling, the output side (SmolLM2's tokenizer, stop checks) and the
// readers one thread per request (as the HTTP sessions read), one thread for all through a
// StreamGroup (as `lancet bench throughput` reads), or one thread that polls every stream. Prints one JSON line per run: the loop's host work per
// step (EngineStats: step - model), the output thread's work per step, and the wall time.
// Built and run by bench/engine/run_loop.sh.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <unordered_set>
#include <vector>

#include "backend/backend.h"
#include "core/logging.h"
#include "engine/async_engine.h"
#include "engine/engine.h"
#include "instant_executor.h"
#include "io/model_source.h"
#include "output/output_processor.h"
#include "tokenizer/model_tokenizer.h"

using namespace lancet;
using lancet::bench::InstantExecutor;

namespace {

// Every stream read to its end; returns the tokens read.
int64_t read_per_stream_threads(const std::vector<std::shared_ptr<RequestStream>>& streams) {
  std::atomic<int64_t> total{0};
  std::vector<std::thread> readers;
  for (const auto& s : streams)
    readers.emplace_back([&total, s] {
      TokenEvent ev;
      while (s->next(&ev))
        if (ev.token >= 0) total++;
    });
  for (auto& t : readers) t.join();
  return total.load();
}

// One thread for every stream through a StreamGroup (as `lancet bench throughput` reads).
int64_t read_group(const std::vector<std::shared_ptr<RequestStream>>& streams, StreamGroup& group) {
  int64_t total = 0;
  size_t left = streams.size();
  std::vector<std::shared_ptr<RequestStream>> ready;
  std::unordered_set<const RequestStream*> ended;
  TokenEvent ev;
  while (left > 0) {
    group.wait(&ready);
    for (const auto& s : ready) {
      RequestStream::Wait w;
      while ((w = s->next_until(&ev, RequestStream::Clock::time_point{})) == RequestStream::Wait::kEvent)
        total += ev.token >= 0 ? 1 : 0;
      if (w == RequestStream::Wait::kEnded && ended.insert(s.get()).second) --left;
    }
  }
  return total;
}

int64_t read_polling(const std::vector<std::shared_ptr<RequestStream>>& streams) {
  int64_t total = 0;
  std::vector<bool> open(streams.size(), true);
  size_t left = streams.size();
  while (left > 0) {
    bool any = false;
    for (size_t i = 0; i < streams.size(); ++i) {
      if (!open[i]) continue;
      TokenEvent ev;
      for (;;) {
        const auto w = streams[i]->next_until(&ev, RequestStream::Clock::time_point{});
        if (w == RequestStream::Wait::kEvent) {
          total += ev.token >= 0 ? 1 : 0;
          any = true;
          continue;
        }
        if (w == RequestStream::Wait::kEnded) {
          open[i] = false;
          --left;
        }
        break;
      }
    }
    if (!any) std::this_thread::sleep_for(std::chrono::microseconds(200));
  }
  return total;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 6) {
    std::fprintf(stderr, "usage: async_loop TOKENIZER_MODEL BATCH PROMPT DECODE threads|group|poll\n");
    return 2;
  }
  set_log_level(LogLevel::kWarning);
  const int batch = std::atoi(argv[2]);
  const int prompt_len = std::atoi(argv[3]);
  const int decode = std::atoi(argv[4]);
  const std::string readers = argv[5];
  if (batch <= 0 || prompt_len <= 0 || decode <= 0 || (readers != "threads" && readers != "group" && readers != "poll"))
    return std::fprintf(stderr, "bad arguments\n"), 2;
  auto src = open_model_source(argv[1]);
  if (!src.ok()) return std::fprintf(stderr, "%s\n", src.status().to_string().c_str()), 1;
  auto tok = load_model_tokenizer(**src);
  if (!tok.ok() || !*tok) return std::fprintf(stderr, "%s has no tokenizer\n", argv[1]), 1;
  auto be = make_backend("cpu");
  if (!be.ok()) return std::fprintf(stderr, "%s\n", be.status().to_string().c_str()), 1;
  const int32_t bs = 16;
  const int64_t blocks_per_seq = (prompt_len + decode + 2 * bs) / bs + 1;
  InstantExecutor exec(**be, (*tok)->vocab_size(), blocks_per_seq * batch + 16, bs);
  EngineConfig cfg;
  cfg.scheduler.max_num_seqs = batch;
  cfg.scheduler.max_num_batched_tokens = std::max(2048, 2 * batch);
  cfg.scheduler.max_model_len = prompt_len + decode + 16;
  cfg.enable_prefix_caching = true;
  cfg.async_scheduling = true;
  Engine engine(cfg, &exec);
  OutputProcessor out(tok->get());
  AsyncEngine loop(&engine, &out);
  std::vector<GenerationRequest> reqs(static_cast<size_t>(batch));
  for (int r = 0; r < batch; ++r) {
    GenerationRequest& q = reqs[static_cast<size_t>(r)];
    q.prompt.resize(static_cast<size_t>(prompt_len));
    for (int i = 0; i < prompt_len; ++i) q.prompt[static_cast<size_t>(i)] = 1000 + (r * 131 + i * 17) % 20000;
    q.params.temperature = 0.7f;
    q.params.top_p = 0.95f;
    q.params.max_tokens = decode;
    q.params.ignore_eos = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<std::shared_ptr<RequestStream>> streams;
  auto group = std::make_shared<StreamGroup>();
  for (auto& s : loop.submit_all(reqs, readers == "group" ? group : nullptr)) {
    if (!s.ok()) return std::fprintf(stderr, "%s\n", s.status().to_string().c_str()), 1;
    streams.push_back(*s);
  }
  const int64_t tokens = readers == "threads" ? read_per_stream_threads(streams)
                         : readers == "group" ? read_group(streams, *group)
                                              : read_polling(streams);
  const double wall = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  const EngineStats st = loop.stats();
  const double steps = static_cast<double>(std::max<int64_t>(st.steps, 1));
  std::printf("{\"batch\": %d, \"prompt_len\": %d, \"decode\": %d, \"readers\": \"%s\", \"steps\": %lld, "
              "\"wall_s\": %.3f, \"tokens\": %lld, \"loop_host_us_per_step\": %.1f, \"loop_step_us\": %.1f, "
              "\"output_us_per_step\": %.1f}\n",
              batch, prompt_len, decode, readers.c_str(), static_cast<long long>(st.steps), wall,
              static_cast<long long>(tokens), 1e6 * (st.step_seconds - st.model_seconds) / steps,
              1e6 * st.step_seconds / steps, 1e6 * st.output_seconds / steps);
  return 0;
}
