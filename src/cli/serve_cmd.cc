// `lancet serve [MODEL]`: the OpenAI-compatible server. Flags use vLLM's names; `--config FILE`
// (YAML or JSON) supplies the same keys, with the command line winning. The socket is bound
// before the model loads, so /health answers 503 while loading. SIGINT/SIGTERM start a
// graceful shutdown: /health and new requests get 503, requests in flight finish (up to
// --drain-timeout seconds, then they are aborted), and the process exits 0. A second signal
// during the drain exits at once with 128 + the signal number.
#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include <CLI/CLI.hpp>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/runtime_flags.h"
#include "core/logging.h"
#include "runtime/runtime.h"
#include "guard/guard_rules.h"
#include "server/guard_model.h"
#include "server/config_file.h"
#include "server/http_guards.h"
#include "server/http_server.h"

namespace lancet::cli {
namespace {

// Expands `--config FILE` / `--config=FILE` into the file's flags, placed first.
bool expand_config(int argc, char** argv, std::vector<std::string>* args) {
  std::vector<std::string> rest, from_file;
  for (int i = 1; i < argc; ++i) {
    std::string a = argv[i];
    std::string path;
    if (a == "--config") {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "lancet serve: --config needs a file\n");
        return false;
      }
      path = argv[++i];
    } else if (a.rfind("--config=", 0) == 0) {
      path = a.substr(9);
    } else {
      rest.push_back(a);
      continue;
    }
    auto flags = server::config_file_flags(path);
    if (!flags.ok()) {
      std::fprintf(stderr, "lancet serve: %s\n", flags.status().message().c_str());
      return false;
    }
    from_file.insert(from_file.end(), flags->begin(), flags->end());
  }
  args->assign(from_file.begin(), from_file.end());
  args->insert(args->end(), rest.begin(), rest.end());
  return true;
}

// List-valued flags, kept as text until CLI11 is done (they take "a,b" or a JSON list).
struct ListFlags {
  std::string allowed_origins, allowed_hosts;
  std::string guard_rules;  // a file, compiled once CLI11 is done
};

// --guard-model: a second model loaded in the process (server/guard_model.h).
struct GuardModelFlags {
  std::string model;
  int64_t max_model_len = 4096;
  int64_t kv_cache_memory = 256LL << 20;
  double timeout_s = 60;
};

void add_server_flags(CLI::App& app, server::ServerConfig* sc, ListFlags* lists, bool* no_chat_page) {
  app.add_option("--host", sc->host, "address to listen on")->capture_default_str();
  app.add_option("--port", sc->port, "port to listen on (0 = any free port)")->capture_default_str();
  app.add_option("--api-key", sc->api_key, "require 'Authorization: Bearer KEY' on /v1/* (also LANCET_API_KEY)");
  app.add_option("--timeout", sc->request_timeout_s, "per-request timeout in seconds (0 = none)")
      ->capture_default_str();
  app.add_option("--drain-timeout", sc->drain_timeout_s, "seconds in-flight requests may take to finish on shutdown")
      ->capture_default_str();
  app.add_option("--max-concurrent-requests", sc->max_concurrent_requests,
                 "completion requests in flight before new ones get 429")
      ->capture_default_str();
  app.add_option("--max-request-bytes", sc->max_body_bytes, "largest request body (413 beyond)")
      ->capture_default_str();
  app.add_option("--max-header-bytes", sc->max_header_bytes, "largest request header section (431 beyond)")
      ->capture_default_str();
  app.add_option("--http-threads", sc->http_threads, "HTTP worker threads (default: concurrency limit + 16)");
  app.add_option("--listen-backlog", sc->listen_backlog,
                 "connections the kernel queues before they are accepted (capped by net.core.somaxconn)")
      ->capture_default_str();
  app.add_option("--keep-alive-max-requests", sc->keep_alive_max,
                 "requests one connection may send before it is closed")
      ->capture_default_str();
  app.add_option("--header-timeout", sc->header_timeout_s,
                 "seconds a request's header may take to arrive (from its first byte; 408 after)")
      ->capture_default_str();
  app.add_option("--body-timeout", sc->body_timeout_s,
                 "seconds a request's body may take to arrive after its header (408 after)")
      ->capture_default_str();
  app.add_option("--keep-alive-timeout", sc->keep_alive_timeout_s,
                 "seconds an idle keep-alive connection is kept open for its next request")
      ->capture_default_str();
  app.add_option("--allowed-origins", lists->allowed_origins,
                 "browser origins allowed to call the API (CORS), comma-separated or a JSON list; * = any "
                 "(default: same origin only)");
  app.add_option("--allowed-hosts", lists->allowed_hosts,
                 "Host header names accepted without --api-key, comma-separated; * = any (default: addresses, "
                 "localhost and the --host name)");
  app.add_option("--guard-rules", lists->guard_rules,
                 "YAML content rules (keywords, regexes, allow-lists) for prompts and outputs (docs/GUARD.md)");
  app.add_flag("--disable-chat-page", *no_chat_page, "do not serve the chat page at /");
  app.add_flag("--allow-runtime-lora-updating", sc->allow_runtime_lora_updating,
               "answer POST /v1/load_lora_adapter and /v1/unload_lora_adapter (they read paths on this machine; "
               "also on with VLLM_ALLOW_RUNTIME_LORA_UPDATING=true)");
  app.add_option("--batch-dir", sc->batch_dir,
                 "directory of the Files and Batch APIs' files (created on first use; relative to the working "
                 "directory)")
      ->capture_default_str();
  app.add_option("--max-file-bytes", sc->max_file_bytes, "largest file POST /v1/files accepts (413 beyond)")
      ->capture_default_str();
  app.add_option("--batch-max-concurrency", sc->batch_max_concurrency,
                 "batch requests in flight at once (they run at low priority: interactive requests go first)")
      ->capture_default_str();
}

