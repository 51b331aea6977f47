// The CPU backend: host memory, weights wrapped zero-copy over the mapped checkpoint, fp32
// arithmetic with SIMD kernels picked at run time (kernels.h) and rows spread over a thread
// pool. It is also the reference every other backend's ops are checked against.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "core/thread_pool.h"

namespace lancet::cpu {

class CpuBackend final : public Backend {
 public:
  CpuBackend(const CpuKernels* kernels, std::unique_ptr<ThreadPool> own_pool);
  // Small-batch GGUF matmuls use int8 activation dot products (quant_dot.h) when on; off,
  // every format goes through f32 tiles (exact w.r.t. dequantize-then-matmul).
  void set_quant_dot(bool on) { quant_dot_enabled_ = on; }
  const char* name() const override { return "cpu"; }
  const CpuKernels& kernels() const { return *kernels_; }
  ThreadPool& pool() { return own_pool_ ? *own_pool_ : default_thread_pool(); }

  StatusOr<Buffer> alloc(size_t nbytes) override;
  Status copy_to_device(void* dst, const void* src, size_t nbytes) override;
  Status copy_to_host(void* dst, const void* src, size_t nbytes) override;
  Status zero(void* dst, size_t nbytes) override;

  StatusOr<WeightMatrix> upload_weight(const WeightSpec& spec) override;
  StatusOr<Buffer> upload_vector_f32(const TensorView& t, const std::string& name) override;

  Status embedding(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) override;
  Status rms_norm(const RmsNormArgs& a) override;
  Status rope(const RopeArgs& a) override;
  Status matmul(const float* x, int64_t n, const WeightMatrix& w, float* y) override;
  Status silu_mul(const float* gate, const float* up, int64_t n, int64_t d, float* out) override;
  Status kv_write(const KvWriteArgs& a, const KvCacheLayer& cache) override;
  Status paged_attention(const PagedAttentionArgs& a, const KvCacheLayer& cache) override;
  Status gather_rows(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r,
                     float* out) override;

 private:
  const CpuKernels* kernels_;
  std::unique_ptr<ThreadPool> own_pool_;
  bool quant_dot_enabled_ = true;  // int8 dot products for small batches (isa auto/avx512)
};

}  // namespace lancet::cpu
