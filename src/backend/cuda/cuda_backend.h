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
#include "backend/cuda/attention_plan.h"
#include "backend/cuda/cuda_factory.h"

namespace lancet::cuda {

struct GemvParams;  // kernels.h

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

// What a cuBLASLt plan multiplies: BF16 inputs; FP8 inputs with unit scales (the f32 output is
// rescaled afterwards, or left unscaled for the gate/up epilogue); FP8 inputs with the per-row
// activation and per-channel weight scales applied inside the GEMM (outer-vector scaling).
enum class GemmKind : uint8_t { kBf16, kFp8Unit, kFp8Scaled };
// The type the GEMM writes y in: f32, or BF16 (the BF16 gate/up GEMMs, whose outputs only feed
// the SiLU * up kernel).
enum class GemmOut : uint8_t { kF32, kBf16 };

// A cached cuBLASLt plan for one (n, m, k, pointer alignment, kind, output type).
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
  // Steps of up to kRopeKvFusedMaxTokens tokens: one kernel (rope_kv_write.cu).
  Status rope_kv_write(const RopeArgs& r, const KvWriteArgs& w, const KvCacheLayer& cache) override;
  static constexpr int64_t kRopeKvFusedMaxTokens = 256;
  Status paged_attention(const PagedAttentionArgs& a, const KvCacheLayer& cache) override;
  Status kv_block_read(std::span<const KvCacheLayer> layers, int64_t block, void* host) override;
  Status kv_block_write(std::span<const KvCacheLayer> layers, int64_t block, const void* host) override;
  AttentionStepPlan plan_attention(const AttentionPlanQuery& q, const KvCacheLayer& cache) const override;
  Status gather_rows(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r,
                     float* out) override;
  Status matmul_multi(const float* x, int64_t n, std::span<const WeightMatrix* const> ws,
                      std::span<float* const> ys) override;
  // FP8 weights above kGemvMaxRows rows: gate_out / up_out are left holding the GEMM outputs
  // (UNSCALED, x_q . W_q^T, without outer-vector scaling; backend.h lets this op leave them in
  // any state, and no caller reads them), act is exact, and act's FP8 quantization is left for
  // the down projection. BF16 weights above kGemvMaxRows rows in fast precision: the GEMMs write
  // BF16 into the front half of gate_out / up_out, and act is also left as the down
  // projection's BF16 input.
  Status matmul_gate_up_silu(const float* x, int64_t n, const WeightMatrix& gate, const WeightMatrix& up,
                             float* gate_out, float* up_out, float* act) override;

  // LoRA (cuda_lora.cc, lora.cu): factors stored as BF16, max_rank up to kLoraMaxRank.
  StatusOr<LoraModuleWeights> alloc_lora_module(int64_t num_slots, int64_t max_rank, int64_t in,
                                                int64_t out) override;
  Status set_lora_slot(LoraModuleWeights& w, int64_t slot, const float* a /*[rank, in] host*/,
                       const float* b /*[out, rank] host*/, int64_t rank, float scale) override;
  Status lora_apply(const LoraApplyArgs& a) override;
  // Up to kLoraMaxModules projections of one input in two launches (the 1-module case is
  // lora_apply); others, or args that do not share x and rows, in more.
  Status lora_apply_multi(std::span<const LoraApplyArgs> args) override;

  void set_activation_precision(ActivationPrecision p) override { precision_ = p; }
  void set_fp8_attention_math(Fp8AttentionMath m) override { fp8_attention_ = m; }
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
  // Asynchronous steps (cuda_async_steps.cc): draws into device memory, the token feed,
  // device-to-host copies on a copy stream of their own, and marks of the steps' timeline.
  Status sample_rows_async(const float* logits, int64_t rows, int64_t vocab, std::span<const DeviceSampleRow> params,
                           int32_t* tokens) override;
  Status scatter_tokens(int32_t* token_ids, const int32_t* samples, const int32_t* pairs, int64_t n) override;
  StatusOr<std::unique_ptr<PendingCopy>> copy_to_host_async(void* dst, const void* src, size_t nbytes) override;
  // A timing event recorded on the compute stream.
  StatusOr<std::unique_ptr<DeviceMark>> mark_device() override;

