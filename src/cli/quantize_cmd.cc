// `lancet quantize --fp8 IN OUT`: a BF16/F16/F32 Hugging Face checkpoint or a llama GGUF file ->
// an FP8 E4M3 checkpoint in the compressed-tensors layout vLLM loads ("FP8_DYNAMIC": weights
// per output channel, activations per token at run time; embed_tokens, lm_head and norms kept
// in 16-bit). The tensor policy and the quantizer are quant/fp8_weights.h, the same code
// `--quantization fp8` runs at load, so the two give identical weights.
//
// GGUF inputs are dequantized to f32 first; their q/k rows are put back in HF's rotate-half
// order and config.json / generation_config.json are written from the GGUF metadata (Llama 3
// rope scaling is recovered from the rope_freqs tensor). Output shards are planned from the
// tensor sizes before any conversion, so memory stays at about one shard.
//
// --calibrate PROMPTS runs the source model over the prompts (quantize_calibration.h) and
// writes static FP8 KV cache scales, model.layers.N.self_attn.k_scale / v_scale (F32
// scalars, the names vLLM and kv_scales_from_checkpoint read), with kv_cache_scheme set in
// quantization_config as compressed-tensors does for a static FP8 KV cache. With
// --static-activation-scales the same pass also measures the input of every linear projection
// and writes <module>.input_scale (F32 scalars) with static per-tensor input_activations.
// With --calibrate the weights are rounded with error compensation (GPTQ over the prompts'
// second moments, eval/fp8_gptq_calibration.h) unless --fp8-rounding nearest; the layout is
// the same either way.
#include <CLI/CLI.hpp>
#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

#include "cli/checkpoint_files.h"
#include "cli/commands.h"
#include "cli/parse_args.h"
#include "cli/quantize_calibration.h"
#include "eval/activation_scales.h"
#include "io/gguf_convert.h"
#include "io/model_source.h"
#include "io/safetensors.h"
#include "io/text_file.h"
#include "quant/fp8_weights.h"

