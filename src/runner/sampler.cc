// Sampler implementation. Top-p avoids a full vocabulary sort: it partially sorts a growing
// prefix until that prefix holds the requested probability mass.
#include "runner/sampler.h"

#include "backend/counter_uniform.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <unordered_map>

namespace lancet {
namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();

void apply_penalties(std::vector<float>& x, const SamplingParams& p, const SampleContext& ctx) {
  const int64_t vocab = static_cast<int64_t>(x.size());
  for (const auto& [tok, bias] : p.logit_bias) {
    if (tok >= 0 && tok < vocab) x[tok] += bias;
  }
  if (static_cast<int32_t>(ctx.output_tokens.size()) < p.min_tokens) {
    for (int32_t e : ctx.eos_token_ids)
      if (e >= 0 && e < vocab) x[e] = kNegInf;
    for (int32_t e : p.stop_token_ids)
      if (e >= 0 && e < vocab) x[e] = kNegInf;
  }
  if (p.repetition_penalty != 1.0f) {
    std::vector<uint8_t> seen(vocab, 0);
    for (int32_t t : ctx.prompt_tokens) if (t >= 0 && t < vocab) seen[t] = 1;
    for (int32_t t : ctx.output_tokens) if (t >= 0 && t < vocab) seen[t] = 1;
    for (int64_t t = 0; t < vocab; ++t) {
      if (!seen[t]) continue;
      x[t] = x[t] > 0 ? x[t] / p.repetition_penalty : x[t] * p.repetition_penalty;
    }
  }
  if (p.presence_penalty != 0.0f || p.frequency_penalty != 0.0f) {
    std::unordered_map<int32_t, int32_t> counts;
    for (int32_t t : ctx.output_tokens) counts[t]++;
    for (const auto& [t, c] : counts) {
      if (t < 0 || t >= vocab) continue;
      x[t] -= p.frequency_penalty * static_cast<float>(c) + p.presence_penalty;
    }
  }
  if (!ctx.allowed_tokens.empty()) mask_refused_tokens(x, ctx.allowed_tokens);
}

// log-softmax normaliser: max + log(sum(exp(x - max))).
double log_normalizer(const std::vector<float>& x) {
  float m = kNegInf;
  for (float v : x) m = std::max(m, v);
  if (m == kNegInf) return m;
  double s = 0;
  for (float v : x) s += std::exp(static_cast<double>(v) - m);
  return m + std::log(s);
}

}  // namespace

double counter_uniform(uint64_t seed, uint64_t counter) { return counter_uniform_value(seed, counter); }

void mask_refused_tokens(std::span<float> x, std::span<const uint32_t> allowed) {
  const int64_t vocab = static_cast<int64_t>(x.size());
  for (int64_t t = 0; t < vocab; ++t) {
    const size_t w = static_cast<size_t>(t >> 5);
    if (w >= allowed.size() || !(allowed[w] >> (t & 31) & 1)) x[static_cast<size_t>(t)] = kNegInf;
  }
}

int32_t argmax(std::span<const float> logits) {
  int32_t best = 0;
  for (size_t i = 1; i < logits.size(); ++i) {
    if (logits[i] > logits[best]) best = static_cast<int32_t>(i);
  }
  return best;
}