// Fills rc and sc from the command line and --config; returns the exit status to stop with,
// or -1 to go on serving.
int parse_serve_flags(int argc, char** argv, RuntimeConfig* rc, server::ServerConfig* sc, GuardModelFlags* gm) {
  CLI::App app{"Serve a model over the OpenAI-compatible HTTP API", "lancet serve"};
  app.option_defaults()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  add_runtime_flags(app, rc);
  app.get_option("--model")->required(false);
  std::string positional_model;
  app.add_option("model_tag", positional_model, "the model (same as --model)");
  app.add_option("--served-model-name", rc->served_model_name, "model name in the API (default: the file's)");
  app.add_option("--max-logprobs", rc->max_logprobs, "largest logprobs/top_logprobs a request may ask for")
      ->capture_default_str();
  rc->low_priority_prefill_tokens = 16;
  app.add_option("--batch-prefill-tokens", rc->low_priority_prefill_tokens,
                 "prompt tokens per engine step for all Batch API requests together, so a step an interactive "
                 "request waits for stays short (0 = no cap)")
      ->capture_default_str();
  std::string log_level = "info";
  app.add_option("--log-level", log_level,
                 "debug, info, warning or error; debug adds a line per step timed for --max-step-ms (its "
                 "features, predicted and measured ms)")
      ->check(CLI::IsMember({"debug", "info", "warning", "error"}))
      ->capture_default_str();
  ListFlags lists;
  bool no_chat_page = false;
  add_server_flags(app, sc, &lists, &no_chat_page);
  app.add_option("--guard-model", gm->model,
                 "a second model (any lancet loads: Llama Guard 3, ...) that classifies each prompt the content "
                 "rules pass; unsafe is a 400 content_filter (docs/GUARD.md)");
  app.add_option("--guard-model-max-model-len", gm->max_model_len, "the guard model's context length")
      ->capture_default_str();
  app.add_option("--guard-model-kv-cache-memory", gm->kv_cache_memory, "bytes for the guard model's KV cache")
      ->capture_default_str();
  app.add_option("--guard-model-timeout", gm->timeout_s, "seconds one classification may take (then the prompt passes)")
      ->capture_default_str();
  app.set_config();  // disables CLI11's own --config handling; expand_config() does it
  std::vector<std::string> args;
  if (!expand_config(argc, argv, &args)) return 2;
  std::vector<std::string> reversed(args.rbegin(), args.rend());
  if (const int parsed = parse_args(app, reversed); parsed >= 0) return parsed;
  set_log_level(log_level == "debug"     ? LogLevel::kDebug
                : log_level == "warning" ? LogLevel::kWarning
                : log_level == "error"   ? LogLevel::kError
                                         : LogLevel::kInfo);
  if (!positional_model.empty()) {
    if (!rc->model.empty() && rc->model != positional_model) {
      std::fprintf(stderr, "lancet serve: the model is given twice ('%s' and '%s')\n", positional_model.c_str(),
                   rc->model.c_str());
      return 2;
    }
    rc->model = positional_model;
  }
  if (sc->api_key.empty()) {
    if (const char* env = std::getenv("LANCET_API_KEY")) sc->api_key = env;
  }
  sc->chat_page = !no_chat_page;
  if (const char* env = std::getenv("VLLM_ALLOW_RUNTIME_LORA_UPDATING")) {
    const std::string v = env;
    if (v == "1" || v == "true" || v == "True" || v == "TRUE") sc->allow_runtime_lora_updating = true;
  }
  for (auto [flag, text, list] : {std::tuple{"--allowed-origins", &lists.allowed_origins, &sc->allowed_origins},
                                  std::tuple{"--allowed-hosts", &lists.allowed_hosts, &sc->allowed_hosts}}) {
    auto parsed = server::parse_list_flag(flag, *text);
    if (!parsed.ok()) {
      std::fprintf(stderr, "lancet serve: %s\n", parsed.status().message().c_str());
      return 2;
    }
    *list = std::move(*parsed);
  }
  if (!lists.guard_rules.empty()) {
    auto rules = guard::load_guard_rules(lists.guard_rules);
    if (!rules.ok()) {
      std::fprintf(stderr, "lancet serve: --guard-rules: %s\n", rules.status().message().c_str());
      return 2;
    }
    sc->guard_rules = std::move(*rules);
  }
  sc->limits.max_logprobs = rc->max_logprobs;
  if (!gm->model.empty() && (gm->max_model_len < 64 || gm->kv_cache_memory <= 0 || !(gm->timeout_s > 0))) {
    std::fprintf(stderr, "lancet serve: --guard-model-max-model-len must be >= 64, the KV memory and timeout > 0\n");
    return 2;
  }
  for (const Status& st : {rc->validate(), sc->validate()}) {
    if (!st.ok()) {
      std::fprintf(stderr, "lancet serve: %s\n", st.message().c_str());
      return 2;
    }
  }
  return -1;
}

