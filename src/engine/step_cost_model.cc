#include "engine/step_cost_model.h"

#include <algorithm>
#include <cmath>

#include "core/logging.h"

namespace lancet {
namespace {

// Feature units, so that the normal equations are well scaled: tokens in thousands, pairs in
// millions, decode context in millions of tokens.
constexpr double kTokenUnit = 1e3, kPairUnit = 1e6, kContextUnit = 1e6;
// Steps (and of them, steps with prompt chunks) before predictions are used.
constexpr int64_t kMinSteps = 8, kMinPromptSteps = 3;
// Before the fit, the share of the budget a step's prompt tokens are scaled to: a token costs
// more as the context grows (attention), so the newest step's time per token underestimates
// the next one's.
constexpr double kColdMargin = 0.8;
// Weight of the newest step in bias_.
constexpr double kBiasWeight = 0.2;

// Solves a x = b (n <= 4) by Gaussian elimination with partial pivoting over the features in
// `use`; false when singular.
bool solve(std::array<std::array<double, 4>, 4> a, std::array<double, 4> b, const std::array<bool, 4>& use,
           std::array<double, 4>* x) {
  int idx[4], n = 0;
  for (int i = 0; i < 4; ++i)
    if (use[i]) idx[n++] = i;
  double m[4][5];
  for (int r = 0; r < n; ++r) {
    for (int c = 0; c < n; ++c) m[r][c] = a[idx[r]][idx[c]];
    m[r][n] = b[idx[r]];
  }
  for (int c = 0; c < n; ++c) {
    int p = c;
    for (int r = c + 1; r < n; ++r)
      if (std::fabs(m[r][c]) > std::fabs(m[p][c])) p = r;
    if (std::fabs(m[p][c]) < 1e-12) return false;
    for (int k = 0; k <= n; ++k) std::swap(m[c][k], m[p][k]);
    for (int r = 0; r < n; ++r) {
      if (r == c) continue;
      const double f = m[r][c] / m[c][c];
      for (int k = c; k <= n; ++k) m[r][k] -= f * m[c][k];
    }
  }
  x->fill(0.0);
  for (int r = 0; r < n; ++r) (*x)[idx[r]] = m[r][n] / m[r][r];
  return true;
}

}  // namespace

void StepFeatures::add_chunk(int64_t start, int64_t n) {
  tokens += n;
  if (n == 1) {
    decode_context += start + 1;
  } else {
    prompt_tokens += n;
    prompt_pairs += static_cast<double>(n) * static_cast<double>(start) + 0.5 * static_cast<double>(n) * (n + 1);
    largest_chunk = std::max(largest_chunk, n);
  }
}

void log_timed_step(const StepFeatures& f, const StepCostModel& model, double ms) {
  LOG_DEBUG("timed step: " << f.tokens << " tokens, largest chunk " << f.largest_chunk << ", "
                           << f.prompt_pairs / 1e6 << "M prompt pairs, " << f.decode_context
                           << " decode context tokens: " << ms << " ms (predicted "
                           << (model.fitted() ? std::to_string(model.predict_ms(f)) : std::string("-")) << ")");
}

StepCostModel::StepCostModel(double forgetting) : forgetting_(std::clamp(forgetting, 1e-3, 1.0)) {}

std::array<double, 4> StepCostModel::features(const StepFeatures& f) {
  return {1.0, static_cast<double>(f.tokens) / kTokenUnit, f.prompt_pairs / kPairUnit,
          static_cast<double>(f.decode_context) / kContextUnit};
}

void StepCostModel::observe(const StepFeatures& f, double ms) {
  if (!(ms >= 0) || !std::isfinite(ms) || f.tokens <= 0) return;
  if (fitted_) {
    const double fit = fitted_ms(f);
    if (fit > 0) bias_ = (1 - kBiasWeight) * bias_ + kBiasWeight * std::clamp(ms / fit, 0.25, 4.0);
  }
  const std::array<double, kF> x = features(f);
  for (int i = 0; i < kF; ++i) {
    for (int j = 0; j < kF; ++j) xtx_[i][j] = forgetting_ * xtx_[i][j] + x[i] * x[j];
    xty_[i] = forgetting_ * xty_[i] + x[i] * ms;
  }
  ++steps_;
  if (f.prompt_pairs > 0) {
    ++prompt_steps_;
    last_prompt_tokens_ = f.prompt_tokens;
    last_prompt_ms_ = ms;
  }
  largest_chunk_ = std::max(largest_chunk_, f.largest_chunk);
  refit();
}

// Least squares with every coefficient >= 0: a negative one's feature is dropped and the rest
// refitted (an active set over four features); a feature never seen gets 0.
void StepCostModel::refit() {
  std::array<bool, kF> use{};
  for (int i = 0; i < kF; ++i) use[i] = xtx_[i][i] > 1e-12;
  // A small ridge on the diagonal keeps features that moved together solvable.
  std::array<std::array<double, kF>, kF> a = xtx_;
  for (int i = 0; i < kF; ++i) a[i][i] += 1e-9 * (1.0 + xtx_[i][i]);
  std::array<double, kF> x{};
  for (int round = 0; round < kF; ++round) {
    if (!solve(a, xty_, use, &x)) break;
    int worst = -1;
    for (int i = 0; i < kF; ++i)
      if (use[i] && x[i] < 0 && (worst < 0 || x[i] < x[worst])) worst = i;
    if (worst < 0) {
      coef_ = x;
      fitted_ = steps_ >= kMinSteps && prompt_steps_ >= kMinPromptSteps;
      return;
    }
    use[worst] = false;
  }
}

double StepCostModel::fitted_ms(const StepFeatures& f) const {
  const std::array<double, kF> x = features(f);
  double ms = 0;
  for (int i = 0; i < kF; ++i) ms += coef_[i] * x[i];
  return ms;
}

double StepCostModel::predict_ms(const StepFeatures& f) const { return bias_ * fitted_ms(f); }

double StepCostModel::step_ms() const { return bias_ * coef_[0]; }

double StepCostModel::decode_row_ms(int64_t context) const {
  return bias_ * (coef_[1] / kTokenUnit + coef_[3] * static_cast<double>(context) / kContextUnit);
}

double StepCostModel::chunk_ms(int64_t start, int64_t n) const {
  StepFeatures f;
  f.add_chunk(start, n);
  return bias_ * (fitted_ms(f) - coef_[0]);
}

int64_t StepCostModel::cold_chunk(double ms) const {
  if (last_prompt_tokens_ <= 0) return kColdStartChunk;
  const double scaled = last_prompt_ms_ > 0 ? kColdMargin * static_cast<double>(last_prompt_tokens_) * ms / last_prompt_ms_
                                            : static_cast<double>(2 * last_prompt_tokens_);
  return std::clamp(static_cast<int64_t>(scaled), std::min<int64_t>(kMinTimedChunk, last_prompt_tokens_),
                    2 * last_prompt_tokens_);
}

int64_t StepCostModel::max_chunk(int64_t start, int64_t want, double ms) const {
  if (want <= 0 || ms <= 0) return 0;
  if (largest_chunk_ > 0) want = std::min(want, 2 * largest_chunk_);
  if (chunk_ms(start, want) <= ms) return want;
  // chunk_ms grows with n: bisect for the largest n that fits.
  int64_t lo = 0, hi = want;  // chunk_ms(lo) <= ms < chunk_ms(hi)
  while (hi - lo > 1) {
    const int64_t mid = lo + (hi - lo) / 2;
    (chunk_ms(start, mid) <= ms ? lo : hi) = mid;
  }
  return lo;
}

}  // namespace lancet
