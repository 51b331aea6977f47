// The CUDA backend (BF16): device memory from the stream-ordered allocator on one stream,
// every weight stored on the GPU as BF16 (other formats converted on the host at upload),
// GEMMs through cuBLASLt (BF16 inputs, FP32 accumulation and output), and our own kernels for
// the rest (kernels.h). Activations stay f32 at the interface, as backend.h requires.
// Ops only enqueue work; synchronize() waits and reports indices the kernels found invalid.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <map>
#include <memory>
#include <string>
#include <span>
#include <tuple>
#include <vector>

#include "backend/backend.h"
#include "backend/cuda/cuda_factory.h"

namespace lancet::cuda {

// Owns the stream; buffers keep it alive through shared_ptr so a Buffer freed after the
// backend still releases its memory in stream order.
struct CudaContext {
  int device = 0;
  cudaStream_t stream = nullptr;
  ~CudaContext();
};

// Makes `device` current for a scope and restores the previous one (frees and destructors of
// one GPU's objects may run while a thread drives another GPU).
class DeviceScope {
 public:
  explicit DeviceScope(int device) {
    if (cudaGetDevice(&prev_) == cudaSuccess && prev_ != device) {
      cudaSetDevice(device);
      switched_ = true;
    }
  }
  ~DeviceScope() {
    if (switched_) cudaSetDevice(prev_);
  }
  DeviceScope(const DeviceScope&) = delete;
  DeviceScope& operator=(const DeviceScope&) = delete;

 private:
  int prev_ = 0;
  bool switched_ = false;
};

// A cached cuBLASLt plan for one (n, m, k, pointer alignment).
struct GemmPlan {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};
};

class CudaBackend final : public Backend {
 public:
  ~CudaBackend() override;
  static StatusOr<std::unique_ptr<CudaBackend>> create(const CudaBackendOptions& opts);

  const char* name() const override { return "cuda"; }
  cudaStream_t stream() const { return ctx_->stream; }
  int num_sms() const { return num_sms_; }

  StatusOr<Buffer> alloc(size_t nbytes) override;
  Status copy_to_device(void* dst, const void* src, size_t nbytes) override;
  Status copy_to_host(void* dst, const void* src, size_t nbytes) override;
  Status zero(void* dst, size_t nbytes) override;
  Status synchronize() override;
  Status make_current() override;
  int device_index() const override { return ctx_->device; }

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
  Status matmul_multi(const float* x, int64_t n, std::span<const WeightMatrix* const> ws,
                      std::span<float* const> ys) override;
  Status matmul_gate_up_silu(const float* x, int64_t n, const WeightMatrix& gate, const WeightMatrix& up,
                             float* gate_out, float* up_out, float* act) override;

  void set_activation_precision(ActivationPrecision p) override { precision_ = p; }
  bool supports_graphs() const override { return true; }
  Status begin_capture() override;
  StatusOr<std::unique_ptr<BackendGraph>> end_capture() override;
  Status launch_graph(BackendGraph& graph) override;
  StatusOr<Buffer> alloc_host(size_t nbytes) override;
  bool memory_info(size_t* free_bytes, size_t* total_bytes) override;
  // Device sampling (cuda_sampling.cc, sampling.cu).
  bool supports_device_sampling() const override { return true; }
  Status sample_rows(const float* logits, int64_t rows, int64_t vocab, std::span<const DeviceSampleRow> params,
                     int32_t* tokens_host) override;

 private:
  CudaBackend() = default;
  // Grows a scratch buffer to at least nbytes (single stream: reuse is ordered).
  Status ensure_scratch(Buffer* buf, size_t nbytes);
  StatusOr<const GemmPlan*> gemm_plan(int64_t n, int64_t m, int64_t k, unsigned align, bool fp8);
  // True when the gemv kernel handles this product (few rows, aligned, k a load multiple).
  bool gemv_fits(const float* x, int64_t n, const WeightMatrix& w) const;
  // xin is x in W's input type (bf16, or fp8 from prepare_gemm_input).
  Status gemm_cublas(const void* xin, int64_t n, const WeightMatrix& w, float* y, float beta = 0.0f);
  Status prepare_gemm_input(const float* x, int64_t n, int64_t k, bool fp8);
  Status gemm_prepared(int64_t n, const WeightMatrix& w, float* y);
  Status launch_status(cudaError_t e, const char* op);

  std::shared_ptr<CudaContext> ctx_;
  int num_sms_ = 0;
  cublasLtHandle_t lt_ = nullptr;
  size_t workspace_bytes_ = 0;
  Buffer workspace_;     // cuBLASLt
  Buffer x_bf16_;        // matmul input converted to bf16
  Buffer x_lo_;          // exact precision: x - bf16(x), rounded to bf16
  ActivationPrecision precision_ = ActivationPrecision::kFast;
  Buffer x_fp8_;         // matmul input quantized to fp8 e4m3 per row
  Buffer x_scale_;       // [rows] scales of x_fp8_
  // Scratch buffers replaced by larger ones stay alive: captured graphs may still use them.
  std::vector<Buffer> retired_;
  bool capturing_ = false;
  Buffer attn_partial_;  // split-KV partial results
  Buffer err_word_;      // unsigned error bits set by kernels (kernels.h)
  // sample_rows staging: params then tokens, pinned on the host and on the device.
  Buffer sample_host_, sample_dev_;
  std::map<std::tuple<int64_t, int64_t, int64_t, unsigned, bool>, GemmPlan> plans_;
};

}  // namespace lancet::cuda