namespace lancet::cli {
namespace {

namespace fs = std::filesystem;
using ojson = nlohmann::ordered_json;

struct Fp8ConvertConfig {
  std::string input;
  std::string output;
  std::string tokenizer_dir;  // extra place to copy tokenizer files from ("" = the input's folder)
  Fp8QuantizeOptions quant;
  uint64_t max_shard_bytes = 5ull << 30;
  std::optional<CheckpointCalibration> calibrate;  // static KV cache scales (--calibrate)
  // How the weights round; kGptq needs calibrate (its prompts give the second moments).
  Fp8Rounding rounding = Fp8Rounding::kNearest;
  // GPTQ by default rather than by --fp8-rounding: a model whose second moments do not fit in
  // the machine's available memory rounds to nearest instead (said on stderr).
  bool rounding_defaulted = false;
};

// MemAvailable of /proc/meminfo in bytes, or -1 when it cannot be read.
int64_t available_memory_bytes() {
  std::FILE* f = std::fopen("/proc/meminfo", "r");
  if (!f) return -1;
  char line[256];
  int64_t kb = -1;
  while (std::fgets(line, sizeof line, f))
    if (std::sscanf(line, "MemAvailable: %lld kB", reinterpret_cast<long long*>(&kb)) == 1) break;
  std::fclose(f);
  return kb < 0 ? -1 : kb * 1024;
}

// The quantization_config of an FP8_DYNAMIC compressed-tensors checkpoint; with static_kv, a
// per-tensor static FP8 kv_cache_scheme (the checkpoint then carries k_scale / v_scale); with
// static_act, static per-tensor input activations instead of dynamic per-token ones (FP8 with
// static activations; every quantized projection then carries an input_scale).
ojson quantization_config(bool static_kv, bool static_act) {
  auto args = [](const char* strategy, bool dynamic, const char* observer) {
    return ojson{{"num_bits", 8},          {"type", "float"},          {"symmetric", true},
                 {"strategy", strategy},   {"dynamic", dynamic},       {"group_size", nullptr},
                 {"block_structure", nullptr}, {"actorder", nullptr},
                 {"observer", observer ? ojson(observer) : ojson(nullptr)},
                 {"observer_kwargs", ojson::object()}};
  };
  ojson group{{"targets", ojson::array({"Linear"})},
              {"weights", args("channel", false, "minmax")},
              {"input_activations", static_act ? args("tensor", false, "minmax") : args("token", true, nullptr)},
              {"output_activations", nullptr}};
  return ojson{{"quant_method", "compressed-tensors"},
               {"format", "float-quantized"},
               {"quantization_status", "compressed"},
               {"config_groups", {{"group_0", group}}},
               {"ignore", ojson::array({"lm_head"})},
               {"kv_cache_scheme", static_kv ? args("tensor", false, "minmax") : ojson(nullptr)}};
}

// Llama 3 scaling parameters whose frequency divisors match a GGUF rope_freqs tensor (the
// published Llama 3.x values: low 1, high 4, original context 8192; factor from the tensor).
StatusOr<RopeScaling> llama3_from_rope_freqs(const ModelConfig& c, const TensorView& rf) {
  std::vector<float> f(static_cast<size_t>(rf.numel()));
  if (!convert_to_f32(rf.dtype, rf.data, f.data(), f.size()))
    return InvalidArgument("rope_freqs must be a float tensor");
  float mx = 1.0f;
  for (float v : f) mx = std::max(mx, v);
  ModelConfig cand = c;
  cand.rope_scaling.type = RopeType::kLlama3;
  cand.rope_scaling.factor = std::round(mx * 1000.0) / 1000.0;
  cand.rope_scaling.low_freq_factor = 1.0;
  cand.rope_scaling.high_freq_factor = 4.0;
  cand.rope_scaling.original_max_position_embeddings = 8192;
  const std::vector<float> want = llama3_rope_freq_factors(cand);
  for (size_t i = 0; i < f.size() && i < want.size(); ++i)
    if (std::fabs(want[i] - f[i]) > 1e-3f * std::fabs(f[i]))
      return Unimplemented("rope_freqs does not match Llama 3 rope scaling (factor " +
                           std::to_string(cand.rope_scaling.factor) +
                           ", low 1, high 4, original 8192); convert from the HF checkpoint instead");
  return cand.rope_scaling;
}

// GGUF stores float32; print 1e-05, not 9.999999747378752e-06.
double tidy(double v) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.7g", v);
  return std::strtod(buf, nullptr);
}

// config.json for a GGUF input, from the metadata the GGUF loader parsed.
StatusOr<ojson> config_from_gguf(const ModelSource& src) {
  const ModelConfig& c = src.config();
  ojson j{{"architectures", ojson::array({"LlamaForCausalLM"})},
          {"model_type", "llama"},
          {"vocab_size", c.vocab_size},
          {"hidden_size", c.hidden_size},
          {"intermediate_size", c.intermediate_size},
          {"num_hidden_layers", c.num_layers},
          {"num_attention_heads", c.num_heads},
          {"num_key_value_heads", c.num_kv_heads},
          {"head_dim", c.head_dim},
          {"hidden_act", "silu"},
          {"rms_norm_eps", tidy(c.rms_norm_eps)},
          {"rope_theta", tidy(c.rope_theta)},
          {"max_position_embeddings", c.max_position_embeddings},
          {"tie_word_embeddings", c.tie_word_embeddings},
          {"attention_bias", false},
          {"mlp_bias", false},
          {"torch_dtype", "bfloat16"}};
  if (c.bos_token_id >= 0) j["bos_token_id"] = c.bos_token_id;
  if (c.eos_token_ids.size() == 1) j["eos_token_id"] = c.eos_token_ids[0];
  if (c.eos_token_ids.size() > 1) j["eos_token_id"] = c.eos_token_ids;
  RopeScaling rs = c.rope_scaling;
  if (const TensorView* rf = src.find("rope_freqs")) {
    auto l3 = llama3_from_rope_freqs(c, *rf);
    if (!l3.ok()) return l3.status().with_context(src.path());
    rs = *l3;
  }
  switch (rs.type) {
    case RopeType::kDefault:
      j["rope_scaling"] = nullptr;
      break;
    case RopeType::kLlama3:
      j["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", rs.factor},
                           {"low_freq_factor", rs.low_freq_factor}, {"high_freq_factor", rs.high_freq_factor},
                           {"original_max_position_embeddings", rs.original_max_position_embeddings}};
      break;
    case RopeType::kLinear:
    case RopeType::kDynamic:
      j["rope_scaling"] = {{"rope_type", rope_type_name(rs.type)}, {"factor", rs.factor}};
      break;
    case RopeType::kYarn:
      j["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", rs.factor}, {"beta_fast", rs.beta_fast},
                           {"beta_slow", rs.beta_slow}};
      if (rs.original_max_position_embeddings > 0)
        j["rope_scaling"]["original_max_position_embeddings"] = rs.original_max_position_embeddings;
      if (rs.attention_factor > 0) j["rope_scaling"]["attention_factor"] = rs.attention_factor;
      break;
  }
  return j;
}

