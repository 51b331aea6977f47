// `lancet eval-precision --model PATH [--quantization fp8] [--kv-cache-dtype fp8] [--prompts FILE]
// [--text FILE] [--golden FILE] [--json] [--check]`: runs the same prompts through the reference
// path (the checkpoint's precision; a GGUF model dequantized to BF16) and the FP8 path (FP8
// weights quantized per channel at load, rounded to nearest or with --fp8-rounding gptq
// --calibrate PROMPTS error-compensated; --w8a8 also quantizes the projections' inputs per
// token as the GPU does; and/or an FP8 KV cache) and reports top-1 agreement,
// mean/min logit cosine, mean KL(ref || fp8) and, on a text, the perplexity of both. With
// --golden (fixtures' HF golden logits) the golden prompts are used and both paths are also
// compared with the HF logits. --check exits 1 below the FP8 acceptance bar (top-1 >= 98%,
// mean cosine >= 0.992, perplexity increase <= 2%).
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cstdio>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/quantize_calibration.h"
#include "core/thread_pool.h"
#include "eval/fp8_gptq_calibration.h"
#include "eval/golden_eval.h"
#include "eval/precision_eval.h"
#include "io/model_source.h"
#include "io/text_file.h"
#include "runner/kv_calibration.h"
#include "model/llama_model.h"
#include "runtime/runtime.h"
#include "tokenizer/model_tokenizer.h"

namespace lancet::cli {
namespace {

struct EvalPrecisionFlags {
  std::string model, quantization, kv_cache_dtype = "auto", prompts, text, golden, backend = "cpu";
  std::string fp8_attention_math = "f16";
  std::string reference_kv_cache_dtype = "float32";
  std::string rounding = "nearest", calibrate;  // FP8 weight rounding; gptq's calibration prompts
  bool w8a8 = false;                            // FP8 activations per token (GPU emulation)
  int64_t max_prompts = 0;         // 0 = all
  int64_t max_text_tokens = 2048;  // 0 = all
  int64_t max_golden_len = 0;      // golden cases with longer prompts are skipped (0 = none)
  int threads = 0;
  bool json = false, check = false;
};

// Non-empty lines not starting with '#'; a literal backslash-n becomes a newline.
StatusOr<std::vector<std::string>> read_prompt_lines(const std::string& path) {
  ASSIGN_OR_RETURN(std::string text, read_text_file(path));
  std::vector<std::string> out;
  std::stringstream ss(text);
  for (std::string line; std::getline(ss, line);) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty() || line[0] == '#') continue;
    out.push_back(unescape_newlines(line));  // "\n" stands for a newline
  }
  if (out.empty()) return InvalidArgument(path + ": no prompts (one per line)");
  return out;
}

nlohmann::json agreement_json(const LogitAgreement& a) {
  return {{"positions", a.positions}, {"top1_agreement", a.top1_agreement()}, {"mean_cosine", a.mean_cosine},
          {"min_cosine", a.min_cosine}, {"mean_kl", a.mean_kl}};
}

void print_agreement(const char* label, const LogitAgreement& a) {
  std::printf("%-34s %6lld %9.2f%% %11.6f %11.6f %11.3e\n", label, static_cast<long long>(a.positions),
              100.0 * a.top1_agreement(), a.mean_cosine, a.min_cosine, a.mean_kl);
}

struct GoldenComparison {
  LogitAgreement ref_vs_hf, test_vs_hf;
};

