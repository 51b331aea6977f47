// Matmul y[n, m] = x[n, k] . W[m, k]^T for every weight format. Threads split the output
// rows into tiles of kTileRows; each tile's weights are converted (bf16/f16/fp8 -> f32,
// GGUF blocks dequantized) kTileK columns at a time into a per-thread scratch and then used
// for a whole block of tokens, so the conversion cost is paid once per token block rather
// than once per token, and the whole model is never expanded to f32.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/quant_dot.h"

namespace lancet::cpu {

namespace {
constexpr int64_t kTokenBlock = 128;  // x block [128, kTileK] f32 = 256 KB stays in L2
// Up to this many rows (decode batches), 32-block GGUF weights use integer dot products
// against int8-quantized activations instead of f32 tiles.
constexpr int64_t kQuantDotMaxRows = 4;
}

Status CpuBackend::matmul(const float* x, int64_t n, const WeightMatrix& w, float* y) {
  if (!w.data || w.rows <= 0 || w.cols <= 0) return InvalidArgument("matmul: empty weight " + w.name);
  if (n < 0) return InvalidArgument("matmul: negative row count for " + w.name);
  if (n == 0) return OkStatus();
  const int64_t m = w.rows, k = w.cols;
  const int64_t num_tiles = (m + kTileRows - 1) / kTileRows;
  const bool direct = w.dtype == DType::kF32 && w.scale_kind == WeightScale::kNone;
  if (n <= kQuantDotMaxRows && w.scale_kind == WeightScale::kNone && quant_dot_enabled_) {
    if (QuantRowsDot dot = quant_rows_dot_vnni(w.dtype)) {
      thread_local std::vector<ActQ8Block> xq;
      const int64_t nb = k / 32;
      xq.resize(n * nb);
      for (int64_t i = 0; i < n; ++i) quantize_activation_q8(x + i * k, k, xq.data() + i * nb);
      const ActQ8Block* xqp = xq.data();
      pool().parallel_for(m, [&](int64_t b, int64_t e, int) {
        float tmp[64];
        for (int64_t j = b; j < e; j += 64) {
          const int64_t je = std::min(e, j + 64);
          for (int64_t i = 0; i < n; ++i) {
            dot(w, xqp + i * nb, j, je, tmp);
            std::copy(tmp, tmp + (je - j), y + i * m + j);
          }
        }
      }, 64);
      return OkStatus();
    }
  }
  const CpuKernels& kk = *kernels_;
  pool().parallel_for(num_tiles, [&](int64_t tb, int64_t te, int) {
    thread_local std::vector<float> scratch;
    if (!direct) scratch.resize(kTileRows * kTileK);
    for (int64_t i0 = 0; i0 < n; i0 += kTokenBlock) {
      const int64_t ni = std::min(kTokenBlock, n - i0);
      for (int64_t t = tb; t < te; ++t) {
        const int64_t j0 = t * kTileRows, nr = std::min(kTileRows, m - j0);
        for (int64_t k0 = 0; k0 < k; k0 += kTileK) {
          const int64_t kc = std::min(kTileK, k - k0);
          const float* wt;
          int64_t ldw;
          if (direct) {
            wt = static_cast<const float*>(w.data) + j0 * k + k0;
            ldw = k;
          } else {
            kk.convert_tile(w, j0, nr, k0, kc, scratch.data(), kTileK);
            wt = scratch.data();
            ldw = kTileK;
          }
          kk.gemm_f32(x + i0 * k + k0, k, ni, wt, ldw, nr, kc, y + i0 * m + j0, m, k0 > 0);
        }
      }
    }
  });
  return OkStatus();
}

}  // namespace lancet::cpu