// The input's own folder (a directory input, or the folder holding a file input).
fs::path input_dir(const std::string& input) {
  std::error_code ec;
  if (fs::is_directory(input, ec)) return fs::path(input);
  fs::path d = fs::path(input).parent_path();
  return d.empty() ? fs::path(".") : d;
}

// One output tensor of a planned shard, and the bytes it will take.
struct Planned {
  std::string name;  // source tensor name, or a calibrated scale's name when scalar is set
  uint64_t bytes = 0;
  std::optional<float> scalar;  // a calibrated scale: an F32 scalar (shape []), not read from the source
};

uint64_t planned_bytes(const std::string& name, const TensorView& t, const Fp8QuantizeOptions& q) {
  const uint64_t n = static_cast<uint64_t>(t.numel());
  if (fp8_quantizes_tensor(name))
    return n + static_cast<uint64_t>(t.shape[0]) * (q.scale_dtype == Fp8ScaleDType::kBF16 ? 2 : 4);
  if (t.dtype == DType::kF16 || t.dtype == DType::kBF16) return t.nbytes;
  if (t.shape.size() <= 1) return n * 4;
  return n * 2;
}

// GGUF q/k rows are permuted for interleaved rope; HF row gguf_qk_source_row(r) is GGUF row r.
void unpermute_rows(OwnedTensor* t, int64_t head_dim) {
  const int64_t rows = t->shape[0];
  const size_t rb = t->bytes.size() / static_cast<size_t>(rows);
  std::vector<uint8_t> out(t->bytes.size());
  for (int64_t r = 0; r < rows; ++r)
    std::memcpy(out.data() + gguf_qk_source_row(r, head_dim) * rb, t->bytes.data() + r * rb, rb);
  t->bytes = std::move(out);
}

bool is_qk(const std::string& name) {
  return name.find(".self_attn.q_proj.") != std::string::npos ||
         name.find(".self_attn.k_proj.") != std::string::npos;
}

