// Step cost model for time-budgeted steps (SchedulerConfig::max_step_ms): the wall time of a
// model pass predicted from what the step computes, fitted online to the passes the engine
// measures. A step's features: a constant (the weights' read, launches), the tokens computed
// (GEMMs), the query-key pairs of its prompt chunks (prompt attention: a chunk of n tokens
// after s cached ones has n*s + n(n+1)/2) and the context tokens its decode rows read (decode
// attention). The fit is least squares with exponential forgetting (recent steps count most:
// the cost of a token changes with the batch and the context), coefficients kept >= 0, and its
// predictions scaled by the recent ratio of measured to predicted times (a scheduler that
// sizes chunks by the model makes every step look alike to the fit, which then adapts slowly).
// The fit is trusted only near what it has seen: max_chunk never returns a chunk of more than
// twice the largest chunk of a measured step. A fit to steps of decodes and short prompts sees
// the per-token cost of weight-bound passes, which underestimates a compute-bound chunk of
// thousands of tokens several times over (on an H200, 8B shape: a 90 ms budget met at the
// median and exceeded 6x at p99 while a 128K prompt was prefilled in chunks of up to 8192);
// doubling, each step measured, reaches any chunk size in a few steps without such overshoot.
// Before the fit (cold_chunk): the prompt tokens of a step start at kColdStartChunk and follow
// the newest step with prompt chunks, scaled by 0.8 x budget / its measured time (every cost
// counted as if per token) and at most doubled: the first steps of a server were
// the worst gaps seen (8192-token chunks of 270-635 ms against a 90 ms budget on an H200).
#pragma once

#include <array>
#include <cstdint>

namespace lancet {

// The fewest tokens a timed step gives its first prompt chunk, and the prompt tokens of the
// first step with prompt chunks before the model has measured any.
inline constexpr int64_t kMinTimedChunk = 64;
inline constexpr int64_t kColdStartChunk = 512;

struct StepFeatures {
  int64_t tokens = 0;         // tokens computed (prompt, decode and draft)
  int64_t prompt_tokens = 0;  // of them, in chunks of more than one token
  double prompt_pairs = 0;    // query-key pairs of the chunks of more than one token
  int64_t decode_context = 0;  // context tokens of the one-token rows (positions + 1)
  int64_t largest_chunk = 0;   // tokens of its largest chunk of more than one token
  // A chunk of n tokens of a sequence with `start` tokens already computed.
  void add_chunk(int64_t start, int64_t n);
};

class StepCostModel;
// One timed step for the debug log: its features, the model's prediction before it learns from
// the step (when fitted) and the measured time.
void log_timed_step(const StepFeatures& f, const StepCostModel& model, double ms);

class StepCostModel {
 public:
  // forgetting: the weight of the previous steps after each new one (0 < f <= 1).
  explicit StepCostModel(double forgetting = 0.97);

  void observe(const StepFeatures& f, double ms);
  // Enough steps seen, with prompt chunks among them, for predictions to be used.
  bool fitted() const { return fitted_; }
  double predict_ms(const StepFeatures& f) const;
  // The constant part of every step, and the cost of adding one decode row of `context`
  // tokens or a chunk of n tokens at `start` (ms).
  double step_ms() const;
  double decode_row_ms(int64_t context) const;
  double chunk_ms(int64_t start, int64_t n) const;
  // The largest n <= want whose chunk_ms(start, n) <= ms (0 when not even one token fits), and
  // at most 2 * largest_chunk_seen() (when any chunk was seen).
  int64_t max_chunk(int64_t start, int64_t want, double ms) const;
  int64_t largest_chunk_seen() const { return largest_chunk_; }
  // The prompt tokens a step may compute within ms before the model is fitted.
  int64_t cold_chunk(double ms) const;
  const std::array<double, 4>& coefficients() const { return coef_; }  // ms per feature unit
  double bias() const { return bias_; }  // measured / fitted time, recent steps

 private:
  static constexpr int kF = 4;
  static std::array<double, kF> features(const StepFeatures& f);
  double fitted_ms(const StepFeatures& f) const;  // the fit alone, without bias_
  void refit();

  double forgetting_;
  std::array<std::array<double, kF>, kF> xtx_{};
  std::array<double, kF> xty_{};
  std::array<double, kF> coef_{};
  double bias_ = 1.0;
  int64_t steps_ = 0;
  int64_t prompt_steps_ = 0;
  int64_t largest_chunk_ = 0;
  int64_t last_prompt_tokens_ = 0;  // the newest step with prompt chunks: its prompt tokens
  double last_prompt_ms_ = 0;       // and measured time
  bool fitted_ = false;
};

}  // namespace lancet
