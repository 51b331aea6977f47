// When to speculate and how far: the number of drafts k for the next step, chosen to maximise
// expected tokens per second from measured costs (DESIGN.md §7: count before optimising).
//   tokens per step  = B * E(a, k),  E(a, k) = (1 - a^(k+1)) / (1 - a)   (a: per-draft acceptance)
//   seconds per step = T(B (k+1)) + k * D(B)
// T(n): the target's forward time over n tokens, D(n): one draft forward over n sequences
// (0 for n-gram lookup); both fitted online as a + b n (least squares with forgetting) from
// every forward pass the engine runs. With few sequences a step costs about the same for 1 or
// k+1 tokens each (weights are read once), so speculation pays; with a large batch the pass is
// compute bound, T grows with k, and k drops to 0 (speculation off). While off, one step in
// kProbeEvery probes with k = 1 so the acceptance estimate follows the traffic.
#pragma once

#include <cstdint>

namespace lancet {

// Least-squares fit of seconds = a + b * n with exponential forgetting; a, b >= 0.
class LinearCostFit {
 public:
  explicit LinearCostFit(double decay = 0.97) : decay_(decay) {}
  void observe(double n, double seconds);
  bool ready() const { return w_ > 0; }
  double predict(double n) const;
  double intercept() const;
  double slope() const;

 private:
  double decay_;
  double w_ = 0, sn_ = 0, st_ = 0, snn_ = 0, snt_ = 0;
};

struct SpecPolicyConfig {
  int32_t max_k = 4;
  bool draft_model = false;         // drafting costs draft forwards (else: free)
  bool adaptive = true;             // false: always max_k (bounded by disable_by_batch_size)
  int64_t disable_by_batch_size = 0;  // 0 = none
  double prior_acceptance = 0.7;    // before anything is measured
  // Draft pass cost / target pass cost, assumed until draft passes are measured (the ratio of
  // the models' weights; 1 for a model drafting for itself).
  double draft_cost_ratio = 1.0;
};

class SpecPolicy {
 public:
  explicit SpecPolicy(const SpecPolicyConfig& config) : config_(config) {}

  void observe_target(int64_t tokens, double seconds) { target_.observe(static_cast<double>(tokens), seconds); }
  void observe_draft(int64_t seqs, double seconds) { draft_.observe(static_cast<double>(seqs), seconds); }
  // One verified sequence: `evaluated` drafts were judged (up to and including the first
  // rejection), `accepted` of them accepted.
  void observe_acceptance(int64_t evaluated, int64_t accepted);
  // Drafts per sequence for a step with `decode_seqs` sequences decoding. Not const: counts
  // steps for probing.
  int32_t choose_k(int64_t decode_seqs);
  // Estimated per-draft acceptance probability.
  double acceptance() const;
  // Expected tokens per second of a step with this batch and k, under the fitted model.
  double predicted_rate(int64_t decode_seqs, int32_t k) const;
  int32_t last_k() const { return last_k_; }
  static constexpr int kProbeEvery = 64;

 private:
  SpecPolicyConfig config_;
  LinearCostFit target_, draft_;
  double evaluated_ = 0, accepted_ = 0;  // decayed counts
  int64_t off_steps_ = 0;
  int32_t last_k_ = 0;
};

}  // namespace lancet
