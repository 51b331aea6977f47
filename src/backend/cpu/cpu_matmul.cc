// Matmul y[n, m] = x[n, k] . W[m, k]^T for every weight format.
//  - Q8_0/Q4_0/Q4_1 with integer kernels on (quant_gemm.h): the activation rows are quantized
//    once per call, then threads split the packed 16-row groups evenly; each thread walks
//    its groups for a block of tokens, so a group's weights stay in L1 across the tokens.
//  - Everything else (and all formats when the integer path is off): threads split the
//    output rows into tiles of kTileRows; each tile's weights are converted (bf16/f16/fp8 ->
//    f32, GGUF blocks dequantized) kTileK columns at a time into a per-thread scratch and
//    then used for a whole block of tokens, so the conversion is paid once per token block
//    and the model is never expanded to f32.
//  - Weights with fp8_activations (W8A8 emulation) first quantize the input rows to E4M3 per
//    row, as the GPU's FP8 GEMMs do, then take their usual path.
#include <algorithm>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "quant/fp8_quantize.h"

namespace lancet::cpu {

namespace {
constexpr int64_t kTokenBlock = 128;       // x block [128, kTileK] f32 = 256 KB stays in L2
constexpr int64_t kQuantTokenBlock = 256;  // int8 activations [256, k] stay in L2

bool cpu_has_vnni() {
  return __builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl");
}
}  // namespace

const QuantGemmKernels* select_quant_kernels(const std::string& isa) {
  if ((isa == "auto" || isa == "avx512") && cpu_has_vnni() && quant_gemm_vnni()) return quant_gemm_vnni();
  if (isa != "scalar" && quant_gemm_avx2()) return quant_gemm_avx2();
  return quant_gemm_scalar();
}

Status CpuBackend::matmul(const float* x, int64_t n, const WeightMatrix& w, float* y) {
  const OpScope timed(op_timer(), OpKind::kGemm);
  if (!w.data || w.rows <= 0 || w.cols <= 0) return InvalidArgument("matmul: empty weight " + w.name);
  if (n < 0) return InvalidArgument("matmul: negative row count for " + w.name);
  if (n == 0) return OkStatus();
  if (w.fp8_activations) {
    const int64_t k = w.cols;
    w8a8_x_.resize(static_cast<size_t>(n * k));
    pool_.parallel_for(n, [&](int64_t b, int64_t e, int) { fake_quantize_fp8_rows(x, b, e, k, w8a8_x_.data()); },
                       std::max<int64_t>(1, 8192 / k));
    x = w8a8_x_.data();
  }
  if (quant_ && w.packed && w.scale_kind == WeightScale::kNone) {
    const auto& pw = *static_cast<const PackedWeight*>(w.packed);
    if (pw.rows != w.rows || pw.cols != w.cols || pw.dtype != w.dtype)
      return InvalidArgument("matmul: packed copy of " + w.name + " does not match the weight");
    return matmul_quant(x, n, pw, y);
  }
  return matmul_tiles(x, n, w, y);
}

Status CpuBackend::matmul_quant(const float* x, int64_t n, const PackedWeight& w, float* y) {
  const int64_t k = w.cols, m = w.rows;
  const QuantActs xa = acts_.prepare(n, k);
  const QuantGemmKernels& qk = *quant_;
  pool_.parallel_for(n, [&](int64_t b, int64_t e, int) { qk.quantize_rows(x, k, b, e, acts_); },
                     std::max<int64_t>(1, 8192 / k));
  pool_.parallel_for(w.groups, [&](int64_t g0, int64_t g1, int) {
    for (int64_t i0 = 0; i0 < n; i0 += kQuantTokenBlock)
      qk.gemm(w, g0, g1, xa, i0, std::min(n, i0 + kQuantTokenBlock), y, m);
  });
  return OkStatus();
}

Status CpuBackend::matmul_tiles(const float* x, int64_t n, const WeightMatrix& w, float* y) {
  const int64_t m = w.rows, k = w.cols;
  const int64_t num_tiles = (m + kTileRows - 1) / kTileRows;
  const bool direct = w.dtype == DType::kF32 && w.scale_kind == WeightScale::kNone;
  const CpuKernels& kk = *kernels_;
  pool_.parallel_for(num_tiles, [&](int64_t tb, int64_t te, int) {
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