// Converts and writes one shard.
Status write_shard(const ModelSource& src, const std::vector<Planned>& tensors, const Fp8ConvertConfig& cfg,
                   const Fp8GptqFactors* gptq, const fs::path& path) {
  std::vector<OwnedTensor> owned;
  owned.reserve(tensors.size() * 2);
  std::vector<SafetensorsWriteTensor> out;
  const bool permuted = src.config().rope_interleaved;
  for (const Planned& p : tensors) {
    if (p.scalar) {
      out.push_back({p.name, DType::kF32, {}, &*p.scalar, sizeof(float)});
      continue;
    }
    const TensorView& t = *src.find(p.name);
    if (fp8_quantizes_tensor(p.name)) {
      const Fp8GptqFactor* f = gptq ? gptq->find(p.name) : nullptr;
      if (gptq && !f) return Internal("no error-compensation factor for " + p.name);
      ASSIGN_OR_RETURN(Fp8Weight w, quantize_weight_fp8(t, p.name, cfg.quant, f));
      if (permuted && is_qk(p.name)) {
        unpermute_rows(&w.weight, src.config().head_dim);
        unpermute_rows(&w.scale, src.config().head_dim);
      }
      owned.push_back(std::move(w.weight));
      owned.push_back(std::move(w.scale));
      const std::string base = p.name.substr(0, p.name.size() - std::string("weight").size());
      out.push_back({p.name, DType::kF8E4M3, owned[owned.size() - 2].shape, owned[owned.size() - 2].bytes.data(),
                     owned[owned.size() - 2].bytes.size()});
      out.push_back({base + "weight_scale", owned.back().dtype, owned.back().shape, owned.back().bytes.data(),
                     owned.back().bytes.size()});
      continue;
    }
    if (permuted && is_qk(p.name))
      return Unimplemented("tensor '" + p.name + "': q/k tensors that are not quantized cannot be re-ordered");
    ASSIGN_OR_RETURN(std::optional<OwnedTensor> kept, fp8_kept_tensor(t, p.name));
    if (kept) {
      owned.push_back(std::move(*kept));
      out.push_back({p.name, owned.back().dtype, owned.back().shape, owned.back().bytes.data(),
                     owned.back().bytes.size()});
    } else {
      out.push_back({p.name, t.dtype, t.shape, t.data, t.nbytes});
    }
  }
  return write_safetensors(path.string(), out, {{"format", "pt"}});
}

Status copy_side_files(const Fp8ConvertConfig& cfg, const fs::path& out_dir, bool from_gguf) {
  std::vector<fs::path> dirs;
  if (!cfg.tokenizer_dir.empty()) dirs.push_back(cfg.tokenizer_dir);
  if (!from_gguf) dirs.push_back(input_dir(cfg.input));
  return copy_checkpoint_side_files(dirs, out_dir);
}

