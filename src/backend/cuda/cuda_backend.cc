// CudaBackend: creation, device memory, copies, the error word, weight upload (FP8 E4M3 kept
// as FP8 with f32 scales; every other format converted to BF16 on the host, then copied) and
// the element-wise ops' argument checks.
// GEMMs live in cuda_matmul.cc, KV writes and attention in cuda_attention.cc, LoRA in cuda_lora.cc.
#include "backend/cuda/cuda_backend.h"

#include <algorithm>
#include <cmath>
#include <utility>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cuda/cuda_check.h"
#include "backend/cuda/event_op_timer.h"
#include "backend/cuda/kernels.h"
#include "core/thread_pool.h"
#include "quant/gguf_blocks.h"
#include "backend/weight_check.h"

namespace lancet::cuda {

CudaContext::~CudaContext() {
  DeviceScope scope(device);
  if (stream) {
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
  }
}

CudaBackend::~CudaBackend() {
  std::unique_ptr<DeviceScope> scope;
  if (ctx_) scope = std::make_unique<DeviceScope>(ctx_->device);
  if (ctx_) cudaStreamSynchronize(ctx_->stream);
  for (auto& kv : plans_) {
    cublasLtMatrixLayoutDestroy(kv.second.a);
    cublasLtMatrixLayoutDestroy(kv.second.b);
    cublasLtMatrixLayoutDestroy(kv.second.c);
    cublasLtMatmulDescDestroy(kv.second.op);
  }
  if (lt_) cublasLtDestroy(lt_);
  if (copy_stream_) {
    cudaStreamSynchronize(copy_stream_);
    cudaStreamDestroy(copy_stream_);
  }
}

StatusOr<std::unique_ptr<CudaBackend>> CudaBackend::create(const CudaBackendOptions& opts) {
  int count = 0;
  cudaError_t e = cudaGetDeviceCount(&count);
  if (e != cudaSuccess || count == 0) {
    cudaGetLastError();
    return FailedPrecondition(std::string("cuda backend: no GPU visible (") +
                              (e == cudaSuccess ? "0 devices" : cudaGetErrorString(e)) + ")");
  }
  if (opts.device < 0 || opts.device >= count)
    return InvalidArgument("cuda backend: device " + std::to_string(opts.device) + " of " + std::to_string(count));
  LANCET_CUDA_RETURN(cudaSetDevice(opts.device), "cudaSetDevice");
  std::unique_ptr<CudaBackend> be(new CudaBackend());
  be->ctx_ = std::make_shared<CudaContext>();
  be->ctx_->device = opts.device;
  LANCET_CUDA_RETURN(cudaStreamCreateWithFlags(&be->ctx_->stream, cudaStreamNonBlocking), "cudaStreamCreate");
  LANCET_CUDA_RETURN(cudaDeviceGetAttribute(&be->num_sms_, cudaDevAttrMultiProcessorCount, opts.device),
                     "multiprocessor count");
  // The per-step metadata is allocated and freed every step: keep freed memory in the pool
  // instead of returning it to the driver (which would make the next allocation slow).
  cudaMemPool_t pool;
  LANCET_CUDA_RETURN(cudaDeviceGetDefaultMemPool(&pool, opts.device), "cudaDeviceGetDefaultMemPool");
  uint64_t threshold = std::numeric_limits<uint64_t>::max();
  LANCET_CUDA_RETURN(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold),
                     "cudaMemPoolSetAttribute");
  LANCET_CUBLAS_RETURN(cublasLtCreate(&be->lt_), "cublasLtCreate");
  be->workspace_bytes_ = opts.gemm_workspace_bytes;
  if (be->workspace_bytes_) {
    ASSIGN_OR_RETURN(be->workspace_, be->alloc(be->workspace_bytes_));
  }
  ASSIGN_OR_RETURN(be->err_word_, be->alloc(sizeof(unsigned)));
  RETURN_IF_ERROR(be->zero(be->err_word_.data(), sizeof(unsigned)));
  RETURN_IF_ERROR(be->synchronize());
  return be;
}

