// `lancet generate`: one prompt in, one completion out (text, or ids for checkpoints without a
// tokenizer), with prompt and decode speed. `--chat` wraps the prompt as a user message
// through the model's chat template.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <sstream>

#include "cli/commands.h"
#include "cli/runtime_flags.h"
#include "core/logging.h"

namespace lancet::cli {
namespace {

StatusOr<std::vector<int32_t>> parse_ids(const std::string& s) {
  std::vector<int32_t> ids;
  std::stringstream ss(s);
  std::string item;
  while (std::getline(ss, item, ',')) {
    try {
      size_t used = 0;
      long v = std::stol(item, &used);
      if (used != item.size() || v < 0 || v > INT32_MAX) throw std::invalid_argument(item);
      ids.push_back(static_cast<int32_t>(v));
    } catch (const std::exception&) {
      return InvalidArgument("--prompt-ids: '" + item + "' is not a token id");
    }
  }
  if (ids.empty()) return InvalidArgument("--prompt-ids is empty");
  return ids;
}

}  // namespace

int cmd_generate(int argc, char** argv) {
  CLI::App app{"Generate a completion for one prompt", "lancet generate"};
  RuntimeConfig rc;
  rc.max_num_seqs = 1;
  SamplingParams sp;
  sp.temperature = 0.0f;
  sp.max_tokens = 64;
  int64_t seed = -1;
  std::string prompt, prompt_ids;
  bool json = false, chat = false, quiet = false;
  add_runtime_flags(app, &rc);
  add_sampling_flags(app, &sp, &seed);
  auto* p1 = app.add_option("--prompt,-p", prompt, "prompt text");
  auto* p2 = app.add_option("--prompt-ids", prompt_ids, "prompt as comma-separated token ids");
  p1->excludes(p2);
  app.add_flag("--chat", chat, "send the prompt as a user message through the chat template");
  app.add_flag("--json", json, "print one JSON object (ids, text, finish_reason, timings)");
  app.add_flag("--quiet,-q", quiet, "no log lines on stderr");
  CLI11_PARSE(app, argc, argv);
  if (prompt.empty() == prompt_ids.empty()) {
    std::fprintf(stderr, "lancet generate: give exactly one of --prompt and --prompt-ids\n");
    return 2;
  }
  if (quiet || json) set_log_level(LogLevel::kWarning);
  if (seed >= 0) sp.seed = static_cast<uint64_t>(seed);

  auto rt = Runtime::create(rc);
  if (!rt.ok()) {
    std::fprintf(stderr, "lancet generate: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  Runtime& r = **rt;
  StatusOr<std::vector<int32_t>> ids = InvalidArgument("no prompt");
  if (!prompt_ids.empty()) {
    ids = parse_ids(prompt_ids);
  } else if (chat) {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", prompt}});
    ChatTemplateOptions opt;
    opt.add_generation_prompt = true;
    ids = r.encode_chat(messages, opt);
  } else {
    ids = r.encode_prompt(prompt);
  }
  if (!ids.ok()) {
    std::fprintf(stderr, "lancet generate: %s\n", ids.status().to_string().c_str());
    return 1;
  }
  GenerationRequest req;
  req.prompt = *ids;
  req.params = sp;
  const auto t0 = std::chrono::steady_clock::now();
  auto stream = r.async_engine().submit(req);
  if (!stream.ok()) {
    std::fprintf(stderr, "lancet generate: %s\n", stream.status().to_string().c_str());
    return 1;
  }
  std::vector<int32_t> out;
  std::string text;
  FinishReason reason = FinishReason::kNone;
  double ttft = 0;
  TokenEvent ev;
  auto t_last = t0;
  while ((*stream)->next(&ev)) {
    const auto now = std::chrono::steady_clock::now();
    if (ev.token >= 0) {
      if (out.empty()) ttft = std::chrono::duration<double>(now - t0).count();
      out.push_back(ev.token);
      t_last = now;
    }
    text += ev.text;
    if (!json && !ev.text.empty()) {
      std::fwrite(ev.text.data(), 1, ev.text.size(), stdout);
      std::fflush(stdout);
    }
    if (ev.finished) reason = ev.finish_reason;
  }
  const double decode_s = std::chrono::duration<double>(t_last - t0).count() - ttft;
  const double prompt_tps = ttft > 0 ? static_cast<double>(req.prompt.size()) / ttft : 0;
  const double decode_tps = out.size() > 1 && decode_s > 0 ? static_cast<double>(out.size() - 1) / decode_s : 0;
  if (json) {
    nlohmann::json j;
    j["prompt_ids"] = req.prompt;
    j["ids"] = out;
    if (r.tokenizer()) j["text"] = text;
    j["finish_reason"] = finish_reason_name(reason);
    j["timings"] = {{"prompt_tokens", req.prompt.size()}, {"generated_tokens", out.size()},
                    {"ttft_s", ttft}, {"prompt_tok_per_s", prompt_tps}, {"decode_tok_per_s", decode_tps}};
    std::printf("%s\n", j.dump().c_str());
  } else {
    if (!r.tokenizer()) {
      for (size_t i = 0; i < out.size(); ++i) std::printf("%s%d", i ? "," : "", out[i]);
    }
    std::printf("\n");
    std::fprintf(stderr, "[%zu prompt tokens at %.1f tok/s, %zu generated at %.1f tok/s, finish: %s]\n",
                 req.prompt.size(), prompt_tps, out.size(), decode_tps, finish_reason_name(reason));
  }
  return reason == FinishReason::kError ? 1 : 0;
}

}  // namespace lancet::cli
