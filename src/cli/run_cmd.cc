// `lancet run`: an interactive chat in the terminal with the model's chat template, streaming
// tokens as they come. /reset starts over, /exit (or end of input) quits.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <iostream>
#include <string>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/runtime_flags.h"
#include "core/logging.h"

namespace lancet::cli {

int cmd_run(int argc, char** argv) {
  CLI::App app{"Chat with a model in the terminal", "lancet run"};
  RuntimeConfig rc;
  rc.max_num_seqs = 1;
  SamplingParams sp;
  sp.temperature = 0.2f;
  sp.top_p = 0.9f;
  sp.max_tokens = 512;
  int64_t seed = -1;
  std::string system;
  add_runtime_flags(app, &rc);
  add_sampling_flags(app, &sp, &seed);
  app.add_option("--system", system, "system message");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  if (seed >= 0) sp.seed = static_cast<uint64_t>(seed);
  set_log_level(LogLevel::kWarning);
  std::fprintf(stderr, "loading %s ...\n", rc.model.c_str());
  auto rt = Runtime::create(rc);
  if (!rt.ok()) {
    std::fprintf(stderr, "lancet run: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  Runtime& r = **rt;
  if (!r.tokenizer() || !r.has_chat_template()) {
    std::fprintf(stderr, "lancet run: %s has no tokenizer or chat template; use lancet generate --prompt-ids\n",
                 rc.model.c_str());
    return 1;
  }
  const bool tty = isatty(STDIN_FILENO);
  std::fprintf(stderr, "%s ready (context %lld tokens). /reset clears the chat, /exit quits.\n",
               r.model_name().c_str(), static_cast<long long>(r.max_model_len()));
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
  std::string line;
  while (true) {
    if (tty) std::fprintf(stdout, "\n> ");
    std::fflush(stdout);
    if (!std::getline(std::cin, line)) break;
    if (line == "/exit" || line == "/quit") break;
    if (line == "/reset") {
      messages = nlohmann::ordered_json::array();
      if (!system.empty()) messages.push_back({{"role", "system"}, {"content", system}});
      continue;
    }
    if (line.empty()) continue;
    messages.push_back({{"role", "user"}, {"content", line}});
    ChatTemplateOptions opt;
    opt.add_generation_prompt = true;
    auto ids = r.encode_chat(messages, opt);
    if (!ids.ok()) {
      std::fprintf(stderr, "error: %s\n", ids.status().message().c_str());
      messages.erase(messages.size() - 1);
      continue;
    }
    GenerationRequest req;
    req.prompt = *ids;
    req.params = sp;
    req.params.max_tokens = static_cast<int32_t>(
        std::min<int64_t>(sp.max_tokens, r.max_model_len() - static_cast<int64_t>(ids->size())));
    if (req.params.max_tokens < 1) {
      std::fprintf(stderr, "the conversation fills the context; /reset to start over\n");
      messages.erase(messages.size() - 1);
      continue;
    }
    auto stream = r.async_engine().submit(req);
    if (!stream.ok()) {
      std::fprintf(stderr, "error: %s\n", stream.status().message().c_str());
      messages.erase(messages.size() - 1);
      continue;
    }
    std::string answer;
    TokenEvent ev;
    while ((*stream)->next(&ev)) {
      if (!ev.text.empty()) {
        std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
        std::fflush(stdout);
        answer += ev.text;
      }
    }
    std::fprintf(stdout, "\n");
    messages.push_back({{"role", "assistant"}, {"content", answer}});
  }
  return 0;
}

}  // namespace lancet::cli
