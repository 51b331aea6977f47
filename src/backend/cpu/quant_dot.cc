// Activation quantization for quant_dot (portable) and the run-time check for VNNI.
#include "backend/cpu/quant_dot.h"

#include <algorithm>
#include <cmath>

namespace lancet::cpu {

void quantize_activation_q8(const float* x, int64_t k, ActQ8Block* out) {
  for (int64_t b = 0; b < k / 32; ++b) {
    const float* v = x + b * 32;
    float amax = 0.f;
    for (int i = 0; i < 32; ++i) amax = std::max(amax, std::fabs(v[i]));
    const float d = amax / 127.f;
    const float id = d > 0 ? 1.f / d : 0.f;
    int32_t sum = 0;
    for (int i = 0; i < 32; ++i) {
      const int q = static_cast<int>(std::nearbyint(v[i] * id));
      out[b].q[i] = static_cast<int8_t>(q);
      sum += q;
    }
    out[b].d = d;
    out[b].sum = sum;
  }
}

QuantRowsDot quant_rows_dot_vnni_impl(DType t);  // quant_dot_avx512.cc

QuantRowsDot quant_rows_dot_vnni(DType t) {
  static const bool has = __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl") &&
                          __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("f16c");
  return has ? quant_rows_dot_vnni_impl(t) : nullptr;
}

}  // namespace lancet::cpu
