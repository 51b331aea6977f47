// Integer dot products for GGUF 32-element block formats (Q8_0, Q4_0, Q4_1) against
// activations quantized per 32-block to int8 (as llama.cpp does with Q8_0/Q8_1 activations).
// Used for small batches (decode), where dequantizing weight tiles to f32 would dominate.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace lancet::cpu {

// One 32-element block of a quantized activation row: x ~= d * q, sum = sum(q).
struct ActQ8Block {
  float d;
  int32_t sum;
  int8_t q[32];
};

// x [k] -> [k / 32] blocks (k a multiple of 32).
void quantize_activation_q8(const float* x, int64_t k, ActQ8Block* out);

// y[j - j0] = dot(W row j, x) for j in [j0, j1).
using QuantRowsDot = void (*)(const WeightMatrix& w, const ActQ8Block* x, int64_t j0, int64_t j1,
                              float* y /*[j1 - j0]*/);

// The AVX-512 VNNI kernel for `t`, or null (no VNNI on this CPU, or a format without one).
QuantRowsDot quant_rows_dot_vnni(DType t);

}  // namespace lancet::cpu