namespace {

// Candidates of a non-greedy draw: token ids best first (idx[0..m)) and their probabilities
// under temperature over the whole vocabulary (probs[0..m), unnormalised; z = their sum).
struct Candidates {
  std::vector<int32_t> idx;
  std::vector<double> probs;
  int64_t m = 0;
  double z = 0;
};

Candidates sampling_candidates(std::span<const float> x, const SamplingParams& p) {
  Candidates c;
  const int64_t vocab = static_cast<int64_t>(x.size());
  // Candidates sorted by logit, descending; grown until top-k / top-p are satisfied.
  const float inv_t = 1.0f / p.temperature;
  const int64_t k = (p.top_k > 0) ? std::min<int64_t>(p.top_k, vocab) : vocab;
  std::vector<int32_t>& idx = c.idx;
  idx.resize(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  auto by_logit = [&](int32_t a, int32_t b) { return x[a] > x[b] || (x[a] == x[b] && a < b); };
  float maxv = kNegInf;
  for (float v : x) maxv = std::max(maxv, v);
  double total = 0;
  for (float v : x) total += std::exp(static_cast<double>(v - maxv) * inv_t);
  int64_t n = std::min<int64_t>(k, 64);
  for (;;) {
    std::partial_sort(idx.begin(), idx.begin() + n, idx.end(), by_logit);
    if (n == k || p.top_p >= 1.0f) {
      if (n == k) break;
      n = k;  // no top-p: need all k
      continue;
    }
    double mass = 0;
    for (int64_t i = 0; i < n; ++i) mass += std::exp(static_cast<double>(x[idx[i]] - maxv) * inv_t);
    if (mass / total >= p.top_p) break;
    n = std::min<int64_t>(n * 4, k);
  }
  // Probabilities of the candidates under temperature (over the whole vocabulary).
  std::vector<double>& probs = c.probs;
  probs.resize(n);
  for (int64_t i = 0; i < n; ++i) probs[i] = std::exp(static_cast<double>(x[idx[i]] - maxv) * inv_t) / total;
  // top-k: renormalise over the kept k (vLLM applies top-k, then top-p on the renormalised
  // distribution). When the growth above stopped before k candidates (the first n already
  // hold top_p of the whole mass), the renormaliser is still the mass of all k: the ranks
  // [n, k) are picked (unordered) from the rest and added.
  double kept = 0;
  for (int64_t i = 0; i < n; ++i) kept += probs[i];
  if (n < k) {
    std::nth_element(idx.begin() + n, idx.begin() + (k - 1), idx.end(), by_logit);
    for (int64_t i = n; i < k; ++i) kept += std::exp(static_cast<double>(x[idx[i]] - maxv) * inv_t) / total;
  }
  int64_t m = n;
  if (p.top_p < 1.0f) {
    double cum = 0;
    for (int64_t i = 0; i < n; ++i) {
      cum += probs[i] / kept;
      if (cum >= p.top_p) {
        m = i + 1;
        break;
      }
    }
  }
  if (p.min_p > 0.0f) {
    const double floor_p = p.min_p * probs[0];
    int64_t j = 1;
    while (j < m && probs[j] >= floor_p) ++j;
    m = j;
  }
  c.m = m;
  for (int64_t i = 0; i < m; ++i) c.z += probs[i];
  return c;
}

}  // namespace

std::vector<float> process_logits(std::span<const float> logits, const SamplingParams& p,
                                  const SampleContext& ctx) {
  std::vector<float> x(logits.begin(), logits.end());
  apply_penalties(x, p, ctx);
  return x;
}

double TokenDistribution::prob_of(int32_t token) const {
  for (size_t i = 0; i < tokens.size(); ++i)
    if (tokens[i] == token) return probs[i];
  return 0.0;
}

TokenDistribution sampling_distribution(std::span<const float> x, const SamplingParams& p) {
  TokenDistribution d;
  if (p.greedy()) {
    d.tokens.push_back(argmax(x));
    d.probs.push_back(1.0);
    return d;
  }
  Candidates c = sampling_candidates(x, p);
  d.tokens.assign(c.idx.begin(), c.idx.begin() + c.m);
  d.probs.resize(c.m);
  for (int64_t i = 0; i < c.m; ++i) d.probs[i] = c.probs[i] / c.z;
  return d;
}

SampleResult sample_result_for(std::span<const float> x, int32_t token, const SamplingParams& p) {
  SampleResult out;
  out.token = token;
  if (p.logprobs < 0) return out;
  const int64_t vocab = static_cast<int64_t>(x.size());
  const double lognorm = log_normalizer(std::vector<float>(x.begin(), x.end()));
  out.logprob = static_cast<float>(x[token] - lognorm);
  if (p.logprobs > 0) {
    const int64_t k = std::min<int64_t>(p.logprobs, vocab);
    std::vector<int32_t> idx(vocab);
    std::iota(idx.begin(), idx.end(), 0);
    std::partial_sort(idx.begin(), idx.begin() + k, idx.end(), [&](int32_t a, int32_t b) {
      return x[a] > x[b] || (x[a] == x[b] && a < b);
    });
    for (int64_t i = 0; i < k; ++i)
      out.top_logprobs.push_back({idx[i], static_cast<float>(x[idx[i]] - lognorm)});
  }
  return out;
}

int32_t draw_token(std::span<const float> x, const SamplingParams& p, uint64_t seed, uint64_t counter) {
  if (p.greedy()) return argmax(x);
  const Candidates c = sampling_candidates(x, p);
  const double u = counter_uniform(seed, counter) * c.z;
  double cum = 0;
  for (int64_t i = 0; i < c.m; ++i) {
    cum += c.probs[i];
    if (u < cum) return c.idx[i];
  }
  return c.idx[c.m - 1];
}

SampleResult sample_token(std::span<const float> logits, const SamplingParams& p,
                          const SampleContext& ctx) {
  const std::vector<float> x = process_logits(logits, p, ctx);
  return sample_result_for(x, draw_token(x, p, ctx.seed, ctx.output_tokens.size()), p);
}

}  // namespace lancet
