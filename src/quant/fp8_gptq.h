// Error-compensating FP8 E4M3 rounding (GPTQ, Frantar et al. 2022) for per-output-channel
// weights. Round-to-nearest minimises each weight's own error; GPTQ minimises the error of the
// layer's output on calibration inputs, ||X W^T - X Q^T||^2 = sum_r (w_r - q_r)^T H (w_r - q_r)
// with H = X^T X: the input columns are quantized one at a time, and each column's rounding
// error is spread over the columns not yet quantized through the upper Cholesky factor U of
// H^-1 (w_j -= (w_i - q_i) / U_ii * U_ij for j after i), which is the least-squares correction
// of the remaining columns for that error.
//
// The per-row scales stay the absmax scales of the original row (fp8_quantize.h), so the
// checkpoint layout and the inference kernels are unchanged; a compensated value past 448 *
// scale saturates. Columns go in order of decreasing H_ii ("act order": the columns that carry
// most of the output are quantized first, while the most columns are left to absorb their
// error); the order is internal to the rounding, the stored weights keep their layout.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "quant/fp8_quantize.h"

namespace lancet {

struct Fp8GptqOptions {
  // Added to H's diagonal, as a fraction of its mean diagonal, before factoring: keeps the
  // factorization stable with few calibration rows and bounds the corrections. When H is
  // still not positive definite the damping is raised tenfold, up to kMaxDamp.
  double damp = 0.01;
  bool act_order = true;
};

// The factorization of one H, shared by every weight that reads the same input (q/k/v_proj,
// gate/up_proj).
struct Fp8GptqFactor {
  int64_t cols = 0;
  std::vector<int32_t> order;  // [cols] column quantized at step i
  std::vector<float> u;        // [cols, cols] row-major upper Cholesky factor of H^-1, in `order`
  double damp_used = 0;        // the damping that made H positive definite
};

// Factors h ([cols, cols], symmetric, X^T X summed over calibration rows; only finite values).
// Columns with H_ii == 0 (inputs that were always zero) get H_ii = 1: their weights never
// reach the output, so any rounding of them is exact on the calibration data. A non-finite H,
// or one that stays singular at the largest damping, is an InvalidArgument / FailedPrecondition
// naming `name`.
StatusOr<Fp8GptqFactor> fp8_gptq_factor(const float* h /*[cols, cols]*/, int64_t cols, const std::string& name,
                                        const Fp8GptqOptions& opts = {});

// Quantizes w ([rows, cols]) to E4M3 codes q and per-row scales with error compensation over
// f (f.cols == cols). NaN/inf in w is InvalidArgument naming `name` and the element, as
// quantize_fp8_per_channel reports it.
Status quantize_fp8_gptq(const float* w /*[rows, cols]*/, int64_t rows, int64_t cols, const Fp8GptqFactor& f,
                         const std::string& name, uint8_t* q /*[rows, cols]*/, float* scales /*[rows]*/,
                         const Fp8QuantizeOptions& opts = {});

// The factors of a model by the weights they apply to ("model.layers.3.mlp.up_proj.weight").
// Weights without one are rounded to nearest.
class Fp8GptqFactors {
 public:
  void add(const std::string& weight_name, std::shared_ptr<const Fp8GptqFactor> f) { by_name_[weight_name] = std::move(f); }
  const Fp8GptqFactor* find(const std::string& weight_name) const {
    const auto it = by_name_.find(weight_name);
    return it == by_name_.end() ? nullptr : it->second.get();
  }
  size_t size() const { return by_name_.size(); }

 private:
  std::map<std::string, std::shared_ptr<const Fp8GptqFactor>> by_name_;
};

}  // namespace lancet