// The guard model's runtime: the served model's backend and numerics, its own file, context,
// KV cache and a few sequences; nothing of the served model's serving extras (speculation,
// offload, tensor parallelism, chat template, online quantization).
RuntimeConfig guard_runtime_config(const RuntimeConfig& rc, const GuardModelFlags& gm) {
  RuntimeConfig g;
  g.model = gm.model;
  g.backend = rc.backend;
  g.num_threads = rc.num_threads;
  g.activation_precision = rc.activation_precision;
  g.max_model_len = gm.max_model_len;
  g.allow_long_max_model_len = false;
  g.kv_cache_memory = gm.kv_cache_memory;
  g.max_num_seqs = 8;
  g.max_num_batched_tokens = std::max<int64_t>(gm.max_model_len, 512);
  g.enforce_eager = rc.enforce_eager;
  return g;
}

// Shutdown after the first SIGINT/SIGTERM: drain (abort what is left after --drain-timeout)
// and stop. A second signal (Ctrl-C again) means "do not wait": the process exits at once.
void drain_and_stop(server::HttpServer& http, Runtime& runtime, double drain_timeout_s, const sigset_t& stop_signals) {
  std::thread([stop_signals] {
    int again = 0;
    sigwait(&stop_signals, &again);
    std::fprintf(stderr, "lancet serve: second %s, exiting without waiting for the drain\n",
                 again == SIGINT ? "SIGINT" : "SIGTERM");
    std::_Exit(128 + again);
  }).detach();
  http.begin_drain();
  if (!http.wait_idle(drain_timeout_s)) {
    std::fprintf(stderr, "lancet serve: drain timeout, aborting %lld request(s)\n",
                 static_cast<long long>(http.in_flight()));
    runtime.async_engine().shutdown(/*drain=*/false);
    http.wait_idle(5.0);
  }
  http.stop();
}

