// Second moments H = X^T X of the inputs of every layer's linear projections, the statistic
// error-compensating FP8 rounding needs (quant/fp8_gptq.h). One matrix per layer and input:
// q/k/v_proj share the input norm's output, gate/up_proj the post-attention norm's output,
// o_proj reads the attention output and down_proj SiLU(gate) * up. Filled by the calibration
// pass as a LlamaModel activation observer; the products run on a backend's matmul (X^T as
// both operands), over batches of buffered rows.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "model/fp8_scales.h"

namespace lancet {

class ActivationMomentObserver final : public LinearInputObserver {
 public:
  // Rows are buffered per input and multiplied out `batch_rows` at a time.
  ActivationMomentObserver(Backend& backend, int64_t num_layers, int64_t batch_rows = 256);

  Status observe(int64_t layer, LinearInput which, const float* x, int64_t rows, int64_t cols) override;
  bool saw_non_finite() const override { return non_finite_; }

  // Folds the rows still buffered into the sums; call once the pass is done.
  Status finish();
  // H ([cols, cols], row-major) of one layer's input, or null when never observed.
  const std::vector<float>* moments(int64_t layer, LinearInput which) const;
  int64_t cols(int64_t layer, LinearInput which) const;
  int64_t rows_seen(int64_t layer, LinearInput which) const;
  // Drops one matrix once it has been used (they are large: cols^2 floats each).
  void release(int64_t layer, LinearInput which);

 private:
  struct Slot {
    int64_t cols = 0;
    int64_t rows = 0;          // rows folded into h
    std::vector<float> h;      // [cols, cols]
    std::vector<float> batch;  // [pending, cols]
    int64_t pending = 0;
  };
  Slot* slot(int64_t layer, LinearInput which);
  const Slot* slot(int64_t layer, LinearInput which) const;
  Status flush(Slot& s);

  Backend& be_;
  int64_t batch_rows_;
  std::vector<Slot> slots_;  // [num_layers * 4]
  bool non_finite_ = false;
};

}  // namespace lancet