 protected:
  StatusOr<std::unique_ptr<OpTimer>> make_op_timer() override;

 private:
  CudaBackend() = default;
  // Grows a scratch buffer to at least nbytes (single stream: reuse is ordered).
  Status ensure_scratch(Buffer* buf, size_t nbytes);
  // One attention kernel (the route's) over the sequences of a under the split plan sp
  // (paged_attention runs a mixed step as two such calls); first_row is a's query_start[0].
  Status attention_kernel(const PagedAttentionArgs& a, const KvCacheLayer& c, AttentionRoute route,
                          const AttentionStepPlan& sp, int64_t first_row);
  // kFp8Scaled plans are built with the first call's scale vectors (a_scale [m], b_scale [n]).
  StatusOr<GemmPlan*> gemm_plan(int64_t n, int64_t m, int64_t k, unsigned align, GemmKind kind, GemmOut out,
                                const float* a_scale = nullptr, const float* b_scale = nullptr);
  // True when the gemv kernel handles this product (few rows, aligned, k a load multiple).
  bool gemv_fits(const float* x, int64_t n, const WeightMatrix& w) const;
  // xin is x in W's input type (bf16, or fp8 from prepare_gemm_input); y is [n, w.rows] of
  // out's type. kFp8Scaled applies x_scale [n] and w.scales [w.rows] inside the GEMM.
  Status gemm_cublas(const void* xin, int64_t n, const WeightMatrix& w, void* y, GemmKind kind,
                     const float* x_scale = nullptr, float beta = 0.0f, GemmOut out = GemmOut::kF32);
  Status prepare_gemm_input(const float* x, int64_t n, int64_t k, bool fp8);
  // The gemv's x as its producer quantized it (p->xq / p->xq_scale from x_fp8_ / x_scale_), when
  // the record says so and the FP8 tensor-core gemv runs; consumes the record either way.
  void take_prepared_gemv_input(GemvParams* p, DType weights);
  // y = x . W^T from the prepared input. FP8 without outer-vector scaling: rescale = false
  // leaves y unscaled (x_q . W_q^T) for an epilogue that applies the scales.
  Status gemm_prepared(int64_t n, const WeightMatrix& w, float* y, bool rescale = true);
  // Also ends the prepared-input record (below): every op's kernels report through it.
  Status launch_status(cudaError_t e, const char* op);
  // Notes that x_fp8_ / x_scale_ (fp8) or x_bf16_ (!fp8) now hold x [n, k] in the GEMMs' input
  // type (see prepared_).
  void set_prepared_input(const float* x, int64_t n, int64_t k, bool fp8) { prepared_ = {x, n, k, fp8, capturing_}; }
  // The gate/up gemv's record for the down projection's gemv: x_absmax_ holds [n, partials]
  // partial maxima of |x| per row (not codes; only take_prepared_gemv_input reads it).
  void set_prepared_absmax(const float* x, int64_t n, int64_t k, int64_t partials) {
    prepared_ = {x, n, k, true, capturing_, partials};
  }
  void clear_prepared_input() { prepared_ = PreparedInput{}; }