// Golden cases as prompts: ref vs test at every position, and both vs the HF logits at the
// stored positions.
Status run_golden(LlamaModel& ref, LlamaModel& test, Backend& be, const std::string& golden_path,
                  const PrecisionEvalConfig& cfg, int64_t max_len, PrecisionReport* rep, GoldenComparison* gc) {
  ASSIGN_OR_RETURN(std::vector<GoldenCase> cases, read_golden_cases(golden_path));
  ASSIGN_OR_RETURN(auto golden, SafetensorsFile::open(golden_path));
  const int64_t V = ref.config().vocab_size;
  for (const GoldenCase& c : cases) {
    if (max_len > 0 && c.prompt_len > max_len) continue;
    const TensorView* ids_t = golden->find(c.name + ".input_ids");
    const TensorView* pos_t = golden->find(c.name + ".positions");
    const TensorView* lg_t = golden->find(c.name + ".logits");
    if (!ids_t || !pos_t || !lg_t || ids_t->dtype != DType::kI32 || pos_t->dtype != DType::kI32 ||
        lg_t->dtype != DType::kF32 || lg_t->numel() != pos_t->numel() * V)
      return InvalidArgument(golden_path + ": case " + c.name + " needs I32 input_ids/positions and F32 logits");
    std::vector<int32_t> ids(ids_t->numel()), pos(pos_t->numel());
    std::memcpy(ids.data(), ids_t->data, ids.size() * 4);
    std::memcpy(pos.data(), pos_t->data, pos.size() * 4);
    for (int32_t p : pos)
      if (p < 0 || p >= static_cast<int32_t>(ids.size()))
        return InvalidArgument(golden_path + ": " + c.name + ".positions outside the prompt");
    ASSIGN_OR_RETURN(auto a, sequence_logits(ref, be, ids, cfg.ref_kv_dtype, cfg.block_size, cfg.text_chunk, &cfg,
                                             cfg.ref_fp8_attention_math));
    ASSIGN_OR_RETURN(auto b, sequence_logits(test, be, ids, cfg.test_kv_dtype, cfg.block_size, cfg.text_chunk, &cfg,
                                             cfg.test_fp8_attention_math));
    accumulate_agreement(a.data(), b.data(), static_cast<int64_t>(ids.size()), V, &rep->prompts);
    rep->num_prompts++;
    const float* hf = static_cast<const float*>(lg_t->data);
    for (size_t i = 0; i < pos.size(); ++i) {
      accumulate_agreement(hf + i * V, a.data() + pos[i] * V, 1, V, &gc->ref_vs_hf);
      accumulate_agreement(hf + i * V, b.data() + pos[i] * V, 1, V, &gc->test_vs_hf);
    }
  }
  return OkStatus();
}

