// `lancet generate`: one prompt in, one completion out (text, or ids for checkpoints without a
// tokenizer), with prompt and decode speed. `--chat` wraps the prompt as a user message
// through the model's chat template. `--prompts-file` submits every prompt of a JSON-lines
// file at once (continuous batching) and prints one JSON line per prompt, in input order.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <sstream>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/prompts_file.h"
#include "cli/runtime_flags.h"
#include "core/logging.h"
#include "engine/request_checks.h"

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

StatusOr<std::vector<int32_t>> encode_text(Runtime& r, const std::string& prompt, bool chat) {
  if (!chat) return r.encode_prompt(prompt);
  nlohmann::ordered_json messages = nlohmann::ordered_json::array();
  messages.push_back({{"role", "user"}, {"content", prompt}});
  ChatTemplateOptions opt;
  opt.add_generation_prompt = true;
  return r.encode_chat(messages, opt);
}

// One prompt's request, ready to submit: encoded, ids and settings checked against the model.
StatusOr<GenerationRequest> prompt_request(Runtime& r, const PromptLine& line, bool chat) {
  GenerationRequest req;
  req.params = line.params;
  if (line.has_text) {
    if (!r.tokenizer()) return InvalidArgument("this model has no tokenizer; give prompt_ids");
    ASSIGN_OR_RETURN(req.prompt, encode_text(r, line.prompt, chat));
  } else {
    req.prompt = line.prompt_ids;
  }
  RETURN_IF_ERROR(check_token_ids(req.prompt, r.vocab_size()).with_context("prompt_ids"));
  RETURN_IF_ERROR(req.params.validate(r.vocab_size(), r.config().max_logprobs));
  return req;
}

// --prompts-file: every prompt is submitted before any is read, so the engine batches them
// all; results are printed in input order, each as soon as it and those before it are done.
int run_prompts_file(Runtime& r, const std::string& path, const std::vector<PromptLine>& lines, bool chat) {
  auto fail = [&](const PromptLine& line, const Status& st) {
    std::fprintf(stderr, "lancet generate: %s:%lld: %s\n", path.c_str(), static_cast<long long>(line.line),
                 st.message().c_str());
    return 1;
  };
  std::vector<GenerationRequest> reqs;
  for (const PromptLine& line : lines) {
    StatusOr<GenerationRequest> req = prompt_request(r, line, chat);
    if (!req.ok()) return fail(line, req.status());
    reqs.push_back(std::move(*req));
  }
  // One submit_all: the engine takes every prompt before its next step.
  auto submitted = r.async_engine().submit_all(reqs);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (size_t i = 0; i < submitted.size(); ++i) {
    if (!submitted[i].ok()) {  // the engine's own checks (e.g. prompt + max_tokens past --max-model-len)
      for (auto& s : submitted)
        if (s.ok()) (*s)->cancel();
      return fail(lines[i], submitted[i].status());
    }
    streams.push_back(*submitted[i]);
  }
  bool failed = false;
  for (size_t i = 0; i < streams.size(); ++i) {
    std::vector<int32_t> ids;
    std::string text;
    FinishReason reason = FinishReason::kNone;
    TokenEvent ev;
    while (streams[i]->next(&ev)) {
      if (ev.token >= 0) ids.push_back(ev.token);
      text += ev.text;
      if (ev.finished) reason = ev.finish_reason;
    }
    failed |= reason == FinishReason::kError;
    nlohmann::json j;
    j["index"] = i;
    j["line"] = lines[i].line;
    j["prompt_ids"] = reqs[i].prompt;
    j["ids"] = ids;
    if (r.tokenizer()) j["text"] = text;
    j["finish_reason"] = finish_reason_name(reason);
    std::printf("%s\n", j.dump().c_str());
    std::fflush(stdout);
  }
  return failed ? 1 : 0;
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
  std::string prompt, prompt_ids, prompts_file;
  bool json = false, chat = false, quiet = false;
  add_runtime_flags(app, &rc);
  add_sampling_flags(app, &sp, &seed);
  auto* p1 = app.add_option("--prompt,-p", prompt, "prompt text");
  auto* p2 = app.add_option("--prompt-ids", prompt_ids, "prompt as comma-separated token ids");
  auto* p3 = app.add_option("--prompts-file", prompts_file,
                            "JSON lines, one prompt each ({\"prompt\": text} or {\"prompt_ids\": [..]}, "
                            "optional sampling fields); prints one JSON line per prompt");
  p1->excludes(p2);
  p3->excludes(p1)->excludes(p2);
  app.add_flag("--chat", chat, "send the prompt as a user message through the chat template");
  app.add_flag("--json", json, "print one JSON object (ids, text, finish_reason, timings)");
  app.add_flag("--quiet,-q", quiet, "no log lines on stderr");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  if (static_cast<int>(!prompt.empty()) + !prompt_ids.empty() + !prompts_file.empty() != 1) {
    std::fprintf(stderr, "lancet generate: give exactly one of --prompt, --prompt-ids and --prompts-file\n");
    return 2;
  }
  if (quiet || json || !prompts_file.empty()) set_log_level(LogLevel::kWarning);
  if (seed >= 0) sp.seed = static_cast<uint64_t>(seed);
  std::vector<PromptLine> lines;
  if (!prompts_file.empty()) {
    // Read before the model loads, so a bad file fails at once.
    auto read = read_prompts_file(prompts_file, sp);
    if (!read.ok()) {
      std::fprintf(stderr, "lancet generate: %s\n", read.status().message().c_str());
      return 1;
    }
    lines = std::move(*read);
    if (app.count("--max-num-seqs") == 0) rc.max_num_seqs = std::min<int64_t>(64, static_cast<int64_t>(lines.size()));
  }

  auto rt = Runtime::create(rc);
  if (!rt.ok()) {
    std::fprintf(stderr, "lancet generate: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  Runtime& r = **rt;
  if (!prompts_file.empty()) return run_prompts_file(r, prompts_file, lines, chat);
  StatusOr<std::vector<int32_t>> ids = prompt_ids.empty() ? encode_text(r, prompt, chat) : parse_ids(prompt_ids);
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
    if (const KvTierStats kt = r.async_engine().stats().kv_offload; kt.enabled)
      j["kv_offload"] = {{"queried_blocks", kt.queried_blocks}, {"hit_blocks", kt.hit_blocks},
                         {"fetched_bytes", kt.fetched_bytes}, {"corrupt_entries", kt.corrupt_entries},
                         {"errors", kt.errors}};
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
