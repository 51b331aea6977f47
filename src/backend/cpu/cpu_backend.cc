// CpuBackend: memory, weight wrapping and the element-wise ops (norm, rope, silu, gathers).
// Matmul lives in cpu_matmul.cc, KV cache writes and attention in cpu_attention.cc.
#include "backend/cpu/cpu_backend.h"

#include <cmath>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "core/thread_pool.h"
#include "quant/gguf_blocks.h"
#include "backend/cpu/host_op_timer.h"
#include "backend/weight_check.h"

namespace lancet::cpu {

CpuBackend::CpuBackend(const CpuKernels* kernels, const QuantGemmKernels* quant, int num_threads)
    : kernels_(kernels), quant_(quant), pool_(num_threads) {}

StatusOr<Buffer> CpuBackend::alloc(size_t nbytes) {
  const size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) return ResourceExhausted("cpu backend: cannot allocate " + std::to_string(nbytes) + " bytes");
  return Buffer(p, nbytes, std::shared_ptr<void>(p, [](void* q) { std::free(q); }));
}

Status CpuBackend::copy_to_device(void* dst, const void* src, size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
  return OkStatus();
}
Status CpuBackend::copy_to_host(void* dst, const void* src, size_t nbytes) {
  if (nbytes) std::memcpy(dst, src, nbytes);
  return OkStatus();
}
Status CpuBackend::zero(void* dst, size_t nbytes) {
  if (nbytes) std::memset(dst, 0, nbytes);
  return OkStatus();
}

StatusOr<WeightMatrix> CpuBackend::upload_weight(const WeightSpec& spec) {
  ASSIGN_OR_RETURN(const size_t row_bytes, check_weight_spec(spec));
  const TensorView& t = *spec.tensor;
  WeightMatrix w;
  w.name = spec.name;
  w.dtype = t.dtype;
  w.rows = t.shape[0];
  w.cols = t.shape[1];
  w.row_bytes = row_bytes;
  w.data = t.data;
  if (spec.scale) {
    if (t.dtype != DType::kF8E4M3)
      return InvalidArgument(spec.name + ": a weight scale is only meaningful for F8_E4M3 weights");
    const TensorView& s = *spec.scale;
    const int64_t ns = s.numel();
    if (ns != 1 && ns != w.rows)
      return InvalidArgument(spec.name + ": scale has " + std::to_string(ns) + " values, expected 1 or " +
                             std::to_string(w.rows));
    auto vals = std::make_shared<std::vector<float>>(ns);
    if (!convert_to_f32(s.dtype, s.data, vals->data(), static_cast<uint64_t>(ns)))
      return InvalidArgument(spec.name + ": scale dtype " + dtype_name(s.dtype) + " not a float type");
    w.scale_kind = ns == 1 ? WeightScale::kPerTensor : WeightScale::kPerRow;
    w.scales = vals->data();
    w.owner = vals;
  }
  if (quant_ && quant_gemm_supports(w.dtype)) {
    // One repacked copy for the integer kernels; data stays the mapped rows (embedding
    // gathers and the f32-tile path read those).
    std::shared_ptr<PackedWeight> packed = pack_weight(w);
    w.packed = packed.get();
    w.owner = std::move(packed);
  }
  return w;
}

StatusOr<Buffer> CpuBackend::upload_vector_f32(const TensorView& t, const std::string& name) {
  const int64_t n = t.numel();
  if (n <= 0) return InvalidArgument(name + ": empty vector");
  ASSIGN_OR_RETURN(Buffer b, alloc(static_cast<size_t>(n) * sizeof(float)));
  if (!convert_to_f32(t.dtype, t.data, b.as<float>(), static_cast<uint64_t>(n))) {
    Status st = dequantize_row(t.dtype, t.data, b.as<float>(), n);
    if (!st.ok()) return st.with_context(name);
  }
  return b;
}

Status CpuBackend::embedding(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  const OpScope timed(op_timer(), OpKind::kEmbedding);
  for (int64_t i = 0; i < n; ++i)
    if (ids[i] < 0 || ids[i] >= table.rows)
      return OutOfRange(table.name + ": token id " + std::to_string(ids[i]) + " outside [0, " +
                        std::to_string(table.rows) + ")");
  const CpuKernels& kk = *kernels_;
  pool().parallel_for(n, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i)
      kk.convert_tile(table, ids[i], 1, 0, table.cols, out + i * table.cols, table.cols);
  }, 8);
  return OkStatus();
}

