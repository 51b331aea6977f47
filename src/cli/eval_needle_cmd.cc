// `lancet eval-needle`: the needle-in-a-haystack long-context test. For every length x depth
// a passphrase sentence is hidden at that depth of filler prose filling `length` tokens of
// context (prompt + answer), the model is asked for it through its chat template and answers
// greedily; the answer is scored exact / found (eval/needle_haystack.h). Cases run one at a
// time, so TTFT is the prefill time of that length. Lengths past max_model_len are reported as
// skipped with the reason. Prints a table, and the full report as JSON with --json FILE.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <fstream>
#include <map>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/runtime_flags.h"
#include "core/logging.h"
#include "eval/needle_haystack.h"

namespace lancet::cli {
namespace {

using Clock = std::chrono::steady_clock;

struct NeedleOptions {
  std::string lengths = "1k,2k,4k";
  std::string depths = "0,0.25,0.5,0.75,1";
  int32_t max_tokens = 24;
  uint64_t seed = 0;
  std::string json_path;
};

// One case: run (and scored), skipped, or failed with an error.
nlohmann::ordered_json run_case(Runtime& rt, const NeedleOptions& opt, int64_t length, double depth,
                                int64_t index) {
  nlohmann::ordered_json r;
  r["length"] = length;
  r["depth"] = depth;
  if (length > rt.max_model_len()) {
    r["status"] = "skipped";
    r["reason"] = "length " + std::to_string(length) + " is past max_model_len " + std::to_string(rt.max_model_len()) +
                  " (raise --max-model-len; past the model's trained length also --allow-long-max-model-len)";
    return r;
  }
  const std::string pass = needle_passphrase(opt.seed, index);
  r["needle"] = pass;
  auto fail = [&](const Status& s) {
    r["status"] = "error";
    r["reason"] = s.to_string();
    return r;
  };
  auto encode = [&](const std::string& content) -> StatusOr<std::vector<int32_t>> {
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    messages.push_back({{"role", "user"}, {"content", content}});
    ChatTemplateOptions o;
    o.add_generation_prompt = true;
    return rt.encode_chat(messages, o);
  };
  HaystackSpec spec;
  spec.max_prompt_tokens = length - opt.max_tokens;
  spec.depth = depth;
  spec.passphrase = pass;
  auto hay = build_haystack(spec, [&](const std::string& content) -> StatusOr<int64_t> {
    ASSIGN_OR_RETURN(auto ids, encode(content));
    return static_cast<int64_t>(ids.size());
  });
  if (!hay.ok()) return fail(hay.status());
  auto ids = encode(hay->user_content);
  if (!ids.ok()) return fail(ids.status());
  r["prompt_tokens"] = ids->size();
  r["filler_sentences"] = hay->filler_sentences;
  r["needle_sentence"] = hay->needle_sentence_index;

  GenerationRequest req;
  req.prompt = std::move(*ids);
  req.params.temperature = 0.0f;
  req.params.max_tokens = opt.max_tokens;
  const auto t0 = Clock::now();
  auto stream = rt.async_engine().submit(req);
  if (!stream.ok()) return fail(stream.status());
  std::string answer;
  int64_t generated = 0;
  double ttft = 0;
  bool failed = false;
  TokenEvent ev;
  while ((*stream)->next(&ev)) {
    if (ev.token >= 0) {
      if (generated == 0) ttft = std::chrono::duration<double>(Clock::now() - t0).count();
      ++generated;
    }
    answer += ev.text;
    if (ev.finished && ev.finish_reason == FinishReason::kError) failed = true;
  }
  const double total = std::chrono::duration<double>(Clock::now() - t0).count();
  if (failed) return fail(Internal("the engine failed while generating the answer (see the log)"));
  const NeedleScore score = score_needle_answer(answer, pass);
  r["status"] = "ok";
  r["answer"] = answer;
  r["exact"] = score.exact;
  r["found"] = score.found;
  r["generated_tokens"] = generated;
  r["ttft_s"] = ttft;
  r["time_s"] = total;
  return r;
}

void print_table(const nlohmann::ordered_json& report, const std::vector<int64_t>& lengths,
                 const std::vector<double>& depths) {
  std::printf("needle in a haystack: %s (%s, max_model_len %lld)\n\n",
              report["model"].get<std::string>().c_str(), report["backend"].get<std::string>().c_str(),
              static_cast<long long>(report["max_model_len"].get<int64_t>()));
  std::printf("%-9s %-8s", "length", "prompt");
  for (double d : depths) std::printf(" depth=%-5.2f", d);
  std::printf(" %s\n", "ttft (s)");
  size_t i = 0;
  const auto& results = report["results"];
  for (int64_t len : lengths) {
    std::string prompt = "-";
    double ttft_sum = 0;
    int ran = 0;
    std::string cells;
    std::string skip_reason;
    for (size_t d = 0; d < depths.size(); ++d, ++i) {
      const auto& r = results[i];
      const std::string st = r["status"].get<std::string>();
      std::string cell = st == "ok" ? (r["exact"].get<bool>() ? "exact" : r["found"].get<bool>() ? "found" : "miss")
                                    : st;
      if (st == "skipped") skip_reason = r["reason"].get<std::string>();
      if (r.contains("prompt_tokens")) prompt = std::to_string(r["prompt_tokens"].get<int64_t>());
      if (st == "ok") {
        ttft_sum += r["ttft_s"].get<double>();
        ++ran;
      }
      char buf[32];
      std::snprintf(buf, sizeof buf, " %-11s", cell.c_str());
      cells += buf;
    }
    std::printf("%-9lld %-8s%s", static_cast<long long>(len), prompt.c_str(), cells.c_str());
    if (ran) std::printf(" %.3f", ttft_sum / ran);
    std::printf("\n");
    if (!skip_reason.empty()) std::printf("          %s\n", skip_reason.c_str());
  }
  const auto& s = report["summary"];
  std::printf("\nfound %lld of %lld run (%lld exact); %lld skipped, %lld errors\n",
              static_cast<long long>(s["found"].get<int64_t>()), static_cast<long long>(s["run"].get<int64_t>()),
              static_cast<long long>(s["exact"].get<int64_t>()), static_cast<long long>(s["skipped"].get<int64_t>()),
              static_cast<long long>(s["errors"].get<int64_t>()));
  for (const auto& r : results) {
    if (r["status"] == "error")
      std::printf("  error at %lld @ %.2f: %s\n", static_cast<long long>(r["length"].get<int64_t>()),
                  r["depth"].get<double>(), r["reason"].get<std::string>().c_str());
    else if (r["status"] == "ok" && !r["exact"].get<bool>())
      std::printf("  %lld @ %.2f: wanted %s, answered \"%s\"\n", static_cast<long long>(r["length"].get<int64_t>()),
                  r["depth"].get<double>(), r["needle"].get<std::string>().c_str(),
                  r["answer"].get<std::string>().c_str());
  }
}

}  // namespace

int cmd_eval_needle(int argc, char** argv) {
  CLI::App app{"Needle-in-a-haystack long-context test", "lancet eval-needle"};
  RuntimeConfig rc;
  rc.max_num_seqs = 1;
  // Cases share long prefixes (the filler before the needle); caching them would make every
  // TTFT after the first one a measure of the cache instead of the prefill.
  rc.enable_prefix_caching = false;
  NeedleOptions opt;
  add_runtime_flags(app, &rc);
  // As `lancet serve` has them, unless the shared runtime flags already do.
  if (!app.get_option_no_throw("--quantization"))
    app.add_option("--quantization", rc.quantization, "online weight quantization (fp8)");
  if (!app.get_option_no_throw("--gpu-memory-utilization"))
    app.add_option("--gpu-memory-utilization", rc.gpu_memory_utilization, "fraction of GPU memory to use")
        ->capture_default_str();
  app.add_option("--lengths", opt.lengths, "context lengths (prompt + answer), e.g. 8k,32k,128k")
      ->capture_default_str();
  app.add_option("--depths", opt.depths, "needle depths, fractions of the text")->capture_default_str();
  app.add_option("--max-tokens", opt.max_tokens, "answer tokens (greedy)")->capture_default_str();
  app.add_option("--seed", opt.seed, "picks the passphrases")->capture_default_str();
  app.add_option("--json", opt.json_path, "write the full report to this file ('-' = stdout, no table)");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  auto lengths = parse_needle_lengths(opt.lengths);
  auto depths = parse_needle_depths(opt.depths);
  for (const Status& s : {lengths.status(), depths.status()}) {
    if (!s.ok()) {
      std::fprintf(stderr, "lancet eval-needle: %s\n", s.to_string().c_str());
      return 2;
    }
  }
  if (opt.max_tokens < 1) {
    std::fprintf(stderr, "lancet eval-needle: --max-tokens must be at least 1\n");
    return 2;
  }
  set_log_level(LogLevel::kWarning);
  auto rt = Runtime::create(rc);
  if (!rt.ok()) {
    std::fprintf(stderr, "lancet eval-needle: %s\n", rt.status().to_string().c_str());
    return 1;
  }
  if (!(*rt)->tokenizer() || !(*rt)->has_chat_template()) {
    std::fprintf(stderr, "lancet eval-needle: %s has no tokenizer or chat template\n", rc.model.c_str());
    return 1;
  }
  nlohmann::ordered_json report;
  report["model"] = (*rt)->model_name();
  report["backend"] = rc.backend;
  report["max_model_len"] = (*rt)->max_model_len();
  report["max_tokens"] = opt.max_tokens;
  report["seed"] = opt.seed;
  report["needle"] = needle_sentence("<passphrase>");
  report["question"] = needle_question();
  report["results"] = nlohmann::ordered_json::array();
  int64_t index = 0, run = 0, found = 0, exact = 0, skipped = 0, errors = 0;
  std::map<int64_t, std::pair<int64_t, int64_t>> by_length;  // length -> (found, run)
  for (int64_t len : *lengths) {
    for (double d : *depths) {
      nlohmann::ordered_json r = run_case(**rt, opt, len, d, index++);
      const std::string st = r["status"].get<std::string>();
      if (st == "ok") {
        ++run;
        found += r["found"].get<bool>();
        exact += r["exact"].get<bool>();
        by_length[len].first += r["found"].get<bool>();
        by_length[len].second += 1;
      } else if (st == "skipped") {
        ++skipped;
      } else {
        ++errors;
      }
      report["results"].push_back(std::move(r));
    }
  }
  nlohmann::ordered_json per_len = nlohmann::ordered_json::object();
  for (const auto& [len, fr] : by_length) per_len[std::to_string(len)] = {{"found", fr.first}, {"run", fr.second}};
  report["summary"] = {{"cases", index}, {"run", run},         {"found", found},    {"exact", exact},
                       {"skipped", skipped}, {"errors", errors}, {"by_length", per_len}};
  if (opt.json_path == "-") {
    std::printf("%s\n", report.dump(2).c_str());
  } else {
    print_table(report, *lengths, *depths);
    if (!opt.json_path.empty()) {
      std::ofstream f(opt.json_path);
      f << report.dump(2) << "\n";
      if (!f) {
        std::fprintf(stderr, "lancet eval-needle: cannot write %s\n", opt.json_path.c_str());
        return 1;
      }
    }
  }
  return errors == 0 ? 0 : 1;
}

}  // namespace lancet::cli