// ---- memory ----

StatusOr<Buffer> CudaBackend::alloc(size_t nbytes) {
  clear_prepared_input();  // the new buffer may sit where a freed prepared input was
  void* p = nullptr;
  const size_t n = std::max<size_t>(nbytes, 1);
  cudaError_t e = cudaMallocAsync(&p, n, ctx_->stream);
  if (e != cudaSuccess) {
    cudaGetLastError();
    if (e == cudaErrorMemoryAllocation)
      return ResourceExhausted("cuda backend: cannot allocate " + std::to_string(nbytes) + " bytes of GPU memory");
    return cuda_status(e, "cudaMallocAsync");
  }
  std::shared_ptr<CudaContext> ctx = ctx_;
  return Buffer(p, nbytes, std::shared_ptr<void>(p, [ctx](void* q) {
                  DeviceScope scope(ctx->device);
                  cudaFreeAsync(q, ctx->stream);
                }));
}

Status CudaBackend::copy_to_device(void* dst, const void* src, size_t nbytes) {
  if (!nbytes) return OkStatus();
  clear_prepared_input();  // dst may be a prepared GEMM input
  // From pageable memory this returns once the data is staged, so src may be reused at once.
  LANCET_CUDA_RETURN(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, ctx_->stream), "copy_to_device");
  return OkStatus();
}

Status CudaBackend::copy_to_host(void* dst, const void* src, size_t nbytes) {
  if (!nbytes) return OkStatus();
  LANCET_CUDA_RETURN(cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDefault, ctx_->stream), "copy_to_host");
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "copy_to_host sync");
  return OkStatus();
}

Status CudaBackend::zero(void* dst, size_t nbytes) {
  if (!nbytes) return OkStatus();
  clear_prepared_input();  // dst may be a prepared GEMM input
  LANCET_CUDA_RETURN(cudaMemsetAsync(dst, 0, nbytes, ctx_->stream), "zero");
  return OkStatus();
}

Status CudaBackend::make_current() {
  LANCET_CUDA_RETURN(cudaSetDevice(ctx_->device), "cudaSetDevice");
  return OkStatus();
}

Status CudaBackend::synchronize() {
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "synchronize");
  unsigned bits = 0;
  LANCET_CUDA_RETURN(cudaMemcpyAsync(&bits, err_word_.data(), sizeof(bits), cudaMemcpyDeviceToHost, ctx_->stream),
                     "read error word");
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "read error word");
  if (!bits) return OkStatus();
  LANCET_CUDA_RETURN(cudaMemsetAsync(err_word_.data(), 0, sizeof(unsigned), ctx_->stream), "clear error word");
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "clear error word");
  std::string what;
  auto add = [&](unsigned bit, const char* msg) {
    if (bits & bit) what += (what.empty() ? "" : "; ") + std::string(msg);
  };
  add(kErrEmbeddingId, "embedding: token id outside the table");
  add(kErrGatherRow, "gather_rows: row index out of range");
  add(kErrRopePosition, "rope: position outside the table");
  add(kErrKvSlot, "kv_write: slot past the cache");
  add(kErrBlockId, "paged_attention: block id outside the cache");
  add(kErrSeqShape, "paged_attention: query_start/context_lens inconsistent or past the block table");
  add(kErrLoraRows, "lora_apply: slot_start inconsistent or a row outside the step's tokens");
  return OutOfRange("cuda backend: " + what + " (the affected outputs were zeroed or skipped)");
}

Status CudaBackend::ensure_scratch(Buffer* buf, size_t nbytes) {
  if (buf->nbytes() >= nbytes && !buf->empty()) return OkStatus();
  // Round up so slowly growing batches do not reallocate every step.
  if (capturing_) return FailedPrecondition("cuda backend: scratch must grow while a graph is being captured");
  size_t cap = std::max<size_t>(nbytes, 1 << 20);
  cap = std::max(cap, buf->nbytes() + buf->nbytes() / 2);
  if (!buf->empty()) retired_.push_back(std::move(*buf));
  ASSIGN_OR_RETURN(*buf, alloc(cap));
  return OkStatus();
}

