// GPTQ rounding to FP8 E4M3: the factor of H^-1 and the column-by-column quantization.
//
// U (upper, U^T U = H^-1) is computed without forming H^-1: with J the order reversal,
// J H J = S^T S (S upper, a plain Cholesky), so H = (J S J)^T (J S J) and U = J S^-T J.
// Everything is f32 (as the reference implementation); the damping keeps it well conditioned.
// Rows are independent given U, so threads split the rows; each thread walks its rows in tiles
// of kRowTile so that U's row i is read once per tile from L1 rather than once per row.
#include "quant/fp8_gptq.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/dtype.h"
#include "core/thread_pool.h"

namespace lancet {

namespace {

constexpr double kMaxDamp = 10.0;
constexpr int64_t kRowTile = 8;

// y[0, n) -= a * x[0, n): the inner loop of every step here. Built for AVX2+FMA and for the
// baseline, picked at load time by the CPU (GCC function multiversioning).
__attribute__((target_clones("arch=haswell", "default"))) void sub_scaled(float* __restrict__ y,
                                                                         const float* __restrict__ x, float a,
                                                                         int64_t n) {
  for (int64_t j = 0; j < n; ++j) y[j] -= a * x[j];
}

// In-place upper Cholesky a = S^T S of a symmetric [k, k] (upper triangle read and written).
// False when a pivot is not positive (a not positive definite in f32).
bool cholesky_upper(float* a, int64_t k) {
  ThreadPool& pool = default_thread_pool();
  for (int64_t p = 0; p < k; ++p) {
    float* ap = a + p * k;
    const float d = ap[p];
    if (!(d > 0.f) || !std::isfinite(d)) return false;
    const float s = std::sqrt(d);
    ap[p] = s;
    const float inv = 1.f / s;
    for (int64_t j = p + 1; j < k; ++j) ap[j] *= inv;
    const int64_t rest = k - p - 1;
    auto update = [&](int64_t b, int64_t e, int) {
      for (int64_t i = p + 1 + b; i < p + 1 + e; ++i) {
        const float f = ap[i];
        float* ai = a + i * k;
        sub_scaled(ai + i, ap + i, f, k - i);
      }
    };
    if (rest * rest > 1 << 16) {
      pool.parallel_for(rest, update, 16);
    } else {
      update(0, rest, 0);
    }
  }
  return true;
}

// x = s^-1 for an upper triangular s ([k, k], row-major); x's lower triangle is zero.
// Column j of x depends only on columns <= j of s, so threads take interleaved column blocks.
void invert_upper(const float* s, int64_t k, float* x) {
  std::fill(x, x + k * k, 0.f);
  constexpr int64_t kCols = 32;
  const int64_t blocks = (k + kCols - 1) / kCols;
  ThreadPool& pool = default_thread_pool();
  const int64_t lanes = std::min<int64_t>(pool.num_threads(), blocks);
  pool.parallel_for(lanes, [&](int64_t l0, int64_t l1, int) {
    for (int64_t lane = l0; lane < l1; ++lane) {
      for (int64_t blk = lane; blk < blocks; blk += lanes) {
        const int64_t j0 = blk * kCols, j1 = std::min(k, j0 + kCols);
        // Back substitution over rows i < j1: x[i, j] = (delta_ij - sum_{p>i} s[i, p] x[p, j]) / s[i, i].
        for (int64_t i = j1 - 1; i >= 0; --i) {
          const float* si = s + i * k;
          float* xi = x + i * k;
          const int64_t c0 = std::max(j0, i);
          for (int64_t p = std::max(i + 1, j0); p < j1; ++p) {
            // Rows p past i contribute to columns >= p only.
            const float f = si[p];
            const float* xp = x + p * k;
            sub_scaled(xi + p, xp + p, f, j1 - p);
          }
          for (int64_t p = i + 1; p < j0; ++p) {
            const float f = si[p];
            const float* xp = x + p * k;
            sub_scaled(xi + j0, xp + j0, f, j1 - j0);
          }
          const float inv = 1.f / si[i];
          if (i >= j0) xi[i] += 1.f;
          for (int64_t j = c0; j < j1; ++j) xi[j] *= inv;
        }
      }
    }
  }, 1);
}

}  // namespace

StatusOr<Fp8GptqFactor> fp8_gptq_factor(const float* h, int64_t k, const std::string& name,
                                        const Fp8GptqOptions& opts) {
  if (k <= 0) return InvalidArgument(name + ": empty second-moment matrix");
  if (!(opts.damp >= 0) || !std::isfinite(opts.damp))
    return InvalidArgument(name + ": the damping must be a finite value >= 0");
  std::vector<float> diag(static_cast<size_t>(k));
  double mean_diag = 0;
  for (int64_t i = 0; i < k * k; ++i)
    if (!std::isfinite(h[i])) return InvalidArgument(name + ": the calibration second moments are not finite");
  for (int64_t i = 0; i < k; ++i) {
    diag[i] = h[i * k + i];
    if (diag[i] < 0.f) return InvalidArgument(name + ": the second-moment matrix has a negative diagonal entry");
    mean_diag += diag[i];
  }
  mean_diag /= static_cast<double>(k);
  if (!(mean_diag > 0)) return FailedPrecondition(name + ": the calibration inputs are all zero");
  Fp8GptqFactor f;
  f.cols = k;
  f.order.resize(static_cast<size_t>(k));
  std::iota(f.order.begin(), f.order.end(), 0);
  if (opts.act_order)
    std::stable_sort(f.order.begin(), f.order.end(), [&](int32_t a, int32_t b) { return diag[a] > diag[b]; });
  // rev[i] = order[k - 1 - i]: the reversed, permuted H is factored as S^T S.
  std::vector<float> a(static_cast<size_t>(k * k));
  double damp = opts.damp;
  for (;;) {
    for (int64_t i = 0; i < k; ++i) {
      const int64_t ri = f.order[k - 1 - i];
      for (int64_t j = i; j < k; ++j) a[i * k + j] = h[ri * k + f.order[k - 1 - j]];
      // An input that was always zero: any value of its weights gives the same output.
      if (diag[ri] == 0.f) a[i * k + i] = 1.f;
      a[i * k + i] += static_cast<float>(damp * mean_diag);
    }
    if (cholesky_upper(a.data(), k)) break;
    if (damp >= kMaxDamp)
      return FailedPrecondition(name + ": the calibration second moments stay singular with damping " +
                                std::to_string(damp) + " x mean diagonal; use more or more varied calibration prompts");
    damp = damp > 0 ? std::min(kMaxDamp, damp * 10) : 1e-4;
  }
  f.damp_used = damp;
  std::vector<float> x(static_cast<size_t>(k * k));
  for (int64_t i = 0; i < k; ++i)
    for (int64_t j = 0; j < i; ++j) a[i * k + j] = 0.f;
  invert_upper(a.data(), k, x.data());
  f.u.assign(static_cast<size_t>(k * k), 0.f);
  for (int64_t r = 0; r < k; ++r)
    for (int64_t c = r; c < k; ++c) f.u[r * k + c] = x[(k - 1 - c) * k + (k - 1 - r)];
  for (int64_t i = 0; i < k; ++i)
    if (!(f.u[i * k + i] > 0.f) || !std::isfinite(f.u[i * k + i]))
      return FailedPrecondition(name + ": the factor of the inverse second moments is not finite");
  return f;
}

Status quantize_fp8_gptq(const float* w, int64_t rows, int64_t cols, const Fp8GptqFactor& f, const std::string& name,
                         uint8_t* q, float* scales, const Fp8QuantizeOptions& opts) {
  if (rows < 0 || cols <= 0)
    return InvalidArgument(name + ": cannot quantize a [" + std::to_string(rows) + ", " + std::to_string(cols) +
                           "] weight");
  if (f.cols != cols || static_cast<int64_t>(f.u.size()) != cols * cols ||
      static_cast<int64_t>(f.order.size()) != cols)
    return InvalidArgument(name + ": the error-compensation factor is for " + std::to_string(f.cols) +
                           " input columns, the weight has " + std::to_string(cols));
  RETURN_IF_ERROR(fp8_check_finite(w, rows, cols, name));
  const int64_t tiles = (rows + kRowTile - 1) / kRowTile;
  auto run = [&](int64_t t0, int64_t t1, int) {
    std::vector<float> wt(static_cast<size_t>(kRowTile * cols));
    float err[kRowTile];
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t r0 = t * kRowTile, nr = std::min(kRowTile, rows - r0);
      for (int64_t r = 0; r < nr; ++r) {
        const float* row = w + (r0 + r) * cols;
        scales[r0 + r] = fp8_row_scale(row, cols, opts.scale_dtype);
        for (int64_t i = 0; i < cols; ++i) wt[r * cols + i] = row[f.order[i]];
      }
      for (int64_t i = 0; i < cols; ++i) {
        const float* ui = f.u.data() + i * cols;
        const float inv_d = 1.f / ui[i];
        for (int64_t r = 0; r < nr; ++r) {
          const float s = scales[r0 + r];
          const float v = wt[r * cols + i];
          // Dividing by the scale, as round-to-nearest does: the first column is bit for bit RTN's.
          const uint8_t code = f32_to_fp8e4m3(v / s, /*saturate=*/true);
          q[(r0 + r) * cols + f.order[i]] = code;
          err[r] = (v - fp8e4m3_to_f32(code) * s) * inv_d;
        }
        for (int64_t r = 0; r < nr; ++r) {
          const float e = err[r];
          float* wr = wt.data() + r * cols;
          sub_scaled(wr + i + 1, ui + i + 1, e, cols - i - 1);
        }
      }
    }
  };
  if (opts.parallel) {
    default_thread_pool().parallel_for(tiles, run, 1);
  } else {
    run(0, tiles, 0);
  }
  return OkStatus();
}

}  // namespace lancet
