// CudaBackend::sample_rows: checks the rows' settings, stages them and the rows'
// structured-output masks with one host-to-device copy from pinned memory, launches the
// sampling kernel (sampling.cu) behind the queued work, and brings back only the token ids (one
// small device-to-host copy). The mask staging is shared with sample_rows_async.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sample_staging.h"

namespace lancet::cuda {
namespace {

size_t align_up(size_t x, size_t a) { return (x + a - 1) / a * a; }

}  // namespace

Status check_sample_row(const DeviceSampleRow& p, size_t i, int64_t rows) {
  const std::string at = "sample_rows: params[" + std::to_string(i) + "]: ";
  if (p.allowed_words < 0 || (p.allowed_words > 0 && !p.allowed))
    return InvalidArgument(at + "a mask of " + std::to_string(p.allowed_words) + " words without its words");
  if (p.row < 0 || p.row >= rows)
    return InvalidArgument(at + "row " + std::to_string(p.row) + " outside [0, " + std::to_string(rows) + ")");
  if (!std::isfinite(p.temperature)) return InvalidArgument(at + "temperature is not finite");
  if (!(p.top_p > 0.0f && p.top_p <= 1.0f)) return InvalidArgument(at + "top_p must be in (0, 1]");
  if (!(p.min_p >= 0.0f && p.min_p <= 1.0f)) return InvalidArgument(at + "min_p must be in [0, 1]");
  return OkStatus();
}

int64_t mask_words(int64_t vocab) { return (vocab + 31) / 32; }

int64_t pack_sample_masks(std::span<const DeviceSampleRow> params, int64_t vocab, uint32_t* words) {
  const int64_t W = mask_words(vocab);
  int64_t n = 0;
  for (const DeviceSampleRow& p : params) {
    if (!p.allowed) continue;
    if (words) {
      uint32_t* w = words + n * W;
      const int64_t k = std::min<int64_t>(W, p.allowed_words);
      std::memcpy(w, p.allowed, static_cast<size_t>(k) * sizeof(uint32_t));
      std::memset(w + k, 0, static_cast<size_t>(W - k) * sizeof(uint32_t));
      // Bits past the vocabulary are never read; clear them so equal masks are equal words.
      if (vocab % 32 != 0) w[W - 1] &= (1u << (vocab % 32)) - 1u;
    }
    ++n;
  }
  return n;
}

void point_sample_masks(std::span<DeviceSampleRow> rows, int64_t vocab, const uint32_t* device_words) {
  const int64_t W = mask_words(vocab);
  int64_t n = 0;
  for (DeviceSampleRow& p : rows) {
    if (!p.allowed) continue;
    p.allowed = device_words + n * W;
    p.allowed_words = static_cast<int32_t>(W);
    ++n;
  }
}

Status CudaBackend::sample_rows(const float* logits, int64_t rows, int64_t vocab,
                                std::span<const DeviceSampleRow> params, int32_t* tokens_host) {
  const OpScope timed(op_timer(), OpKind::kSampling);

  if (params.empty()) return OkStatus();
  if (capturing_) return FailedPrecondition("sample_rows: not allowed while capturing a graph");
  if (vocab <= 0 || vocab > kSampleMaxVocab)
    return InvalidArgument("sample_rows: vocab " + std::to_string(vocab) + " outside [1, " +
                           std::to_string(kSampleMaxVocab) + "]");
  if (rows <= 0 || !logits || !tokens_host) return InvalidArgument("sample_rows: no logits rows or no output");
  for (size_t i = 0; i < params.size(); ++i) RETURN_IF_ERROR(check_sample_row(params[i], i, rows));
  const int64_t n = static_cast<int64_t>(params.size());
  // Staging: [params | masks | tokens], the first two copied up at once.
  const int64_t masked = pack_sample_masks(params, vocab, nullptr);
  const size_t param_bytes = align_up(params.size_bytes(), 16);
  const size_t mask_bytes = align_up(static_cast<size_t>(masked * mask_words(vocab)) * sizeof(uint32_t), 16);
  const size_t up_bytes = param_bytes + mask_bytes;
  const size_t bytes = up_bytes + static_cast<size_t>(n) * sizeof(int32_t);
  if (sample_host_.nbytes() < bytes) {
    // Earlier calls finished (each waits for its tokens), so the old buffers are free.
    ASSIGN_OR_RETURN(sample_host_, alloc_host(bytes));
    ASSIGN_OR_RETURN(sample_dev_, alloc(bytes));
  }
  char* h = sample_host_.as<char>();
  char* d = sample_dev_.as<char>();
  std::memcpy(h, params.data(), params.size_bytes());
  if (masked > 0) {
    pack_sample_masks(params, vocab, reinterpret_cast<uint32_t*>(h + param_bytes));
    point_sample_masks(std::span<DeviceSampleRow>(reinterpret_cast<DeviceSampleRow*>(h), params.size()), vocab,
                       reinterpret_cast<const uint32_t*>(d + param_bytes));
  }
  LANCET_CUDA_RETURN(cudaMemcpyAsync(d, h, up_bytes, cudaMemcpyHostToDevice, ctx_->stream),
                     "sample_rows: copy params");
  auto* d_tokens = reinterpret_cast<int32_t*>(d + up_bytes);
  RETURN_IF_ERROR(launch_status(
      launch_sample_rows(logits, vocab, reinterpret_cast<const DeviceSampleRow*>(d), n, d_tokens, ctx_->stream),
      "sample_rows"));
  auto* h_tokens = reinterpret_cast<int32_t*>(h + up_bytes);
  LANCET_CUDA_RETURN(cudaMemcpyAsync(h_tokens, d_tokens, static_cast<size_t>(n) * sizeof(int32_t),
                                     cudaMemcpyDeviceToHost, ctx_->stream),
                     "sample_rows: copy tokens");
  LANCET_CUDA_RETURN(cudaStreamSynchronize(ctx_->stream), "sample_rows: synchronize");
  std::memcpy(tokens_host, h_tokens, static_cast<size_t>(n) * sizeof(int32_t));
  return OkStatus();
}

}  // namespace lancet::cuda
