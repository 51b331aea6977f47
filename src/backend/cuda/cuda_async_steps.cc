// CudaBackend's side of asynchronous steps: device sampling whose tokens stay on the GPU, the
// token feed into the next step's inputs, and device-to-host copies that run on a copy stream
// of their own, so the host can read one step's tokens while the compute stream already runs
// the next step; and the marks that time the steps on the device (timing events).
#include <cmath>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "backend/cuda/sample_staging.h"

namespace lancet::cuda {
namespace {

// One copy in flight: `done` is recorded on the copy stream after it.
class CudaPendingCopy final : public Backend::PendingCopy {
 public:
  CudaPendingCopy(int device, cudaEvent_t done) : device_(device), done_(done) {}
  ~CudaPendingCopy() override {
    DeviceScope scope(device_);
    cudaEventDestroy(done_);  // released by the driver once the event has completed
  }
  Status wait() override {
    DeviceScope scope(device_);
    LANCET_CUDA_RETURN(cudaEventSynchronize(done_), "copy_to_host_async: wait");
    return OkStatus();
  }

 private:
  int device_;
  cudaEvent_t done_;
};

// A timing event recorded on the compute stream.
class CudaDeviceMark final : public Backend::DeviceMark {
 public:
  CudaDeviceMark(int device, cudaEvent_t event) : device_(device), event_(event) {}
  ~CudaDeviceMark() override {
    DeviceScope scope(device_);
    cudaEventDestroy(event_);
  }
  StatusOr<bool> reached() override {
    DeviceScope scope(device_);
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaSuccess) return true;
    if (e == cudaErrorNotReady) return false;
    return cuda_status(e, "device mark: query");
  }
  StatusOr<double> seconds_after(DeviceMark& earlier) override {
    auto* e = dynamic_cast<CudaDeviceMark*>(&earlier);
    if (!e || e->device_ != device_) return InvalidArgument("device mark: the earlier mark is from another device");
    DeviceScope scope(device_);
    float ms = 0;
    LANCET_CUDA_RETURN(cudaEventElapsedTime(&ms, e->event_, event_), "device mark: elapsed time");
    return static_cast<double>(ms) * 1e-3;
  }

 private:
  int device_;
  cudaEvent_t event_;
};

}  // namespace

Status CudaBackend::sample_rows_async(const float* logits, int64_t rows, int64_t vocab,
                                      std::span<const DeviceSampleRow> params, int32_t* tokens) {
  if (params.empty()) return OkStatus();
  if (capturing_) return FailedPrecondition("sample_rows_async: not allowed while capturing a graph");
  if (vocab <= 0 || vocab > kSampleMaxVocab)
    return InvalidArgument("sample_rows_async: vocab " + std::to_string(vocab) + " outside [1, " +
                           std::to_string(kSampleMaxVocab) + "]");
  if (rows <= 0 || !logits || !tokens) return InvalidArgument("sample_rows_async: no logits rows or no output");
  for (size_t i = 0; i < params.size(); ++i) RETURN_IF_ERROR(check_sample_row(params[i], i, rows));
  const size_t bytes = params.size_bytes();
  const int64_t masked = pack_sample_masks(params, vocab, nullptr);
  const size_t mask_bytes = static_cast<size_t>(masked * mask_words(vocab)) * sizeof(uint32_t);
  // Grown in stream order: the old buffers are freed after the queued draws that read them.
  if (async_params_dev_.nbytes() < bytes) {
    ASSIGN_OR_RETURN(async_params_dev_, alloc(bytes + bytes / 2));
  }
  if (async_masks_dev_.nbytes() < mask_bytes) {
    ASSIGN_OR_RETURN(async_masks_dev_, alloc(mask_bytes + mask_bytes / 2));
  }
  // From pageable memory: staged when the call returns, so the vectors may be reused at once.
  async_params_host_.assign(params.begin(), params.end());
  if (masked > 0) {
    async_masks_host_.resize(mask_bytes / sizeof(uint32_t));
    pack_sample_masks(params, vocab, async_masks_host_.data());
    point_sample_masks(async_params_host_, vocab, async_masks_dev_.as<const uint32_t>());
    RETURN_IF_ERROR(copy_to_device(async_masks_dev_.data(), async_masks_host_.data(), mask_bytes));
  }
  RETURN_IF_ERROR(copy_to_device(async_params_dev_.data(), async_params_host_.data(), bytes));
  return launch_status(launch_sample_rows(logits, vocab, async_params_dev_.as<const DeviceSampleRow>(),
                                          static_cast<int64_t>(params.size()), tokens, ctx_->stream),
                       "sample_rows_async");
}

Status CudaBackend::scatter_tokens(int32_t* token_ids, const int32_t* samples, const int32_t* pairs, int64_t n) {
  if (n <= 0) return OkStatus();
  if (!token_ids || !samples || !pairs) return InvalidArgument("scatter_tokens: null buffer");
  return launch_status(launch_scatter_tokens(token_ids, samples, pairs, n, ctx_->stream), "scatter_tokens");
}

StatusOr<std::unique_ptr<Backend::PendingCopy>> CudaBackend::copy_to_host_async(void* dst, const void* src,
                                                                                 size_t nbytes) {
  if (capturing_) return FailedPrecondition("copy_to_host_async: not allowed while capturing a graph");
  DeviceScope scope(ctx_->device);
  if (!copy_stream_)
    LANCET_CUDA_RETURN(cudaStreamCreateWithFlags(&copy_stream_, cudaStreamNonBlocking), "copy stream");
  cudaEvent_t ready = nullptr, done = nullptr;
  LANCET_CUDA_RETURN(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "copy_to_host_async: event");
  const cudaError_t e = cudaEventCreateWithFlags(&done, cudaEventDisableTiming);
  if (e != cudaSuccess) {
    cudaEventDestroy(ready);
    return cuda_status(e, "copy_to_host_async: event");
  }
  auto pending = std::make_unique<CudaPendingCopy>(ctx_->device, done);
  // The copy waits for the compute stream's work so far, and only the copy stream waits for it.
  cudaError_t r = cudaEventRecord(ready, ctx_->stream);
  if (r == cudaSuccess) r = cudaStreamWaitEvent(copy_stream_, ready, 0);
  if (r == cudaSuccess && nbytes) r = cudaMemcpyAsync(dst, src, nbytes, cudaMemcpyDeviceToHost, copy_stream_);
  if (r == cudaSuccess) r = cudaEventRecord(done, copy_stream_);
  cudaEventDestroy(ready);  // released once recorded work completes
  if (r != cudaSuccess) {
    cudaGetLastError();
    return cuda_status(r, "copy_to_host_async");
  }
  return std::unique_ptr<PendingCopy>(std::move(pending));
}

StatusOr<std::unique_ptr<Backend::DeviceMark>> CudaBackend::mark_device() {
  if (capturing_) return FailedPrecondition("mark_device: not allowed while capturing a graph");
  DeviceScope scope(ctx_->device);
  cudaEvent_t event = nullptr;
  LANCET_CUDA_RETURN(cudaEventCreate(&event), "mark_device: event");
  auto mark = std::make_unique<CudaDeviceMark>(ctx_->device, event);
  LANCET_CUDA_RETURN(cudaEventRecord(event, ctx_->stream), "mark_device: record");
  return std::unique_ptr<DeviceMark>(std::move(mark));
}

}  // namespace lancet::cuda