// Every connection is a descriptor, idle ones included (the server holds thousands at little
// cost): take the hard limit, as the usual soft limit of 1024 would stop accepting early.
void raise_open_file_limit() {
  rlimit lim{};
  if (getrlimit(RLIMIT_NOFILE, &lim) != 0 || lim.rlim_cur >= lim.rlim_max) return;
  lim.rlim_cur = lim.rlim_max;
  (void)setrlimit(RLIMIT_NOFILE, &lim);
}

}  // namespace

int cmd_serve(int argc, char** argv) {
  RuntimeConfig rc;
  server::ServerConfig sc;
  sc.version = LANCET_VERSION;
  GuardModelFlags gm;
  if (const int code = parse_serve_flags(argc, argv, &rc, &sc, &gm); code >= 0) return code;

  // Signals are taken synchronously by sigwait below; every thread started from here on
  // inherits the mask. A client that disconnects must not kill the process with SIGPIPE.
  signal(SIGPIPE, SIG_IGN);
  sigset_t stop_signals;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGINT);
  sigaddset(&stop_signals, SIGTERM);
  pthread_sigmask(SIG_BLOCK, &stop_signals, nullptr);

  raise_open_file_limit();
  server::HttpServer http(sc);
  if (Status st = http.bind(); !st.ok()) {
    std::fprintf(stderr, "lancet serve: %s\n", st.message().c_str());
    return 1;
  }
  if (sc.api_key.empty() && !server::is_loopback_host(sc.host))
    std::fprintf(stderr,
                 "lancet serve: warning: no --api-key and listening on %s, which is not a loopback address: "
                 "anyone who can reach it can use this server\n",
                 sc.host.c_str());
  std::thread http_thread([&] { http.run(); });
  std::fprintf(stderr, "lancet serve: listening on http://%s:%d, loading %s\n", sc.host.c_str(), http.port(),
               rc.model.c_str());
  // The guard model loads first: on a GPU the served model's KV cache then takes what is left.
  std::unique_ptr<Runtime> guard_runtime;
  std::unique_ptr<server::ServingModel> guard_serving;
  std::unique_ptr<server::GuardModel> guard_model;
  if (!gm.model.empty()) {
    RuntimeConfig grc = guard_runtime_config(rc, gm);
    auto g = Runtime::create(grc);
    if (!g.ok()) {
      // The runtime names its own flags; the guard model's are --guard-model-*.
      std::fprintf(stderr,
                   "lancet serve: --guard-model: %s (the guard model's are --guard-model-kv-cache-memory and "
                   "--guard-model-max-model-len)\n",
                   g.status().message().c_str());
      http.stop();
      http_thread.join();
      return 1;
    }
    guard_runtime = std::move(*g);
    guard_serving = server::make_runtime_model(guard_runtime.get());
    guard_model = std::make_unique<server::GuardModel>(guard_serving.get(),
                                                       server::GuardModelConfig{.timeout_s = gm.timeout_s});
    http.set_guard_model(guard_model.get());
    std::fprintf(stderr, "lancet serve: guard model '%s' loaded (%s)\n", guard_model->name().c_str(),
                 guard_model->template_is_guard() ? "its chat template writes the safety task"
                                                  : "the safety task written as a user message");
  }
  auto runtime = Runtime::create(rc);
  if (!runtime.ok()) {
    std::fprintf(stderr, "lancet serve: %s\n", runtime.status().message().c_str());
    http.stop();
    http_thread.join();
    return 1;
  }
  auto model = server::make_runtime_model(runtime->get());
  http.set_model(model.get());
  std::fprintf(stderr, "lancet serve: serving '%s' (max model len %lld) at http://%s:%d\n", model->name().c_str(),
               static_cast<long long>(model->max_model_len()), sc.host.c_str(), http.port());

  int sig = 0;
  sigwait(&stop_signals, &sig);
  std::fprintf(stderr, "lancet serve: %s received, draining %lld request(s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM",
               static_cast<long long>(http.in_flight()));
  drain_and_stop(http, **runtime, sc.drain_timeout_s, stop_signals);
  http_thread.join();
  std::fprintf(stderr, "lancet serve: stopped\n");
  return 0;
}

}  // namespace lancet::cli
