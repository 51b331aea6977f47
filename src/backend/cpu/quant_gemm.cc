// Weight repacking, activation buffers, and the scalar reference of quant_gemm.h (also the
// fallback on CPUs without AVX2). The SIMD kernels must match these loops bit for bit.
#include "backend/cpu/quant_gemm.h"

#include <algorithm>
#include <cmath>
#include <cstring>

#include "quant/gguf_blocks.h"

namespace lancet::cpu {

bool quant_gemm_supports(DType t) { return t == DType::kQ8_0 || t == DType::kQ4_0 || t == DType::kQ4_1; }

size_t group_block_bytes(DType t) {
  switch (t) {
    case DType::kQ4_0: return 32 + 256;
    case DType::kQ4_1: return 64 + 256;
    case DType::kQ8_0: return 32 + 512;
    default: return 0;
  }
}

std::shared_ptr<PackedWeight> pack_weight(const WeightMatrix& w) {
  auto p = std::make_shared<PackedWeight>();
  p->dtype = w.dtype;
  p->rows = w.rows;
  p->cols = w.cols;
  p->nb = w.cols / kQK;
  p->groups = (w.rows + kPackRows - 1) / kPackRows;
  const size_t gbb = group_block_bytes(w.dtype);
  p->bytes.assign(static_cast<size_t>(p->groups * p->nb) * gbb, 0);
  const auto* base = static_cast<const uint8_t*>(w.data);
  for (int64_t g = 0; g < p->groups; ++g) {
    for (int64_t b = 0; b < p->nb; ++b) {
      uint8_t* rec = p->bytes.data() + (g * p->nb + b) * gbb;
      auto* d = reinterpret_cast<uint16_t*>(rec);
      for (int64_t r = 0; r < kPackRows; ++r) {
        const int64_t row = g * kPackRows + r;
        if (row >= w.rows) break;
        const uint8_t* rp = base + row * w.row_bytes;
        const uint8_t* qs;
        int chunks;
        if (w.dtype == DType::kQ4_1) {
          const auto* blk = reinterpret_cast<const BlockQ4_1*>(rp) + b;
          d[r] = blk->d;
          d[kPackRows + r] = blk->m;
          qs = blk->qs;
          chunks = 4;
        } else if (w.dtype == DType::kQ4_0) {
          const auto* blk = reinterpret_cast<const BlockQ4_0*>(rp) + b;
          d[r] = blk->d;
          qs = blk->qs;
          chunks = 4;
        } else {
          const auto* blk = reinterpret_cast<const BlockQ8_0*>(rp) + b;
          d[r] = blk->d;
          qs = reinterpret_cast<const uint8_t*>(blk->qs);
          chunks = 8;
        }
        uint8_t* q = rec + (w.dtype == DType::kQ4_1 ? 64 : 32);
        for (int c = 0; c < chunks; ++c) std::memcpy(q + (c * kPackRows + r) * 4, qs + 4 * c, 4);
      }
    }
  }
  return p;
}

QuantActs QuantActsBuffer::prepare(int64_t n, int64_t k) {
  const int64_t nb = k / kQK;
  if (static_cast<int64_t>(q_.size()) < n * k) q_.resize(n * k);
  if (static_cast<int64_t>(d_.size()) < n * nb) {
    d_.resize(n * nb);
    s_.resize(n * nb);
    sum_.resize(n * nb);
  }
  return QuantActs{n, k, nb, q_.data(), d_.data(), s_.data(), sum_.data()};
}

namespace {

inline float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

void quantize_rows_scalar(const float* x, int64_t k, int64_t i0, int64_t i1, QuantActsBuffer& buf) {
  const int64_t nb = k / kQK;
  for (int64_t i = i0; i < i1; ++i) {
    for (int64_t b = 0; b < nb; ++b) {
      const float* v = x + i * k + b * kQK;
      float amax = 0.f;
      for (int j = 0; j < kQK; ++j) amax = std::max(amax, std::fabs(v[j]));
      const float d = amax / 127.f;
      const float id = amax != 0.f ? 127.f / amax : 0.f;
      int8_t* q = buf.q() + i * k + b * kQK;
      int32_t sum = 0;
      for (int j = 0; j < kQK; ++j) {
        const int qv = static_cast<int>(std::nearbyint(v[j] * id));  // ties to even
        q[j] = static_cast<int8_t>(qv);
        sum += qv;
      }
      buf.d()[i * nb + b] = f16_round(d);
      buf.s()[i * nb + b] = f16_round(d * static_cast<float>(sum));
      buf.sum()[i * nb + b] = sum;
    }
  }
}

void gemm_scalar(const PackedWeight& w, int64_t g0, int64_t g1, const QuantActs& x, int64_t i0, int64_t i1,
                 float* y, int64_t ldy) {
  const size_t gbb = group_block_bytes(w.dtype);
  const bool q8 = w.dtype == DType::kQ8_0, q41 = w.dtype == DType::kQ4_1;
  for (int64_t g = g0; g < g1; ++g) {
    for (int64_t i = i0; i < i1; ++i) {
      float acc[kPackRows] = {}, macc[kPackRows] = {};
      for (int64_t b = 0; b < w.nb; ++b) {
        const uint8_t* rec = w.bytes.data() + (g * w.nb + b) * gbb;
        const auto* dw = reinterpret_cast<const uint16_t*>(rec);
        const uint8_t* qw = rec + (q41 ? 64 : 32);
        const int8_t* xq = x.q + i * x.k + b * kQK;
        const float dx = x.d[i * x.nb + b];
        for (int r = 0; r < kPackRows; ++r) {
          int32_t dot = 0;
          if (q8) {
            for (int c = 0; c < 8; ++c)
              for (int u = 0; u < 4; ++u)
                dot += static_cast<int8_t>(qw[(c * kPackRows + r) * 4 + u]) * xq[4 * c + u];
          } else {
            for (int c = 0; c < 4; ++c)
              for (int u = 0; u < 4; ++u) {
                const uint8_t byte = qw[(c * kPackRows + r) * 4 + u];
                dot += (byte & 15) * xq[4 * c + u] + (byte >> 4) * xq[16 + 4 * c + u];
              }
            if (!q41) dot -= 8 * x.sum[i * x.nb + b];
          }
          acc[r] = std::fma(static_cast<float>(dot), f16_to_f32(dw[r]) * dx, acc[r]);
          if (q41) macc[r] = std::fma(f16_to_f32(dw[kPackRows + r]), x.s[i * x.nb + b], macc[r]);
        }
      }
      for (int r = 0; r < kPackRows; ++r) {
        const int64_t row = g * kPackRows + r;
        if (row < w.rows) y[i * ldy + row] = acc[r] + macc[r];
      }
    }
  }
}

const QuantGemmKernels kScalar = {"scalar", quantize_rows_scalar, gemm_scalar};

}  // namespace

const QuantGemmKernels* quant_gemm_scalar() { return &kScalar; }

}  // namespace lancet::cpu
