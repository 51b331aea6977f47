// FP8 E4M3 weight quantization with one scale per output channel (row), the scheme of
// compressed-tensors "FP8_DYNAMIC" checkpoints: scale[r] = absmax(row r) / 448, stored value
// = e4m3(w / scale) (round to nearest even, saturating), dequantized value = e4m3 * scale.
// This is the reference every FP8 path (the converter, online quantization at load) uses, so
// a checkpoint written by `lancet quantize --fp8` and the same model quantized at load time
// hold identical bytes.
#pragma once

#include <cstdint>
#include <string>

#include "core/status.h"

namespace lancet {

// Smallest weight scale: an all-zero row would otherwise get scale 0 (and 0/0 on the way in).
// float32 epsilon, the floor llm-compressor applies to its computed scales.
constexpr float kFp8MinWeightScale = 1.1920928955078125e-07f;

// The dtype the scales are stored in. kBF16 rounds each scale up to the next bf16 value, so
// no element of the row overflows 448 after division by the stored scale.
enum class Fp8ScaleDType { kF32, kBF16 };

struct Fp8QuantizeOptions {
  Fp8ScaleDType scale_dtype = Fp8ScaleDType::kF32;
  // Threads of the default pool split the rows; false = run on the caller only.
  bool parallel = true;
};

// The scale of one row of n values; NaN/inf are the caller's to reject first.
float fp8_row_scale(const float* row /*[n]*/, int64_t n, Fp8ScaleDType scale_dtype);

// Quantizes w row by row into q and scales (scales[r] is exactly representable in the chosen
// scale dtype). A NaN or infinite input is InvalidArgument naming `name` and the element.
Status quantize_fp8_per_channel(const float* w /*[rows, cols]*/, int64_t rows, int64_t cols,
                                const std::string& name, uint8_t* q /*[rows, cols]*/,
                                float* scales /*[rows]*/, const Fp8QuantizeOptions& opts = {});

// OK when every element is finite, else the InvalidArgument quantize_fp8_per_channel reports
// (naming `name` and the first bad element).
Status fp8_check_finite(const float* w /*[rows, cols]*/, int64_t rows, int64_t cols, const std::string& name);

// out[r, c] = e4m3(q[r, c]) * scales[r].
void dequantize_fp8_per_channel(const uint8_t* q /*[rows, cols]*/, const float* scales /*[rows]*/,
                                int64_t rows, int64_t cols, float* out /*[rows, cols]*/);

// Dynamic per-row (per-token) activation quantization as the FP8 GEMMs do it on the GPU
// (backend/cuda/fp8_activations.cu): scale = max(absmax(row) / 448, kFp8MinActivationScale),
// code = e4m3(x * (1 / scale)) rounded to nearest even and saturating; out = code * scale.
// Rows [r0, r1) of x; out may alias x.
constexpr float kFp8MinActivationScale = 1e-12f;
void fake_quantize_fp8_rows(const float* x /*[rows, cols]*/, int64_t r0, int64_t r1, int64_t cols,
                            float* out /*[rows, cols]*/);

}  // namespace lancet
