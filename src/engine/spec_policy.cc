// Speculation policy: cost fits and the choice of k (see spec_policy.h).
#include "engine/spec_policy.h"

#include <algorithm>
#include <cmath>

namespace lancet {

void LinearCostFit::observe(double n, double t) {
  w_ = w_ * decay_ + 1;
  sn_ = sn_ * decay_ + n;
  st_ = st_ * decay_ + t;
  snn_ = snn_ * decay_ + n * n;
  snt_ = snt_ * decay_ + n * t;
}

double LinearCostFit::slope() const {
  if (w_ <= 0) return 0;
  const double mn = sn_ / w_, mt = st_ / w_;
  const double var = snn_ / w_ - mn * mn;
  // Too little spread in n to see a slope: assume none within the observed range (the
  // intercept then carries the whole cost), which keeps predictions at the observed mean.
  if (var <= 1e-9 * std::max(1.0, mn * mn)) return 0;
  const double b = (snt_ / w_ - mn * mt) / var;
  const double b_max = mt / std::max(mn, 1.0) * 4;  // no slope steeper than 4x the mean cost per token
  return std::clamp(b, 0.0, std::max(b_max, 0.0));
}

double LinearCostFit::intercept() const {
  if (w_ <= 0) return 0;
  return std::max(0.0, st_ / w_ - slope() * sn_ / w_);
}

double LinearCostFit::predict(double n) const { return intercept() + slope() * n; }

void SpecPolicy::observe_acceptance(int64_t evaluated, int64_t accepted) {
  constexpr double kDecay = 0.995;  // per verified sequence: a memory of a few hundred
  evaluated_ = evaluated_ * kDecay + static_cast<double>(evaluated);
  accepted_ = accepted_ * kDecay + static_cast<double>(accepted);
}

double SpecPolicy::acceptance() const {
  // A weak prior (4 pseudo-drafts) keeps the first measurements from swinging k to extremes.
  const double prior_n = 4.0;
  return (accepted_ + config_.prior_acceptance * prior_n) / (evaluated_ + prior_n);
}

double SpecPolicy::predicted_rate(int64_t b, int32_t k) const {
  const double a = std::min(acceptance(), 0.999);
  const double tokens_per_seq = (1 - std::pow(a, k + 1)) / (1 - a);
  const double bb = static_cast<double>(b);
  double t = target_.predict(bb * (k + 1));
  if (config_.draft_model && k > 0)
    t += k * (draft_.ready() ? draft_.predict(bb) : config_.draft_cost_ratio * target_.predict(bb));
  if (t <= 0) return 0;
  return bb * tokens_per_seq / t;
}

int32_t SpecPolicy::choose_k(int64_t decode_seqs) {
  int32_t k = config_.max_k;
  if (decode_seqs <= 0) return last_k_ = 0;
  if (config_.disable_by_batch_size > 0 && decode_seqs > config_.disable_by_batch_size) return last_k_ = 0;
  if (!config_.adaptive || !target_.ready()) return last_k_ = k;
  double best = predicted_rate(decode_seqs, 0);
  int32_t best_k = 0;
  for (int32_t c = 1; c <= config_.max_k; ++c) {
    const double r = predicted_rate(decode_seqs, c);
    if (r > best * 1.02) {  // a 2% margin: do not pay for drafts the model says barely help
      best = r;
      best_k = c;
    }
  }
  if (best_k == 0 && ++off_steps_ % kProbeEvery == 0) best_k = 1;
  if (best_k > 0 && best_k != 1) off_steps_ = 0;
  return last_k_ = best_k;
}

}  // namespace lancet