Status CudaBackend::launch_status(cudaError_t e, const char* op) {
  clear_prepared_input();  // the launched kernel may have written a prepared input
  if (e == cudaSuccess) return OkStatus();
  return cuda_status(e, op);
}

// ---- weights ----

StatusOr<std::unique_ptr<OpTimer>> CudaBackend::make_op_timer() {
  if (capturing_) return FailedPrecondition("cuda backend: ops cannot be timed while a graph is captured");
  return make_event_op_timer(ctx_->stream);
}

StatusOr<WeightMatrix> CudaBackend::upload_weight(const WeightSpec& spec) {
  ASSIGN_OR_RETURN(const size_t src_row_bytes, check_weight_spec(spec));
  const TensorView& t = *spec.tensor;
  const int64_t rows = t.shape[0], cols = t.shape[1];
  // FP8 scales are folded into the BF16 copy (y = x . (w * scale)).
  std::vector<float> scales;
  if (spec.scale) {
    if (t.dtype != DType::kF8E4M3)
      return InvalidArgument(spec.name + ": a weight scale is only meaningful for F8_E4M3 weights");
    const TensorView& s = *spec.scale;
    const int64_t ns = s.numel();
    if (ns != 1 && ns != rows)
      return InvalidArgument(spec.name + ": scale has " + std::to_string(ns) + " values, expected 1 or " +
                             std::to_string(rows));
    scales.resize(static_cast<size_t>(ns));
    if (!convert_to_f32(s.dtype, s.data, scales.data(), static_cast<uint64_t>(ns)))
      return InvalidArgument(spec.name + ": scale dtype " + dtype_name(s.dtype) + " not a float type");
  }
  // FP8 E4M3 stays FP8 (the gemv and FP8 GEMM paths apply the scales) when its rows suit the
  // 16-byte loads; scales go up as f32 [rows], a per-tensor scale repeated (the GEMM's
  // outer-vector scaling takes one scale per output channel).
  if (t.dtype == DType::kF8E4M3 && cols % 16 == 0) {
    if (scales.empty()) scales.assign(1, 1.0f);
    for (float sc : scales)
      if (!std::isfinite(sc) || sc <= 0.0f)
        return InvalidArgument(spec.name + ": weight scales must be finite and positive");
    if (scales.size() == 1) scales.assign(static_cast<size_t>(rows), scales[0]);
    ASSIGN_OR_RETURN(Buffer dev, alloc(src_row_bytes * static_cast<size_t>(rows)));
    ASSIGN_OR_RETURN(Buffer dscale, alloc(scales.size() * sizeof(float)));
    LANCET_CUDA_RETURN(cudaMemcpyAsync(dev.data(), t.data, src_row_bytes * rows, cudaMemcpyHostToDevice, ctx_->stream),
                       "upload_weight");
    LANCET_CUDA_RETURN(cudaMemcpyAsync(dscale.data(), scales.data(), scales.size() * sizeof(float),
                                       cudaMemcpyHostToDevice, ctx_->stream),
                       "upload_weight scales");
    LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "upload_weight");
    has_fp8_weights_ = true;
    WeightMatrix w;
    w.name = spec.name;
    w.dtype = DType::kF8E4M3;
    w.rows = rows;
    w.cols = cols;
    w.row_bytes = src_row_bytes;
    w.data = dev.data();
    w.scale_kind = WeightScale::kPerRow;
    w.scales = dscale.as<float>();
    w.owner = std::make_shared<std::pair<Buffer, Buffer>>(std::move(dev), std::move(dscale));
    return w;
  }
  const size_t dst_row_bytes = static_cast<size_t>(cols) * 2;
  ASSIGN_OR_RETURN(Buffer dev, alloc(dst_row_bytes * static_cast<size_t>(rows)));
  if (t.dtype == DType::kBF16) {
    LANCET_CUDA_RETURN(cudaMemcpyAsync(dev.data(), t.data, dst_row_bytes * rows, cudaMemcpyHostToDevice, ctx_->stream),
                       "upload_weight");
  } else {
    // Convert in chunks of ~64 MB through a host staging buffer.
    const int64_t chunk_rows = std::max<int64_t>(1, (int64_t{64} << 20) / static_cast<int64_t>(dst_row_bytes));
    std::vector<uint16_t> staging(static_cast<size_t>(std::min(chunk_rows, rows) * cols));
    const uint8_t* src = static_cast<const uint8_t*>(t.data);
    for (int64_t r0 = 0; r0 < rows; r0 += chunk_rows) {
      const int64_t nr = std::min(chunk_rows, rows - r0);
      std::vector<Status> errors(static_cast<size_t>(nr));
      default_thread_pool().parallel_for(nr, [&](int64_t b, int64_t e, int) {
        std::vector<float> row(static_cast<size_t>(cols));
        for (int64_t i = b; i < e; ++i) {
          const int64_t r = r0 + i;
          Status st = dequantize_row(t.dtype, src + r * src_row_bytes, row.data(), cols);
          if (!st.ok()) {
            errors[i] = st;
            continue;
          }
          const float sc = scales.empty() ? 1.0f : scales[scales.size() == 1 ? 0 : r];
          uint16_t* out = staging.data() + i * cols;
          for (int64_t c = 0; c < cols; ++c) out[c] = f32_to_bf16(row[c] * sc);
        }
      }, 16);
      for (const Status& st : errors)
        if (!st.ok()) return st.with_context(spec.name);
      LANCET_CUDA_RETURN(cudaMemcpyAsync(static_cast<uint8_t*>(dev.data()) + r0 * dst_row_bytes, staging.data(),
                                         nr * dst_row_bytes, cudaMemcpyHostToDevice, ctx_->stream),
                         "upload_weight");
      LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "upload_weight");
    }
  }
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "upload_weight");
  WeightMatrix w;
  w.name = spec.name;
  w.dtype = DType::kBF16;
  w.rows = rows;
  w.cols = cols;
  w.row_bytes = dst_row_bytes;
  w.data = dev.data();
  w.owner = std::make_shared<Buffer>(std::move(dev));
  return w;
}

