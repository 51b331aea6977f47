// CudaBackend::sample_rows: checks the rows' settings, stages them with one host-to-device
// copy from pinned memory, launches the sampling kernel (sampling.cu) behind the queued work,
// and brings back only the token ids (one small device-to-host copy).
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

Status check_row(const DeviceSampleRow& p, size_t i, int64_t rows) {
  const std::string at = "sample_rows: params[" + std::to_string(i) + "]: ";
  if (p.row < 0 || p.row >= rows)
    return InvalidArgument(at + "row " + std::to_string(p.row) + " outside [0, " + std::to_string(rows) + ")");
  if (!std::isfinite(p.temperature)) return InvalidArgument(at + "temperature is not finite");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return InvalidArgument(at + "top_p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return InvalidArgument(at + "min_p must be in [0, 1]");
  return OkStatus();
}

}  // namespace

Status CudaBackend::sample_rows(const float* logits, int64_t rows, int64_t vocab,
                                std::span<const DeviceSampleRow> params, int32_t* tokens_host) {
  const OpScope timed(op_timer(), OpKind::kSampling);

  if (params.empty()) return OkStatus();
  if (capturing_) return FailedPrecondition("sample_rows: not allowed while capturing a graph");
  if (vocab <= 0 || vocab > kSampleMaxVocab)
    return InvalidArgument("sample_rows: vocab " + std::to_string(vocab) + " outside [1, " +
                           std::to_string(kSampleMaxVocab) + "]");
  if (rows <= 0 || !logits || !tokens_host) return InvalidArgument("sample_rows: no logits rows or no output");
  for (size_t i = 0; i < params.size(); ++i) RETURN_IF_ERROR(check_row(params[i], i, rows));
  const int64_t n = static_cast<int64_t>(params.size());
  const size_t param_bytes = align_up(params.size_bytes(), 16);
  const size_t bytes = param_bytes + static_cast<size_t>(n) * sizeof(int32_t);
  if (sample_host_.nbytes() < bytes) {
    // Earlier calls finished (each waits for its tokens), so the old buffers are free.
    ASSIGN_OR_RETURN(sample_host_, alloc_host(bytes));
    ASSIGN_OR_RETURN(sample_dev_, alloc(bytes));
  }
  char* h = sample_host_.as<char>();
  char* d = sample_dev_.as<char>();
  std::memcpy(h, params.data(), params.size_bytes());
  LANCET_CUDA_RETURN(cudaMemcpyAsync(d, h, params.size_bytes(), cudaMemcpyHostToDevice, ctx_->stream),
                     "sample_rows: copy params");
  auto* d_tokens = reinterpret_cast<int32_t*>(d + param_bytes);
  RETURN_IF_ERROR(launch_status(
      launch_sample_rows(logits, vocab, reinterpret_cast<const DeviceSampleRow*>(d), n, d_tokens, ctx_->stream),
      "sample_rows"));
  auto* h_tokens = reinterpret_cast<int32_t*>(h + param_bytes);
  LANCET_CUDA_RETURN(cudaMemcpyAsync(h_tokens, d_tokens, static_cast<size_t>(n) * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, ctx_->stream),
                     "sample_rows: copy tokens");
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "sample_rows: synchronize");
  std::memcpy(tokens_host, h_tokens, static_cast<size_t>(n) * sizeof(int32_t));
  return OkStatus();
}

}  // namespace lancet::cuda
