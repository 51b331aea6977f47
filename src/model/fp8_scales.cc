// Activation absmax observation and the absmax -> FP8 scale rule.
#include "model/fp8_scales.h"

#include <algorithm>
#include <cmath>

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

Status ActivationAbsmaxObserver::observe(int64_t layer, LinearInput which, const float* x, int64_t rows,
                                         int64_t cols) {
  if (layer < 0) return OkStatus();
  const int64_t n = rows * cols;
  std::vector<float>& v = slot(*this, which);
  const auto l = static_cast<size_t>(layer);
  if (v.size() <= l) v.resize(l + 1, 0.f);
  float m = v[l];
  for (int64_t i = 0; i < n; ++i) {
    const float a = std::fabs(x[i]);
    if (!std::isfinite(a)) {
      non_finite = true;
      continue;
    }
    m = std::max(m, a);
  }
  v[l] = m;
  return OkStatus();
}

float fp8_scale_from_absmax(float absmax, float margin) { return std::max(absmax, 1e-6f) * margin / kFp8E4M3Max; }

}  // namespace lancet
