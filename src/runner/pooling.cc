// pool_last_token: L2 normalization in double, so the norm of the result is 1 within float rounding.
#include "runner/pooling.h"

#include <cmath>

namespace lancet {

std::vector<float> pool_last_token(std::span<const float> hidden) {
  double sq = 0;
  for (float v : hidden) sq += static_cast<double>(v) * v;
  std::vector<float> out(hidden.begin(), hidden.end());
  if (sq == 0 || !std::isfinite(sq)) return out;
  const double inv = 1.0 / std::sqrt(sq);
  for (float& v : out) v = static_cast<float>(v * inv);
  return out;
}

}  // namespace lancet
