// Activation absmax observation and the static scales made from it.
#include "model/activation_scales.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "core/dtype.h"

namespace lancet {
namespace {

std::vector<float>& slot(ActivationAbsmaxObserver& o, LinearInput which) {
  switch (which) {
    case LinearInput::kQkv: return o.qkv;
    case LinearInput::kO: return o.o;
    case LinearInput::kGateUp: return o.gate_up;
    default: return o.down;
  }
}

}  // namespace

void ActivationAbsmaxObserver::observe(int64_t layer, LinearInput which, const float* x, int64_t n) {
  if (layer < 0) return;
  std::vector<float>& v = slot(*this, which);
  const auto l = static_cast<size_t>(layer);
  if (v.size() <= l) v.resize(l + 1, 0.f);
  float m = v[l];
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (!std::isfinite(a)) {
      saw_non_finite = true;
      continue;
    }
    m = std::max(m, a);
  }
  v[l] = m;
}

float fp8_scale_from_absmax(float absmax, float margin) { return std::max(absmax, 1e-6f) * margin / kFp8E4M3Max; }

ActivationScales activation_scales_from_absmax(const ActivationAbsmaxObserver& obs, float margin) {
  auto scales = [margin](const std::vector<float>& absmax) {
    std::vector<float> out;
    for (float a : absmax) out.push_back(fp8_scale_from_absmax(a, margin));
    return out;
  };
  return ActivationScales{scales(obs.qkv), scales(obs.o), scales(obs.gate_up), scales(obs.down)};
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
