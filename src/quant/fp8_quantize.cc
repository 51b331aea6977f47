// Per-channel FP8 E4M3 quantization: absmax scales, saturating round-to-nearest-even encode.
#include "quant/fp8_quantize.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <mutex>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace lancet {

namespace {

Status non_finite_error(const float* w, int64_t idx, int64_t cols, const std::string& name) {
  const float v = w[idx];
  return InvalidArgument("tensor '" + name + "' holds " + (std::isnan(v) ? "NaN" : "an infinite value") + " at [" +
                         std::to_string(idx / cols) + ", " + std::to_string(idx % cols) +
                         "]; FP8 quantization needs finite weights");
}

}  // namespace

float fp8_row_scale(const float* row, int64_t n, Fp8ScaleDType scale_dtype) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::max(amax, std::fabs(row[i]));
  float s = std::max(amax / kFp8E4M3Max, kFp8MinWeightScale);
  if (scale_dtype == Fp8ScaleDType::kBF16) {
    // Round up, never down: a smaller stored scale would push the row's max past 448.
    uint16_t b = f32_to_bf16(s);
    if (bf16_to_f32(b) < s) ++b;  // positive finite: the next bit pattern is the next value up
    s = bf16_to_f32(b);
  }
  return s;
}

Status quantize_fp8_per_channel(const float* w, int64_t rows, int64_t cols, const std::string& name,
                                uint8_t* q, float* scales, const Fp8QuantizeOptions& opts) {
  if (rows < 0 || cols <= 0) return InvalidArgument(name + ": cannot quantize a [" + std::to_string(rows) +
                                                    ", " + std::to_string(cols) + "] weight");
  // The first bad element found (lowest row among those checked), reported after the loop.
  std::atomic<int64_t> bad_index{-1};
  std::mutex mu;
  auto run = [&](int64_t r0, int64_t r1, int) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* row = w + r * cols;
      for (int64_t c = 0; c < cols; ++c) {
        if (!std::isfinite(row[c])) {
          std::lock_guard<std::mutex> lock(mu);
          const int64_t idx = r * cols + c;
          if (bad_index.load() < 0 || idx < bad_index.load()) bad_index.store(idx);
          return;
        }
      }
      const float s = fp8_row_scale(row, cols, opts.scale_dtype);
      scales[r] = s;
      // Dividing (not multiplying by 1/s) keeps the result exactly w / s as llm-compressor computes it.
      uint8_t* out = q + r * cols;
      for (int64_t c = 0; c < cols; ++c) out[c] = f32_to_fp8e4m3(row[c] / s, /*saturate=*/true);
    }
  };
  if (opts.parallel) {
    default_thread_pool().parallel_for(rows, run, std::max<int64_t>(1, 16384 / cols));
  } else {
    run(0, rows, 0);
  }
  if (const int64_t idx = bad_index.load(); idx >= 0) return non_finite_error(w, idx, cols, name);
  return OkStatus();
}

Status fp8_check_finite(const float* w, int64_t rows, int64_t cols, const std::string& name) {
  for (int64_t i = 0; i < rows * cols; ++i)
    if (!std::isfinite(w[i])) return non_finite_error(w, i, cols, name);
  return OkStatus();
}

void dequantize_fp8_per_channel(const uint8_t* q, const float* scales, int64_t rows, int64_t cols, float* out) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = fp8e4m3_to_f32(q[r * cols + c]) * scales[r];
}

void fake_quantize_fp8_rows(const float* x, int64_t r0, int64_t r1, int64_t cols, float* out) {
  for (int64_t r = r0; r < r1; ++r) {
    const float* xr = x + r * cols;
    float* o = out + r * cols;
    float amax = 0.0f;
    for (int64_t c = 0; c < cols; ++c) amax = std::max(amax, std::fabs(xr[c]));
    const float s = std::max(amax / kFp8E4M3Max, kFp8MinActivationScale);
    const float inv = 1.0f / s;
    for (int64_t c = 0; c < cols; ++c) o[c] = fp8e4m3_to_f32(f32_to_fp8e4m3(xr[c] * inv, /*saturate=*/true)) * s;
  }
}

}  // namespace lancet