Status convert_fp8(const Fp8ConvertConfig& cfg) {
  ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> src, open_model_source(cfg.input));
  const bool from_gguf = std::string(src->format()) == "gguf";
  if (src->tensors().empty()) return InvalidArgument(cfg.input + ": no weights to quantize");
  if (src->config().quant.method == QuantMethod::kFp8 ||
      src->config().quant.method == QuantMethod::kCompressedTensors)
    return InvalidArgument(cfg.input + ": the checkpoint is already quantized (quantization_config)");

  // config.json: the input's own (HF) or one written from the metadata (GGUF).
  ojson config;
  if (from_gguf) {
    ASSIGN_OR_RETURN(config, config_from_gguf(*src));
  } else {
    const fs::path cp = input_dir(cfg.input) / "config.json";
    ASSIGN_OR_RETURN(std::string text, read_text_file(cp.string()));
    config = ojson::parse(text, nullptr, /*allow_exceptions=*/false);
    if (!config.is_object()) return InvalidArgument(cp.string() + ": not a JSON object");
  }
  const bool static_act = cfg.calibrate && cfg.calibrate->static_activations;
  config["quantization_config"] = quantization_config(cfg.calibrate.has_value(), static_act);

  // Static KV scales: calibrated before anything is written, so bad prompts leave no output.
  std::optional<KvScales> kv_scales;
  std::optional<ActivationScales> act_scales;
  if (cfg.calibrate) {
    std::fprintf(stderr, "quantize: calibrating KV cache%s scales on %s (margin %g)\n",
                 static_act ? " and activation" : "", cfg.calibrate->prompts_path.c_str(),
                 static_cast<double>(cfg.calibrate->margin));
    ActivationScales act;
    auto s = calibrate_checkpoint_kv_scales(*src, *cfg.calibrate, &act);
    if (!s.ok()) return s.status().with_context("--calibrate");
    kv_scales = std::move(*s);
    if (static_act) act_scales = std::move(act);
  }
  // Error-compensating rounding: the second moments come from the same prompts.
  std::optional<Fp8GptqFactors> gptq;
  Fp8Rounding rounding = cfg.rounding;
  if (rounding == Fp8Rounding::kGptq) {
    if (!cfg.calibrate) return InvalidArgument("GPTQ rounding needs calibration prompts (--calibrate)");
    // The second moments of every linear input stay in memory until the weights are written.
    const int64_t need = fp8_gptq_calibration_bytes(src->config()), avail = available_memory_bytes();
    if (avail > 0 && need > avail / 10 * 7) {
      const std::string what = "GPTQ rounding holds " + std::to_string(need >> 20) + " MiB of second moments; " +
                               std::to_string(avail >> 20) + " MiB are available";
      if (!cfg.rounding_defaulted) return ResourceExhausted(what + " (--fp8-rounding nearest rounds without them)");
      std::fprintf(stderr, "quantize: %s: rounding to nearest instead (an explicit --fp8-rounding gptq stops here)\n",
                   what.c_str());
      rounding = Fp8Rounding::kNearest;
    }
  }
  if (rounding == Fp8Rounding::kGptq) {
    std::fprintf(stderr, "quantize: calibrating error-compensating rounding on %s\n",
                 cfg.calibrate->prompts_path.c_str());
    Fp8GptqCalibrationStats gs;
    auto g = calibrate_checkpoint_gptq(*src, cfg.calibrate->prompts_path, &gs);
    if (!g.ok()) return g.status().with_context("--calibrate");
    gptq = std::move(*g);
    std::fprintf(stderr, "quantize: gptq factors for %zu weights from %lld prompts, %lld tokens (damping %g)\n",
                 gptq->size(), static_cast<long long>(gs.prompts), static_cast<long long>(gs.tokens), gs.max_damp);
  }
  // A quantized projection's static input scale ("model.layers.N.mlp.down_proj.weight" ->
  // its module's scale).
  auto input_scale_of = [&](const std::string& weight) -> float {
    return activation_scale_for(*act_scales, weight.substr(0, weight.size() - std::string(".weight").size()));
  };
  auto is_written_kv_scale = [&](const std::string& name) {
    if (!kv_scales) return false;
    for (int64_t l = 0; l < src->config().num_layers; ++l)
      if (name == kv_scale_tensor_name(l, false) || name == kv_scale_tensor_name(l, true)) return true;
    return false;
  };

  // Plan the shards from the output sizes, in name order.
  std::vector<std::vector<Planned>> shards(1);
  uint64_t shard_bytes = 0, total = 0;
  for (const auto& [name, t] : src->tensors()) {
    if (name == "rope_freqs") continue;  // folded into config.json's rope_scaling
    if (is_written_kv_scale(name)) continue;  // replaced by the calibrated value
    const uint64_t b = planned_bytes(name, t, cfg.quant);
    if (shard_bytes > 0 && shard_bytes + b > cfg.max_shard_bytes) {
      shards.emplace_back();
      shard_bytes = 0;
    }
    shards.back().push_back({name, b, std::nullopt});
    shard_bytes += b;
    total += b;
    if (act_scales && fp8_quantizes_tensor(name)) {
      // The input scale sits beside its weight: "<module>.input_scale".
      const float v = input_scale_of(name);
      if (!(v > 0.f)) return Internal("no calibrated input scale for " + name);
      shards.back().push_back({name.substr(0, name.size() - 6) + "input_scale", sizeof(float), v});
      shard_bytes += sizeof(float);
      total += sizeof(float);
    }
  }
  // Each layer's scales go into the shard holding its k_proj, next to the weights they describe.
  if (kv_scales) {
    for (int64_t l = 0; l < src->config().num_layers; ++l) {
      const std::string kp = "model.layers." + std::to_string(l) + ".self_attn.k_proj.weight";
      size_t shard = shards.size() - 1;
      for (size_t i = 0; i < shards.size(); ++i)
        for (const Planned& p : shards[i])
          if (p.name == kp) shard = i;
      shards[shard].push_back({kv_scale_tensor_name(l, false), sizeof(float), kv_scales->k[l]});
      shards[shard].push_back({kv_scale_tensor_name(l, true), sizeof(float), kv_scales->v[l]});
      total += 2 * sizeof(float);
    }
  }

  std::error_code ec;
  fs::create_directories(cfg.output, ec);
  if (ec) return IoError("cannot create " + cfg.output + ": " + ec.message());
  const fs::path out_dir(cfg.output);
  ojson weight_map = ojson::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    const std::string file = shard_file_name(i, shards.size());
    std::fprintf(stderr, "quantize: writing %s (%zu tensors)\n", file.c_str(), shards[i].size());
    RETURN_IF_ERROR(write_shard(*src, shards[i], cfg, gptq ? &*gptq : nullptr, out_dir / file));
    for (const Planned& p : shards[i]) {
      weight_map[p.name] = file;
      if (fp8_quantizes_tensor(p.name))
        weight_map[p.name.substr(0, p.name.size() - 6) + "weight_scale"] = file;
    }
  }
  if (shards.size() > 1) {
    RETURN_IF_ERROR(write_json_file(out_dir / "model.safetensors.index.json",
                               ojson{{"metadata", {{"total_size", total}}}, {"weight_map", weight_map}}));
  }
  RETURN_IF_ERROR(write_json_file(out_dir / "config.json", config));
  if (from_gguf) {
    const ModelConfig& c = src->config();
    ojson gen{{"_from_model_config", true}};
    if (c.bos_token_id >= 0) gen["bos_token_id"] = c.bos_token_id;
    if (!c.eos_token_ids.empty()) gen["eos_token_id"] = c.eos_token_ids;
    RETURN_IF_ERROR(write_json_file(out_dir / "generation_config.json", gen));
  }
  RETURN_IF_ERROR(copy_side_files(cfg, out_dir, from_gguf));
  if (from_gguf && !fs::exists(out_dir / "tokenizer.json"))
    std::fprintf(stderr, "quantize: note: a GGUF input carries no tokenizer.json; pass --tokenizer DIR "
                         "to copy one, or the output takes token ids only\n");
  // The result must load: check it with the same loader the runtime uses.
  auto check = open_model_source(cfg.output);
  if (!check.ok()) return check.status().with_context("the written checkpoint does not load");
  if (kv_scales) {
    auto back = kv_scales_from_checkpoint(**check);
    if (!back.ok()) return back.status().with_context("the written KV cache scales do not load");
    if (!*back || (*back)->k != kv_scales->k || (*back)->v != kv_scales->v)
      return Internal("the written checkpoint does not read back the calibrated KV cache scales");
    std::fprintf(stderr, "quantize: wrote static KV cache scales (self_attn.k_scale / v_scale): %s\n",
                 format_kv_scales(*kv_scales).c_str());
  }
  if (act_scales) {
    int64_t written = 0;
    for (const auto& [name, t] : (*check)->tensors()) {
      if (!fp8_quantizes_tensor(name)) continue;
      const TensorView* is = (*check)->find(name.substr(0, name.size() - 6) + "input_scale");
      float v = 0.f;
      if (!is || is->dtype != DType::kF32 || is->numel() != 1)
        return Internal("the written checkpoint lacks " + name + "'s input_scale");
      std::memcpy(&v, is->data, sizeof(float));
      if (v != input_scale_of(name))
        return Internal("the written checkpoint does not read back " + name + "'s input_scale");
      ++written;
    }
    std::fprintf(stderr, "quantize: wrote static activation scales (input_scale) for %lld projections\n",
                 static_cast<long long>(written));
  }
  std::fprintf(stderr, "quantize: %s -> %s (%.1f MiB)\n", cfg.input.c_str(), cfg.output.c_str(),
               static_cast<double>(total) / (1 << 20));
  return OkStatus();
}

}  // namespace

