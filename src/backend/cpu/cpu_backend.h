// The CPU backend: host memory, weights wrapped zero-copy over the mapped checkpoint (Q8_0/
// Q4_0/Q4_1 also repacked once for the integer kernels of quant_gemm.h), fp32 arithmetic with
// SIMD kernels picked at run time (kernels.h) and work spread over a spinning worker pool
// (worker_pool.h). It is also the reference every other backend's ops are checked against.
#pragma once

#include <memory>
#include <string>

#include "backend/backend.h"
#include "backend/cpu/kernels.h"
#include "backend/cpu/quant_gemm.h"
#include "backend/cpu/worker_pool.h"

namespace lancet::cpu {

class CpuBackend final : public Backend {
 public:
  // quant: the integer kernels for Q8_0/Q4_0/Q4_1 weights, or null to run every format
  // through f32 tiles (exact w.r.t. dequantize-then-matmul).
  CpuBackend(const CpuKernels* kernels, const QuantGemmKernels* quant, int num_threads);
  const char* name() const override { return "cpu"; }
  const CpuKernels& kernels() const { return *kernels_; }
  const QuantGemmKernels* quant_kernels() const { return quant_; }
  WorkerPool& pool() { return pool_; }

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
  Status kv_block_read(std::span<const KvCacheLayer> layers, int64_t block, void* host) override;
  Status kv_block_write(std::span<const KvCacheLayer> layers, int64_t block, const void* host) override;
  // kE4m3Query emulates the GPU's E4M3 query on prompt-chunk steps over fp8 caches (the same
  // per-row rounding), so `lancet eval-precision` measures what that path costs;
  // kE4m3QueryAndP also rounds P to E4M3 as the GPU does (p * 256; the row sums unrounded):
  // an estimate, since the CPU's key chunks are not the GPU's tiles. kE4m3x2Query: the
  // two-term query, rounded as the GPU rounds it; kE4m3x2QueryAndP: both.
  void set_fp8_attention_math(Fp8AttentionMath m) override { fp8_attention_ = m; }
  Status gather_rows(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r,
                     float* out) override;
  Status scatter_tokens(int32_t* token_ids, const int32_t* samples, const int32_t* pairs, int64_t n) override;
  Status lora_apply(const LoraApplyArgs& a) override;  // cpu_lora.cc

 protected:
  StatusOr<std::unique_ptr<OpTimer>> make_op_timer() override;

 private:
  Status matmul_tiles(const float* x, int64_t n, const WeightMatrix& w, float* y);
  Status matmul_quant(const float* x, int64_t n, const PackedWeight& w, float* y);

  const CpuKernels* kernels_;
  const QuantGemmKernels* quant_;
  WorkerPool pool_;
  QuantActsBuffer acts_;  // activation rows quantized for the current matmul
  std::vector<float> attn_partials_;  // split-key attention partial results
  std::vector<float> q_e4m3_;         // query rows rounded to E4M3 (Fp8AttentionMath::kE4m3Query*)
  Fp8AttentionMath fp8_attention_ = Fp8AttentionMath::kF16;
  std::vector<float> w8a8_x_;  // input rows quantized to E4M3 (WeightMatrix::fp8_activations)
};

// The integer kernels for a forced or automatic isa ("auto": the best this CPU has).
const QuantGemmKernels* select_quant_kernels(const std::string& isa);

}  // namespace lancet::cpu