StatusOr<Buffer> CudaBackend::upload_vector_f32(const TensorView& t, const std::string& name) {
  const int64_t n = t.numel();
  if (n <= 0) return InvalidArgument(name + ": empty vector");
  std::vector<float> host(static_cast<size_t>(n));
  if (!convert_to_f32(t.dtype, t.data, host.data(), static_cast<uint64_t>(n))) {
    Status st = dequantize_row(t.dtype, t.data, host.data(), n);
    if (!st.ok()) return st.with_context(name);
  }
  ASSIGN_OR_RETURN(Buffer b, alloc(static_cast<size_t>(n) * sizeof(float)));
  LANCET_CUDA_RETURN(cudaMemcpyAsync(b.data(), host.data(), n * sizeof(float), cudaMemcpyHostToDevice, ctx_->stream),
                     "upload_vector_f32");
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "upload_vector_f32");
  return b;
}

// ---- element-wise ops ----

Status CudaBackend::embedding(const WeightMatrix& table, const int32_t* ids, int64_t n, float* out) {
  const OpScope timed(op_timer(), OpKind::kEmbedding);

  if (n < 0) return InvalidArgument("embedding: negative token count");
  if (table.dtype != DType::kBF16 || !table.data)
    return Unimplemented("embedding: table " + table.name + " is " + dtype_name(table.dtype) +
                         "; upload it through the cuda backend (bf16)");
  return launch_status(launch_embedding_bf16(table.data, table.rows, table.cols, ids, n, out,
                                             err_word_.as<unsigned>(), ctx_->stream),
                       "embedding");
}