int cmd_quantize(int argc, char** argv) {
  CLI::App app{"Quantize a checkpoint (FP8 E4M3 weights, per-channel scales, compressed-tensors layout)",
               "lancet quantize"};
  Fp8ConvertConfig cfg;
  bool fp8 = false;
  std::string scale_dtype = "f32";
  double max_shard_gb = 5.0;
  app.add_flag("--fp8", fp8, "FP8 E4M3 weights with per-output-channel scales (the only format so far)")
      ->required();
  app.add_option("input", cfg.input, "HF checkpoint directory (BF16/F16/F32) or llama .gguf file")->required();
  app.add_option("output", cfg.output, "output directory")->required();
  app.add_option("--scale-dtype", scale_dtype, "weight_scale dtype: f32 or bf16")->capture_default_str();
  app.add_option("--tokenizer", cfg.tokenizer_dir, "folder to copy tokenizer files from (for GGUF inputs)");
  app.add_option("--max-shard-size", max_shard_gb, "largest safetensors shard, GB")->capture_default_str();
  std::string calibrate;
  float margin = KvCalibrationOptions{}.margin;
  app.add_option("--calibrate", calibrate,
                 "prompt file (text lines, or JSON lines with prompt / prompt_ids): write static FP8 KV "
                 "cache scales (self_attn.k_scale / v_scale) calibrated on it, and round the weights "
                 "with error compensation over its second moments (see --fp8-rounding)");
  auto* margin_opt = app.add_option("--calibrate-margin", margin, "KV scale = absmax * margin / 448")
                         ->capture_default_str();
  std::string rounding;
  app.add_option("--fp8-rounding", rounding,
                 "gptq: error-compensating rounding over the --calibrate prompts' second moments (the "
                 "default with --calibrate); nearest: round to nearest (the default without)");
  bool static_act = false;
  app.add_flag("--static-activation-scales", static_act,
               "with --calibrate: also write a static input_scale for every quantized projection "
               "(input_activations static per-tensor, as FP8 checkpoints with static activations carry)");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  if (scale_dtype != "f32" && scale_dtype != "bf16") {
    std::fprintf(stderr, "lancet quantize: --scale-dtype must be f32 or bf16\n");
    return 2;
  }
  if (!(max_shard_gb > 0)) {
    std::fprintf(stderr, "lancet quantize: --max-shard-size must be positive\n");
    return 2;
  }
  if (margin_opt->count() > 0 && calibrate.empty()) {
    std::fprintf(stderr, "lancet quantize: --calibrate-margin needs --calibrate PROMPTS\n");
    return 2;
  }
  if (!(margin >= 1.0f && margin <= 16.0f)) {
    std::fprintf(stderr, "lancet quantize: --calibrate-margin must be in [1, 16]\n");
    return 2;
  }
  if (static_act && calibrate.empty()) {
    std::fprintf(stderr, "lancet quantize: --static-activation-scales needs --calibrate PROMPTS\n");
    return 2;
  }
  if (!calibrate.empty()) cfg.calibrate = CheckpointCalibration{calibrate, margin, static_act};
  cfg.rounding_defaulted = rounding.empty();
  if (rounding.empty()) rounding = calibrate.empty() ? "nearest" : "gptq";
  if (auto r = parse_fp8_rounding(rounding); !r.ok()) {
    std::fprintf(stderr, "lancet quantize: --fp8-rounding must be nearest or gptq\n");
    return 2;
  } else {
    cfg.rounding = *r;
  }
  if (cfg.rounding == Fp8Rounding::kGptq && calibrate.empty()) {
    std::fprintf(stderr, "lancet quantize: --fp8-rounding gptq needs --calibrate PROMPTS\n");
    return 2;
  }
  cfg.quant.scale_dtype = scale_dtype == "bf16" ? Fp8ScaleDType::kBF16 : Fp8ScaleDType::kF32;
  cfg.max_shard_bytes = static_cast<uint64_t>(max_shard_gb * 1e9);
  Status st = convert_fp8(cfg);
  if (!st.ok()) {
    std::fprintf(stderr, "lancet quantize: %s\n", st.to_string().c_str());
    return 1;
  }
  return 0;
}

}  // namespace lancet::cli