Status run(const EvalPrecisionFlags& f) {
  if (f.threads > 0) set_default_threads(f.threads);
  const bool fp8_weights = f.quantization == "fp8";
  const bool fp8_kv = f.kv_cache_dtype == "fp8" || f.kv_cache_dtype == "fp8_e4m3";
  if (!f.quantization.empty() && !fp8_weights && f.quantization != "none")
    return InvalidArgument("--quantization must be fp8 or none");
  if (!fp8_kv && f.kv_cache_dtype != "auto") return InvalidArgument("--kv-cache-dtype must be fp8 or auto");
  if (f.prompts.empty() && f.golden.empty()) return InvalidArgument("pass --prompts FILE or --golden FILE");
  ASSIGN_OR_RETURN(const Fp8Rounding rounding, parse_fp8_rounding(f.rounding));
  if (rounding == Fp8Rounding::kGptq && f.calibrate.empty())
    return InvalidArgument("--fp8-rounding gptq needs --calibrate PROMPTS");
  if (!f.calibrate.empty() && rounding != Fp8Rounding::kGptq)
    return InvalidArgument("--calibrate is for --fp8-rounding gptq");
  if (rounding == Fp8Rounding::kGptq && !fp8_weights) return InvalidArgument("--fp8-rounding needs --quantization fp8");
  if (f.w8a8 && f.backend != "cpu") return InvalidArgument("--w8a8 emulates the GPU on the cpu backend only");
  const std::string& fm = f.fp8_attention_math;
  if (fm != "f16" && fm != "e4m3" && fm != "e4m3-pv" && fm != "e4m3x2" && fm != "e4m3x2-pv")
    return InvalidArgument("--fp8-attention-math must be f16, e4m3, e4m3x2, e4m3-pv or e4m3x2-pv");
  const bool e4m3_query = fm != "f16";
  if (e4m3_query && !fp8_kv)
    return InvalidArgument("--fp8-attention-math " + f.fp8_attention_math + " needs --kv-cache-dtype fp8");
  const std::string& rk = f.reference_kv_cache_dtype;
  if (rk != "float32" && rk != "bfloat16" && rk != "fp8")
    return InvalidArgument("--reference-kv-cache-dtype must be float32, bfloat16 or fp8");
  const DType ref_kv = rk == "fp8" ? DType::kF8E4M3 : (rk == "bfloat16" ? DType::kBF16 : DType::kF32);
  if (ref_kv == DType::kF8E4M3 && !fp8_kv)
    return InvalidArgument("--reference-kv-cache-dtype fp8 needs --kv-cache-dtype fp8 (the test path's scales)");
  const bool kv_differs = fp8_kv ? (ref_kv != DType::kF8E4M3 || e4m3_query) : ref_kv != DType::kF32;
  if (!fp8_weights && !kv_differs && !f.w8a8)
    return InvalidArgument("nothing to compare: pass --quantization fp8, --w8a8 and/or --kv-cache-dtype fp8 (with "
                           "--reference-kv-cache-dtype fp8: --fp8-attention-math e4m3)");

  ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> src, open_model_source(f.model));
  ASSIGN_OR_RETURN(std::unique_ptr<Backend> be, make_backend(f.backend));
  const bool gguf = std::string(src->format()) == "gguf";

  // Prompts and text as token ids.
  std::vector<std::vector<int32_t>> prompts;
  std::vector<int32_t> text;
  ASSIGN_OR_RETURN(std::unique_ptr<Tokenizer> tok, load_model_tokenizer(*src));
  if (!f.prompts.empty() || !f.text.empty()) {
    if (!tok) return InvalidArgument(f.model + " has no tokenizer; use --golden with token ids instead");
    const EncodeOptions eo{.parse_special = false, .add_bos = tok->add_bos_by_default()};
    if (!f.prompts.empty()) {
      ASSIGN_OR_RETURN(std::vector<std::string> lines, read_prompt_lines(f.prompts));
      if (f.max_prompts > 0 && static_cast<int64_t>(lines.size()) > f.max_prompts) lines.resize(f.max_prompts);
      for (const std::string& l : lines) prompts.push_back(tok->encode(l, eo));
    }
    if (!f.text.empty()) {
      ASSIGN_OR_RETURN(std::string t, read_text_file(f.text));
      text = tok->encode(t, eo);
      if (f.max_text_tokens > 0 && static_cast<int64_t>(text.size()) > f.max_text_tokens)
        text.resize(f.max_text_tokens);
    }
  }

  // Error-compensating rounding: calibrated on prompts that are not the evaluation's.
  std::optional<Fp8GptqFactors> gptq;
  if (rounding == Fp8Rounding::kGptq) {
    ASSIGN_OR_RETURN(std::vector<std::vector<int32_t>> cal, read_calibration_prompts(f.calibrate, *src));
    auto g = calibrate_fp8_gptq(*src, *be, cal);
    if (!g.ok()) return g.status().with_context("--calibrate");
    gptq = std::move(*g);
  }
  LlamaModelOptions ro, to;
  ro.weights.dequantize_to_bf16 = gguf;
  to.weights.dequantize_to_bf16 = gguf;
  to.weights.quantize_fp8 = fp8_weights;
  to.weights.fp8_activations = f.w8a8;
  to.weights.fp8_gptq = gptq ? &*gptq : nullptr;
  ASSIGN_OR_RETURN(auto ref, LlamaModel::create(*src, *be, ro));
  ASSIGN_OR_RETURN(auto test, LlamaModel::create(*src, *be, to));

  PrecisionEvalConfig cfg;
  cfg.test_kv_dtype = fp8_kv ? DType::kF8E4M3 : DType::kF32;
  cfg.ref_kv_dtype = ref_kv;
  // Only the test path rounds the query to E4M3; an FP8 reference multiplies in FP16.
  cfg.test_fp8_attention_math = resolve_fp8_attention_math(fm, f.backend);
  std::string kv_scale_source;
  if (fp8_kv) {
    // The scales the runtime would use: the checkpoint's, else calibrated on the built-in text.
    ASSIGN_OR_RETURN(std::optional<KvScales> ck, kv_scales_from_checkpoint(*src));
    KvScales sc;
    if (ck) {
      sc = *ck;
    } else {
      std::vector<std::vector<int32_t>> cal;
      if (tok) {
        cal.push_back(tok->encode(kv_calibration_text(), {.parse_special = false, .add_bos = tok->add_bos_by_default()}));
      } else {
        cal.push_back(kv_calibration_random_tokens(src->config().vocab_size, 256));
      }
      ASSIGN_OR_RETURN(sc, calibrate_kv_scales(*test, cal));
    }
    cfg.kv_k_scales = sc.k;
    cfg.kv_v_scales = sc.v;
    kv_scale_source = sc.source;
  }
  ASSIGN_OR_RETURN(PrecisionReport rep, eval_precision(*ref, *test, *be, prompts, text, cfg));
  GoldenComparison gc;
  if (!f.golden.empty()) RETURN_IF_ERROR(run_golden(*ref, *test, *be, f.golden, cfg, f.max_golden_len, &rep, &gc));

  const TensorView* q0 = src->find("model.layers.0.self_attn.q_proj.weight");
  const std::string stored = q0 ? dtype_name(q0->dtype) : "?";
  const std::string ref_weights = gguf ? "bf16 (gguf " + stored + " dequantized)" : stored + " weights";
  const std::string ref_desc =
      ref_weights + ", " +
      (ref_kv == DType::kF8E4M3 ? "fp8 kv cache (the test path's scales), fp16 query"
                                : ref_kv == DType::kBF16 ? "bf16 kv cache" : "f32 kv cache");
  std::string test_desc = fp8_weights ? std::string("fp8 e4m3 weights (per channel, rounding ") +
                                            fp8_rounding_name(rounding) + ")"
                                      : ref_weights;
  if (f.w8a8) test_desc += ", fp8 activations per token (w8a8 emulation)";
  test_desc += fp8_kv ? ", fp8 kv cache (scales: " + kv_scale_source + ")" : ", f32 kv cache";
  if (e4m3_query) test_desc += fm == "e4m3-pv"     ? ", e4m3 query and P in prompt-chunk attention (estimate)"
                                : fm == "e4m3x2"    ? ", two-term e4m3 query in prompt-chunk attention"
                                : fm == "e4m3x2-pv" ? ", two-term e4m3 query and e4m3 P in prompt-chunk attention "
                                                      "(estimate)"
                                                    : ", e4m3 query in prompt-chunk attention";
  const bool has_text = rep.text_tokens > 0;
  const bool pass = rep.prompts.top1_agreement() >= 0.98 && rep.prompts.mean_cosine >= 0.992 &&
                    (!has_text || rep.perplexity_increase() <= 0.02);
  if (f.json) {
    nlohmann::json j{{"model", f.model}, {"reference", ref_desc}, {"test", test_desc},
                     {"fp8_rounding", fp8_weights ? nlohmann::json(fp8_rounding_name(rounding)) : nlohmann::json(nullptr)}, {"w8a8", f.w8a8},
                     {"prompts", rep.num_prompts}, {"prompt_agreement", agreement_json(rep.prompts)},
                     {"ref_seconds", rep.ref_seconds}, {"test_seconds", rep.test_seconds}, {"pass", pass}};
    if (has_text) {
      j["text"] = {{"tokens", rep.text_tokens}, {"ref_perplexity", rep.ref_perplexity},
                   {"test_perplexity", rep.test_perplexity}, {"perplexity_increase", rep.perplexity_increase()},
                   {"agreement", agreement_json(rep.text)}};
    }
    if (!f.golden.empty())
      j["golden"] = {{"ref_vs_hf", agreement_json(gc.ref_vs_hf)}, {"test_vs_hf", agreement_json(gc.test_vs_hf)}};
    std::printf("%s\n", j.dump(1).c_str());
  } else {
    std::printf("model:     %s\nreference: %s\ntest:      %s\n\n", f.model.c_str(), ref_desc.c_str(), test_desc.c_str());
    std::printf("%-34s %6s %10s %11s %11s %11s\n", "comparison", "pos", "top-1", "cos mean", "cos min", "KL mean");
    const std::string pl = "test vs reference, " + std::to_string(rep.num_prompts) + " prompts";
    print_agreement(pl.c_str(), rep.prompts);
    if (has_text) print_agreement("test vs reference, text", rep.text);
    if (!f.golden.empty()) {
      print_agreement("reference vs HF golden", gc.ref_vs_hf);
      print_agreement("test vs HF golden", gc.test_vs_hf);
    }
    if (has_text)
      std::printf("\nperplexity over %lld tokens: reference %.4f, test %.4f (%+.2f%%)\n",
                  static_cast<long long>(rep.text_tokens), rep.ref_perplexity, rep.test_perplexity,
                  100.0 * rep.perplexity_increase());
    if (rep.ref_seconds > 0)
      std::printf("forward time: reference %.1f s, test %.1f s\n", rep.ref_seconds, rep.test_seconds);
    if (f.check) std::printf("%s (top-1 >= 98%%, mean cosine >= 0.992, perplexity +2%% at most)\n", pass ? "PASS" : "FAIL");
  }
  if (f.check && !pass) return FailedPrecondition("below the FP8 acceptance bar");
  return OkStatus();
}

}  // namespace

