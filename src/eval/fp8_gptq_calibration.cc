// The whole-model GPTQ calibration: one pass over the prompts, then one factor per input.
#include "eval/fp8_gptq_calibration.h"

#include <algorithm>
#include <chrono>
#include <memory>

#include "core/logging.h"

#include "eval/activation_moments.h"
#include "runner/kv_calibration.h"
#include "model/llama_model.h"

namespace lancet {

const char* fp8_rounding_name(Fp8Rounding r) { return r == Fp8Rounding::kGptq ? "gptq" : "nearest"; }

StatusOr<Fp8Rounding> parse_fp8_rounding(const std::string& s) {
  if (s == "nearest") return Fp8Rounding::kNearest;
  if (s == "gptq") return Fp8Rounding::kGptq;
  return InvalidArgument("FP8 rounding must be nearest or gptq, not '" + s + "'");
}

std::vector<std::string> fp8_linear_weights_reading(int64_t layer, LinearInput which) {
  const std::string p = "model.layers." + std::to_string(layer) + ".";
  switch (which) {
    case LinearInput::kQkv:
      return {p + "self_attn.q_proj.weight", p + "self_attn.k_proj.weight", p + "self_attn.v_proj.weight"};
    case LinearInput::kO: return {p + "self_attn.o_proj.weight"};
    case LinearInput::kGateUp: return {p + "mlp.gate_proj.weight", p + "mlp.up_proj.weight"};
    default: return {p + "mlp.down_proj.weight"};
  }
}

int64_t fp8_gptq_calibration_bytes(const ModelConfig& c) {
  const int64_t h = c.hidden_size, i = c.intermediate_size;
  const int64_t attn_out = c.num_heads * (c.head_dim > 0 ? c.head_dim : (c.num_heads > 0 ? h / c.num_heads : 0));
  // Inputs: the attention norm's output (q/k/v), the attention output (o), the MLP norm's output
  // (gate/up), SiLU(gate) * up (down); one more k x k of the largest while it is factored.
  const int64_t per_layer = 2 * h * h + attn_out * attn_out + i * i;
  const int64_t widest = std::max({h, attn_out, i});
  return (c.num_layers * per_layer + widest * widest) * static_cast<int64_t>(sizeof(float));
}

StatusOr<Fp8GptqFactors> calibrate_fp8_gptq(const ModelSource& src, Backend& backend,
                                            const std::vector<std::vector<int32_t>>& prompts,
                                            const Fp8GptqOptions& opts, Fp8GptqCalibrationStats* stats) {
  if (prompts.empty()) return InvalidArgument("gptq calibration: no calibration prompts");
  LlamaModelOptions mo;
  mo.weights.dequantize_to_bf16 = std::string(src.format()) == "gguf";
  ASSIGN_OR_RETURN(std::unique_ptr<LlamaModel> model, LlamaModel::create(src, backend, mo));
  const int64_t L = model->config().num_layers;
  const auto t0 = std::chrono::steady_clock::now();
  ActivationMomentObserver obs(backend, L);
  KvCalibrationOptions co;
  co.scratch_dtype = DType::kF32;
  auto kv = calibrate_kv_scales(*model, prompts, co, &obs);
  if (!kv.ok()) return kv.status().with_context("gptq calibration");
  RETURN_IF_ERROR(obs.finish());
  Fp8GptqCalibrationStats st;
  st.prompts = static_cast<int64_t>(prompts.size());
  for (const auto& p : prompts) st.tokens += std::min<int64_t>(static_cast<int64_t>(p.size()), model->max_model_len());
  model.reset();
  const auto t1 = std::chrono::steady_clock::now();
  Fp8GptqFactors out;
  for (int64_t l = 0; l < L; ++l) {
    for (LinearInput which : {LinearInput::kQkv, LinearInput::kO, LinearInput::kGateUp, LinearInput::kDown}) {
      const std::vector<float>* h = obs.moments(l, which);
      const std::vector<std::string> names = fp8_linear_weights_reading(l, which);
      if (!h) return Internal("gptq calibration: no inputs observed for " + names[0]);
      auto f = fp8_gptq_factor(h->data(), obs.cols(l, which), names[0], opts);
      if (!f.ok()) return f.status().with_context("gptq calibration");
      st.max_damp = std::max(st.max_damp, f->damp_used);
      auto shared = std::make_shared<const Fp8GptqFactor>(std::move(*f));
      for (const std::string& n : names) out.add(n, shared);
      obs.release(l, which);
    }
  }
  const auto t2 = std::chrono::steady_clock::now();
  LOG_INFO("gptq calibration: " << st.prompts << " prompts, " << st.tokens << " tokens; second moments "
                                << std::chrono::duration<double>(t1 - t0).count() << " s, factors "
                                << std::chrono::duration<double>(t2 - t1).count() << " s");
  if (stats) *stats = st;
  return out;
}

}  // namespace lancet
