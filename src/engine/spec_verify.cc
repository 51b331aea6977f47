// Draft verification (see spec_verify.h for the rule and why it is exact).
#include "engine/spec_verify.h"

#include <algorithm>
#include <cassert>

namespace lancet {
namespace {

// A rejected draft's replacement: a draw (uniform u) from the residual max(0, p - q) over the
// target's candidates (outside them p is 0), normalized.
int32_t draw_residual(const TokenDistribution& target, const TokenDistribution& q, int64_t vocab, double u) {
  std::vector<double> qdense(vocab, 0.0);
  for (size_t i = 0; i < q.tokens.size(); ++i) qdense[q.tokens[i]] = q.probs[i];
  std::vector<double> resid(target.tokens.size());
  double z = 0;
  for (size_t i = 0; i < target.tokens.size(); ++i) {
    resid[i] = std::max(0.0, target.probs[i] - qdense[target.tokens[i]]);
    z += resid[i];
  }
  if (z <= 0) {  // p == q up to rounding: the residual is p itself
    resid = target.probs;
    z = 1.0;
  }
  const double v = u * z;
  double cum = 0;
  for (size_t i = 0; i < resid.size(); ++i) {
    cum += resid[i];
    if (v < cum && resid[i] > 0) return target.tokens[i];
  }
  return target.tokens.back();
}

}  // namespace

VerifyResult verify_drafts(const VerifyInput& in) {
  assert(in.params && in.vocab > 0);
  const SamplingParams& p = *in.params;
  const int64_t nd = static_cast<int64_t>(in.drafts.size());
  assert(static_cast<int64_t>(in.logits.size()) >= (nd + 1) * in.vocab);
  const bool exact = in.draft_dists.empty() || p.greedy();
  assert(exact || static_cast<int64_t>(in.draft_dists.size()) == nd);

  // Context of row j: the output so far plus drafts [0, j) (penalties and min_tokens see them).
  std::vector<int32_t> out(in.output_tokens.begin(), in.output_tokens.end());
  out.reserve(out.size() + nd + 1);
  VerifyResult r;
  for (int64_t j = 0; j <= nd; ++j) {
    std::span<const float> row = in.logits.subspan(j * in.vocab, in.vocab);
    SampleContext ctx;
    ctx.prompt_tokens = in.prompt_tokens;
    ctx.output_tokens = out;
    ctx.eos_token_ids = in.eos_token_ids;
    ctx.seed = in.seed;
    if (in.force_acceptance_rate >= 0.0 && j < nd) {
      // Benchmark mode: the same per-row work as real verification, a forced decision.
      const uint64_t pos = out.size();
      if (counter_uniform(in.seed ^ kSpecForceSalt, pos) < in.force_acceptance_rate) {
        r.tokens.push_back(sample_result_for(process_logits(row, p, ctx), in.drafts[j], p));
        r.num_accepted++;
        out.push_back(in.drafts[j]);
        continue;
      }
      r.tokens.push_back(sample_token(row, p, ctx));
      break;
    }
    if (exact || j == nd) {
      // The token non-speculative decoding would produce here; the bonus row always ends.
      SampleResult s = sample_token(row, p, ctx);
      const bool accepted = j < nd && s.token == in.drafts[j];
      r.tokens.push_back(std::move(s));
      if (!accepted) break;
      r.num_accepted++;
      out.push_back(in.drafts[j]);
      continue;
    }
    const std::vector<float> x = process_logits(row, p, ctx);
    const TokenDistribution target = sampling_distribution(x, p);
    const TokenDistribution& q = in.draft_dists[j];
    const int32_t d = in.drafts[j];
    const double pd = target.prob_of(d), qd = q.prob_of(d);
    const uint64_t pos = out.size();  // output index of the token decided here
    const double u = counter_uniform(in.seed ^ kSpecAcceptSalt, pos);
    if (qd > 0 ? u * qd < pd : pd > 0) {
      r.tokens.push_back(sample_result_for(x, d, p));
      r.num_accepted++;
      out.push_back(d);
      continue;
    }
    const int32_t tok = draw_residual(target, q, in.vocab, counter_uniform(in.seed ^ kSpecResidualSalt, pos));
    r.tokens.push_back(sample_result_for(x, tok, p));
    break;
  }
  return r;
}

}  // namespace lancet