int cmd_eval_precision(int argc, char** argv) {
  CLI::App app{"Compare FP8 weights / FP8 KV cache with the reference precision", "lancet eval-precision"};
  EvalPrecisionFlags f;
  app.add_option("--model,-m", f.model, "HF checkpoint directory or .gguf")->required();
  app.add_option("--quantization,-q", f.quantization, "fp8: FP8 weights quantized per channel at load");
  app.add_option("--fp8-rounding", f.rounding,
                 "nearest, or gptq: error-compensating rounding calibrated on --calibrate PROMPTS")
      ->capture_default_str();
  app.add_option("--calibrate", f.calibrate,
                 "calibration prompts for --fp8-rounding gptq (the format of lancet quantize --calibrate; "
                 "use text that is not evaluated)");
  app.add_flag("--w8a8", f.w8a8,
               "quantize the FP8 projections' inputs per token to E4M3 as the GPU does (default: weight-only)");
  app.add_option("--kv-cache-dtype", f.kv_cache_dtype, "fp8: FP8 E4M3 KV cache on the test path")
      ->capture_default_str();
  app.add_option("--fp8-attention-math", f.fp8_attention_math,
                 "with --kv-cache-dtype fp8: f16, e4m3 (prompt chunks round the query to E4M3 per row, as "
                 "the GPU's FP8 Q K^T path), e4m3x2 (the query as two E4M3 terms, two FP8 Q K^T products), "
                 "e4m3-pv (P in E4M3 too, FlashAttention-3's FP8 P V; on the cpu backend an estimate: its "
                 "key chunks are not the GPU's tiles) or e4m3x2-pv (the two-term query and P in E4M3)")
      ->capture_default_str();
  app.add_option("--reference-kv-cache-dtype", f.reference_kv_cache_dtype,
                 "the reference path's KV cache: float32, bfloat16, or fp8 (the test path's cache and scales, "
                 "multiplied with a 16-bit query: isolates --fp8-attention-math e4m3)")
      ->capture_default_str();
  app.add_option("--prompts", f.prompts, "prompt file, one prompt per line ('#' lines skipped)");
  app.add_option("--text", f.text, "text file scored for perplexity");
  app.add_option("--golden", f.golden, "golden .safetensors (fixtures): its prompts, and HF logits to compare");
  app.add_option("--max-golden-len", f.max_golden_len, "skip golden cases with longer prompts (0 = none)");
  app.add_option("--max-prompts", f.max_prompts, "use the first N prompts (0 = all)");
  app.add_option("--max-text-tokens", f.max_text_tokens, "score the first N tokens of the text (0 = all)")
      ->capture_default_str();
  app.add_option("--backend", f.backend, "cpu or cuda")->capture_default_str();
  app.add_option("--threads", f.threads, "CPU threads (0 = all)");
  app.add_flag("--json", f.json, "print the report as JSON");
  app.add_flag("--check", f.check, "exit 1 below top-1 98%, mean cosine 0.992 or perplexity +2%");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  Status st = run(f);
  if (!st.ok()) {
    std::fprintf(stderr, "lancet eval-precision: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace lancet::cli