Status CudaBackend::rms_norm(const RmsNormArgs& a) {
  const OpScope timed(op_timer(), OpKind::kNorm);

  if (a.rows < 0 || a.dim <= 0 || !a.weight || !a.out || (!a.x && !a.residual))
    return InvalidArgument("rms_norm: bad arguments");
  // Rows that will take a cuBLASLt GEMM (more than kGemvMaxRows) are also written in the GEMMs'
  // input type here, in the pass that writes them, instead of by the next matmul (prepared_ in
  // cuda_backend.h): quantized to FP8 with FP8 weights (dims that FP8 weights can have),
  // rounded to BF16 otherwise (fast precision; exact precision splits x in the matmul). FP8
  // rows for the gemv too where it runs on the FP8 tensor cores: its CTAs then copy the codes
  // instead of each quantizing x again.
  if (has_fp8_weights_ && a.dim % 16 == 0 && (a.rows > kGemvMaxRows || gemv_fp8_mma_supported())) {
    RETURN_IF_ERROR(ensure_scratch(&x_fp8_, static_cast<size_t>(a.rows * a.dim)));
    RETURN_IF_ERROR(ensure_scratch(&x_scale_, static_cast<size_t>(a.rows) * sizeof(float)));
    RETURN_IF_ERROR(launch_status(launch_rms_norm_quantize_fp8(a, x_fp8_.data(), x_scale_.as<float>(), ctx_->stream),
                                  "rms_norm"));
    set_prepared_input(a.out, a.rows, a.dim, /*fp8=*/true);
    return OkStatus();
  }
  if (a.rows > kGemvMaxRows && !has_fp8_weights_ && precision_ == ActivationPrecision::kFast) {
    RETURN_IF_ERROR(ensure_scratch(&x_bf16_, static_cast<size_t>(a.rows * a.dim) * 2));
    RETURN_IF_ERROR(launch_status(launch_rms_norm_bf16(a, x_bf16_.data(), ctx_->stream), "rms_norm"));
    set_prepared_input(a.out, a.rows, a.dim, /*fp8=*/false);
    return OkStatus();
  }
  return launch_status(launch_rms_norm(a, ctx_->stream), "rms_norm");
}

Status CudaBackend::rope(const RopeArgs& a) {
  const OpScope timed(op_timer(), OpKind::kRope);

  if (a.rotary_dim <= 0 || a.rotary_dim > a.head_dim || a.rotary_dim % 2 != 0)
    return InvalidArgument("rope: rotary_dim " + std::to_string(a.rotary_dim) + " must be even and <= head_dim");
  if (a.num_tokens < 0 || a.num_heads < 0 || a.num_kv_heads < 0 || !a.positions || !a.cos || !a.sin)
    return InvalidArgument("rope: bad arguments");
  return launch_status(launch_rope(a, err_word_.as<unsigned>(), ctx_->stream), "rope");
}

Status CudaBackend::silu_mul(const float* gate, const float* up, int64_t n, int64_t d, float* out) {
  const OpScope timed(op_timer(), OpKind::kActivation);

  if (n < 0 || d < 0) return InvalidArgument("silu_mul: negative size");
  return launch_status(launch_silu_mul(gate, up, n * d, out, ctx_->stream), "silu_mul");
}

Status CudaBackend::gather_rows(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t r,
                                float* out) {
  const OpScope timed(op_timer(), OpKind::kGather);

  if (n < 0 || d < 0 || r < 0) return InvalidArgument("gather_rows: negative size");
  return launch_status(launch_gather_rows(x, n, d, rows, r, out, err_word_.as<unsigned>(), ctx_->stream),
                       "gather_rows");
}

}  // namespace lancet::cuda

namespace lancet {

StatusOr<std::unique_ptr<Backend>> make_cuda_backend(const CudaBackendOptions& opts) {
  ASSIGN_OR_RETURN(std::unique_ptr<cuda::CudaBackend> be, cuda::CudaBackend::create(opts));
  return std::unique_ptr<Backend>(std::move(be));
}

}  // namespace lancet
