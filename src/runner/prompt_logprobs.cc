// score_prompt_token: log-softmax of one raw logits row at one token, its rank, the top N.
#include "runner/prompt_logprobs.h"

#include <algorithm>
#include <cmath>
#include <numeric>

namespace lancet {

PromptLogprob score_prompt_token(std::span<const float> x, int32_t token, int32_t top_n) {
  PromptLogprob out;
  out.token = token;
  const int64_t vocab = static_cast<int64_t>(x.size());
  // The sampler's normalizer (sampler.cc log_normalizer): max-shifted sum in double.
  float mx = -INFINITY;
  for (float v : x) mx = std::max(mx, v);
  double sum = 0;
  for (float v : x) sum += std::exp(static_cast<double>(v) - mx);
  const double lognorm = mx + std::log(sum);
  out.logprob = static_cast<float>(x[token] - lognorm);
  int32_t higher = 0;
  for (float v : x) higher += v > x[token] ? 1 : 0;
  out.rank = higher + 1;
  const int64_t k = std::min<int64_t>(std::max(top_n, 0), vocab);
  if (k == 0) return out;
  std::vector<int32_t> idx(static_cast<size_t>(vocab));
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + k, idx.end(),
                    [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); });
  for (int64_t i = 0; i < k; ++i) out.top.push_back({idx[i], static_cast<float>(x[idx[i]] - lognorm)});
  return out;
}

}  // namespace lancet