  std::shared_ptr<CudaContext> ctx_;
  int num_sms_ = 0;
  cublasLtHandle_t lt_ = nullptr;
  size_t workspace_bytes_ = 0;
  Buffer workspace_;     // cuBLASLt
  Buffer x_bf16_;        // matmul input converted to bf16
  Buffer x_lo_;          // exact precision: x - bf16(x), rounded to bf16
  ActivationPrecision precision_ = ActivationPrecision::kFast;
  Fp8AttentionMath fp8_attention_ = Fp8AttentionMath::kF16;
  Buffer x_fp8_;         // matmul input quantized to fp8 e4m3 per row
  Buffer x_scale_;       // [rows] scales of x_fp8_
  Buffer x_absmax_;      // [rows, partials] partial maxima of |act| (set_prepared_absmax)
  // GEMM inputs written in the GEMMs' input type by the kernel that produced them (rms_norm; the
  // gate/up epilogue of matmul_gate_up_silu, which writes act for the down projection): FP8
  // quantized (x_fp8_ / x_scale_), or BF16 (x_bf16_, fast precision only), so that
  // prepare_gemm_input skips its conversion pass. The record says "x_fp8_ / x_scale_ (or
  // x_bf16_) hold x [n, k]" and lives from the producing op to the first kernel of the next op:
  //  - launch_status() clears it, and every op reports its launches through launch_status
  //    (the producers set it after their own launch), as do copy_to_device, zero and alloc
  //    (a new buffer, written by the upload that follows, may reuse a freed input's address);
  //  - prepare_gemm_input, which matmul, matmul_multi and matmul_gate_up_silu call before
  //    launching anything, and take_prepared_gemv_input, their gemv path's, are its only readers
  //    and consume it (so matmul_multi's q/k/v GEMMs
  //    share the norm's quantization, and nothing can have written x or x_fp8_ in between);
  //  - it holds capturing_ at the time it was set and counts only in the same mode: a
  //    quantization that ran eagerly is not in a graph being captured, and one recorded in a
  //    capture has not run.
  // Ops that enqueue work without launch_status must clear it too: launch_graph (a replay may
  // rewrite x and x_fp8_; the model's forward never leaves a record at its end, as its last
  // op is a matmul, the lm_head or the down projection, which consumes it), and so must a
  // caller that writes backend memory behind the backend (another backend, a collective:
  // the model's all-reduces write matmul outputs, which are never recorded). Graph capture:
  // the record is host state that only decides which kernels are enqueued, so a replay runs
  // exactly the quantizations the captured op sequence needed.
  struct PreparedInput {
    const float* x = nullptr;  // [n, k]
    int64_t n = 0;
    int64_t k = 0;
    bool fp8 = false;  // which scratch holds it
    bool capturing = false;
    int64_t absmax_partials = 0;  // > 0: set_prepared_absmax's record
  };
  PreparedInput prepared_;
  // An F8E4M3 weight was uploaded as FP8: rms_norm then quantizes its output for the FP8 GEMMs.
  bool has_fp8_weights_ = false;
  // Scratch buffers replaced by larger ones stay alive: captured graphs may still use them.
  std::vector<Buffer> retired_;
  bool capturing_ = false;
  Buffer attn_partial_;  // split-KV partial results
  Buffer err_word_;      // unsigned error bits set by kernels (kernels.h)
  Buffer lora_partials_;  // [kLoraPartialFloats] f32: the LoRA shrink's partial sums (lora.cu)
  // sample_rows staging: params, masks, then tokens, pinned on the host and on the device.
  Buffer sample_host_, sample_dev_;
  // sample_rows_async's params (copied from pageable memory: staged at once, so the host
  // vector is free for the next step while this one is queued).
  Buffer async_params_dev_;
  std::vector<DeviceSampleRow> async_params_host_;
  // ... and the structured-output masks of its rows (cuda_sampling.cc's staging).
  Buffer async_masks_dev_;
  std::vector<uint32_t> async_masks_host_;
  // copy_to_host_async's stream (created on first use; destroyed with the backend).
  cudaStream_t copy_stream_ = nullptr;
  std::map<std::tuple<int64_t, int64_t, int64_t, unsigned, GemmKind, GemmOut>, GemmPlan> plans_;
  // False once cuBLASLt offered no outer-vector-scaled FP8 algorithm (older libraries): the FP8
  // GEMMs then run with unit scales and a rescale pass.
  bool fp8_outer_scaling_ = true;
};

}  // namespace lancet::cuda