Status CpuBackend::rms_norm(const RmsNormArgs& a) {
  const OpScope timed(op_timer(), OpKind::kNorm);
  if (a.rows < 0 || a.dim <= 0 || !a.weight || !a.out || (!a.x && !a.residual))
    return InvalidArgument("rms_norm: bad arguments");
  pool().parallel_for(a.rows, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const float* src;
      if (a.residual) {
        float* r = a.residual + i * a.dim;
        if (a.x) {
          const float* x = a.x + i * a.dim;
          for (int64_t k = 0; k < a.dim; ++k) r[k] += x[k];
        }
        src = r;
      } else {
        src = a.x + i * a.dim;
      }
      double ss = 0.0;
      for (int64_t k = 0; k < a.dim; ++k) ss += static_cast<double>(src[k]) * src[k];
      const float inv = static_cast<float>(1.0 / std::sqrt(ss / a.dim + a.eps));
      float* o = a.out + i * a.dim;
      for (int64_t k = 0; k < a.dim; ++k) o[k] = a.weight[k] * (src[k] * inv);
    }
  }, 16);
  return OkStatus();
}

Status CpuBackend::rope(const RopeArgs& a) {
  const OpScope timed(op_timer(), OpKind::kRope);
  if (a.rotary_dim <= 0 || a.rotary_dim > a.head_dim || a.rotary_dim % 2 != 0)
    return InvalidArgument("rope: rotary_dim " + std::to_string(a.rotary_dim) + " must be even and <= head_dim");
  for (int64_t t = 0; t < a.num_tokens; ++t)
    if (a.positions[t] < 0 || a.positions[t] >= a.max_positions)
      return OutOfRange("rope: position " + std::to_string(a.positions[t]) + " outside the table of " +
                        std::to_string(a.max_positions));
  const int64_t half = a.rotary_dim / 2;
  auto rotate = [&](float* v, const float* c, const float* s) {
    if (a.interleaved) {
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = v[2 * i], x1 = v[2 * i + 1];
        v[2 * i] = x0 * c[i] - x1 * s[i];
        v[2 * i + 1] = x1 * c[i] + x0 * s[i];
      }
    } else {
      for (int64_t i = 0; i < half; ++i) {
        const float x0 = v[i], x1 = v[i + half];
        v[i] = x0 * c[i] - x1 * s[i];
        v[i + half] = x1 * c[i] + x0 * s[i];
      }
    }
  };
  pool().parallel_for(a.num_tokens, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const float* c = a.cos + a.positions[t] * half;
      const float* s = a.sin + a.positions[t] * half;
      for (int64_t h = 0; h < a.num_heads; ++h) rotate(a.q + (t * a.num_heads + h) * a.head_dim, c, s);
      for (int64_t h = 0; h < a.num_kv_heads; ++h) rotate(a.k + (t * a.num_kv_heads + h) * a.head_dim, c, s);
    }
  }, 16);
  return OkStatus();
}

Status CpuBackend::silu_mul(const float* gate, const float* up, int64_t n, int64_t d, float* out) {
  const OpScope timed(op_timer(), OpKind::kActivation);
  pool().parallel_for(n * d, [&](int64_t b, int64_t e, int) {
    for (int64_t i = b; i < e; ++i) {
      const float g = gate[i];
      out[i] = g / (1.0f + std::exp(-g)) * up[i];
    }
  }, 4096);
  return OkStatus();
}

Status CpuBackend::gather_rows(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r,
                               float* out) {
  const OpScope timed(op_timer(), OpKind::kGather);
  for (int64_t i = 0; i < r; ++i) {
    if (rows[i] < 0 || rows[i] >= n)
      return OutOfRange("gather_rows: row " + std::to_string(rows[i]) + " outside [0, " + std::to_string(n) + ")");
    std::memcpy(out + i * d, x + rows[i] * d, d * sizeof(float));
  }
  return OkStatus();
}

Status CpuBackend::scatter_tokens(int32_t* token_ids, const int32_t* samples, const int32_t* pairs, int64_t n) {
  // Backend memory is host memory: the previous step's tokens are already here.
  for (int64_t i = 0; i < n; ++i) token_ids[pairs[2 * i]] = samples[pairs[2 * i + 1]];
  return OkStatus();
}

StatusOr<std::unique_ptr<OpTimer>> CpuBackend::make_op_timer() { return make_host_op_timer(); }

}  // namespace lancet::cpu

namespace lancet {

StatusOr<std::unique_ptr<Backend>> make_cpu_backend(const CpuBackendOptions& opts) {
  ASSIGN_OR_RETURN(const cpu::CpuKernels* k, cpu::select_kernels(opts.isa));
  using QA = CpuBackendOptions::QuantActivations;
  bool quant = opts.quant_activations == QA::kOn;
  if (opts.quant_activations == QA::kAuto) quant = opts.isa == "auto" || opts.isa == "avx512";
  const cpu::QuantGemmKernels* qk = quant ? cpu::select_quant_kernels(opts.isa) : nullptr;
  const int threads = opts.num_threads > 0 ? opts.num_threads : default_thread_pool().num_threads();
  return std::unique_ptr<Backend>(std::make_unique<cpu::CpuBackend>(k, qk, threads));
}

}  // namespace lancet
