// Static activation scales from the calibration pass's absmax.
#include "eval/activation_scales.h"

#include <cstdlib>

namespace lancet {

ActivationScales activation_scales_from_absmax(const ActivationAbsmaxObserver& obs, float margin) {
  auto scales = [margin](const std::vector<float>& absmax) {
    std::vector<float> out;
    for (float a : absmax) out.push_back(fp8_scale_from_absmax(a, margin));
    return out;
  };
  return ActivationScales{scales(obs.qkv), scales(obs.o), scales(obs.gate_up), scales(obs.down)};
}

StatusOr<KvScales> calibrate_kv_and_activation_scales(LlamaModel& model, Backend& backend,
                                                      const std::vector<std::vector<int32_t>>& prompts,
                                                      const KvCalibrationOptions& opts,
                                                      ActivationScales* activations) {
  if (!activations) return calibrate_kv_scales(model, prompts, opts);
  ActivationAbsmaxObserver act;
  ASSIGN_OR_RETURN(KvScales s, calibrate_kv_scales(model, prompts, opts, &act));
  *activations = activation_scales_from_absmax(act, opts.margin);
  return s;
}

float activation_scale_for(const ActivationScales& s, const std::string& module) {
  static const std::string kPrefix = "model.layers.";
  if (module.compare(0, kPrefix.size(), kPrefix) != 0) return -1.f;
  char* end = nullptr;
  const long long layer = std::strtoll(module.c_str() + kPrefix.size(), &end, 10);
  if (end == module.c_str() + kPrefix.size() || *end != '.' || layer < 0) return -1.f;
  const std::string rest(end + 1);
  const std::vector<float>* v = nullptr;
  if (rest == "self_attn.q_proj" || rest == "self_attn.k_proj" || rest == "self_attn.v_proj") v = &s.qkv;
  else if (rest == "self_attn.o_proj") v = &s.o;
  else if (rest == "mlp.gate_proj" || rest == "mlp.up_proj") v = &s.gate_up;
  else if (rest == "mlp.down_proj") v = &s.down;
  if (!v || static_cast<size_t>(layer) >= v->size()) return -1.f;
  return (*v)[static_cast<size_t>(layer)];
}

}  // namespace lancet
