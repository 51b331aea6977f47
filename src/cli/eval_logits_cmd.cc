// `lancet eval-logits --model DIR --golden FILE.safetensors`: runs the golden cases written by
// Hugging Face (see fixtures/README.md) and prints, per case, max abs error / max |ref| over
// the stored positions, the worst cosine similarity, top-1 agreement and the greedy match
// length. Exits 1 when a case is past tolerance: relative error 1e-4 for float weights
// (F32/F16/BF16); for quantized or FP8 weights only top-1/greedy are reported unless
// --tolerance is given.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <set>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "backend/backend.h"
#include "cli/parse_args.h"
#include "core/thread_pool.h"
#include "eval/golden_eval.h"
#include "io/lora_adapter.h"
#include "io/model_source.h"
#include "model/llama_model.h"

using namespace lancet;

int cmd_eval_logits(int argc, char** argv) {
  CLI::App app{"Compare the model's logits and greedy continuations with golden references", "eval-logits"};
  std::string model_path, golden_path, backend_name = "cpu", cases_arg, kv_dtype = "f32";
  bool json_out = false;
  double tolerance = -1;
  int64_t chunk = 0, block_size = 16;
  int threads = 0;
  app.add_option("--model", model_path, "model directory, safetensors or GGUF file")->required();
  app.add_option("--golden", golden_path, "golden .safetensors (golden.json next to it)")->required();
  app.add_option("--backend", backend_name, "backend (cpu)");
  app.add_option("--cases", cases_arg, "comma-separated case names (default: all)");
  app.add_flag("--json", json_out, "print results as JSON");
  app.add_option("--tolerance", tolerance, "max relative logit error (default 1e-4 for float weights)");
  app.add_option("--prefill-chunk", chunk, "prefill the prompt in chunks of this many tokens (0 = whole)");
  app.add_option("--block-size", block_size, "KV cache block size");
  app.add_option("--kv-dtype", kv_dtype, "KV cache dtype: f32 or bf16");
  app.add_option("--threads", threads, "CPU threads (0 = all)");
  std::string lora_path;
  app.add_option("--lora", lora_path, "a PEFT LoRA adapter folder to compute with (unmerged, as served)");
  std::string precision = "exact";
  app.add_option("--activation-precision", precision,
                 "GPU GEMM inputs: exact (bf16 hi+lo, close to f32) or fast (bf16, as served)")
      ->capture_default_str();
  if (const int parsed = lancet::cli::parse_args(app, argc, argv); parsed >= 0) return parsed;
  if (threads > 0) set_default_threads(threads);
  auto fail = [](const Status& s) {
    std::fprintf(stderr, "eval-logits: %s\n", s.to_string().c_str());
    return 1;
  };
  if (kv_dtype != "f32" && kv_dtype != "bf16") return fail(InvalidArgument("--kv-dtype must be f32 or bf16"));
  if (block_size <= 0) return fail(InvalidArgument("--block-size must be positive"));
  auto src = open_model_source(model_path);
  if (!src.ok()) return fail(src.status());
  if (precision != "exact" && precision != "fast")
    return fail(InvalidArgument("--activation-precision must be exact or fast"));
  auto backend = make_backend(backend_name);
  if (!backend.ok()) return fail(backend.status());
  (*backend)->set_activation_precision(precision == "exact" ? ActivationPrecision::kExact : ActivationPrecision::kFast);
  auto cases = read_golden_cases(golden_path);
  if (!cases.ok()) return fail(cases.status());
  auto golden = SafetensorsFile::open(golden_path);
  if (!golden.ok()) return fail(golden.status());

  std::set<std::string> wanted;
  std::stringstream ss(cases_arg);
  for (std::string c; std::getline(ss, c, ',');)
    if (!c.empty()) wanted.insert(c);
  int64_t max_len = 1;
  std::vector<GoldenCase> run;
  for (const GoldenCase& c : *cases) {
    if (!wanted.empty() && !wanted.count(c.name)) continue;
    run.push_back(c);
    max_len = std::max(max_len, c.prompt_len + c.greedy_steps);
  }
  for (const std::string& w : wanted) {
    bool found = false;
    for (const GoldenCase& c : run) found |= c.name == w;
    if (!found) return fail(NotFound("no case named " + w + " in the golden file"));
  }
  LlamaModelOptions mo;
  mo.max_model_len = max_len;
  auto model = LlamaModel::create(**src, **backend, mo);
  if (!model.ok()) return fail(model.status());
  std::unique_ptr<LoraAdapter> lora;
  if (!lora_path.empty()) {
    auto a = LoraAdapter::open(lora_path);
    if (!a.ok()) return fail(a.status());
    lora = std::move(*a);
    Status s = (*model)->enable_lora(LoraSlotsConfig{1, lora->rank()});
    if (s.ok()) s = (*model)->set_lora_slot(0, lora.get());
    if (!s.ok()) return fail(s.with_context("--lora " + lora_path));
  }

  // Float weights must match to 1e-4; other formats are judged by top-1/greedy unless asked.
  const TensorView* q0 = (*src)->find("model.layers.0.self_attn.q_proj.weight");
  const bool float_weights = q0 && (q0->dtype == DType::kF32 || q0->dtype == DType::kF16 || q0->dtype == DType::kBF16);
  if (tolerance < 0 && float_weights) tolerance = 1e-4;

  GoldenEvalOptions eo;
  eo.block_size = block_size;
  eo.kv_dtype = kv_dtype == "bf16" ? DType::kBF16 : DType::kF32;
  eo.prefill_chunk = chunk;
  eo.lora_slot = lora ? 0 : -1;
  bool ok = true;
  nlohmann::json out = nlohmann::json::array();
  if (!json_out)
    std::printf("%-8s %6s %12s %12s %10s %9s %7s %9s %9s\n", "case", "len", "max_abs_err", "rel_err", "cos_min",
                "top1", "greedy", "prefill_s", "decode_s");
  for (const GoldenCase& c : run) {
    auto r = eval_golden_case(**model, **backend, **golden, c, eo);
    if (!r.ok()) return fail(r.status().with_context(c.name));
    const bool pass = (tolerance < 0 || r->rel_err <= tolerance) &&
                      (!float_weights || (r->top1_agree == r->num_positions && r->greedy_match == r->greedy_total));
    ok &= pass;
    if (json_out) {
      out.push_back({{"case", r->name}, {"prompt_len", r->prompt_len}, {"max_abs_err", r->max_abs_err},
                     {"max_abs_ref", r->max_abs_ref}, {"rel_err", r->rel_err}, {"min_cosine", r->min_cosine},
                     {"top1_agree", r->top1_agree}, {"positions", r->num_positions},
                     {"greedy_match", r->greedy_match}, {"greedy_steps", r->greedy_total},
                     {"prefill_seconds", r->prefill_seconds}, {"decode_seconds", r->decode_seconds},
                     {"pass", pass}});
    } else {
      std::printf("%-8s %6lld %12.3e %12.3e %10.7f %4lld/%-4lld %3lld/%-3lld %9.3f %9.3f%s\n", r->name.c_str(),
                  static_cast<long long>(r->prompt_len), r->max_abs_err, r->rel_err, r->min_cosine,
                  static_cast<long long>(r->top1_agree), static_cast<long long>(r->num_positions),
                  static_cast<long long>(r->greedy_match), static_cast<long long>(r->greedy_total),
                  r->prefill_seconds, r->decode_seconds, pass ? "" : "  FAIL");
    }
  }
  if (json_out) {
    nlohmann::json doc = {{"model", model_path}, {"golden", golden_path}, {"tolerance", tolerance},
                          {"cases", out}, {"pass", ok}};
    std::printf("%s\n", doc.dump(1).c_str());
  } else {
    std::printf("%s (tolerance %s)\n", ok ? "PASS" : "FAIL",
                tolerance < 0 ? "top-1/greedy reported only" : std::to_string(tolerance).c_str());
  }
  return ok ? 0 : 1;
}
