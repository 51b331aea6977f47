// Device enumeration through the CUDA runtime. A machine without a GPU returns no devices.
#include "backend/cuda/device_info.h"

#include <cuda_runtime.h>

#include <atomic>

#include "backend/cuda/pdl.cuh"

namespace lancet::cuda {

std::vector<DeviceInfo> list_devices() {
  std::vector<DeviceInfo> out;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no device" error
    return out;
  }
  for (int i = 0; i < n; ++i) {
    cudaDeviceProp p{};
    if (cudaGetDeviceProperties(&p, i) != cudaSuccess) continue;
    DeviceInfo d;
    d.index = i;
    d.name = p.name;
    d.sm_major = p.major;
    d.sm_minor = p.minor;
    d.total_memory = p.totalGlobalMem;
    d.multiprocessors = p.multiProcessorCount;
    out.push_back(d);
  }
  return out;
}

std::string compiled_architectures() { return LANCET_CUDA_ARCHS; }

namespace {

// A value of the current device, read once per device (0 until read: a process may drive GPUs
// of several kinds); read(dev) returns 0 where it fails.
template <typename Read>
int per_device(std::atomic<int> (&known)[64], Read read) {
  int dev = 0;
  if (cudaGetDevice(&dev) != cudaSuccess || dev < 0 || dev >= 64) return 0;
  int v = known[dev].load(std::memory_order_relaxed);
  if (v == 0 && (v = read(dev)) != 0) known[dev].store(v, std::memory_order_relaxed);
  return v;
}

}  // namespace

int current_device_sm() {
  static std::atomic<int> known[64] = {};
  return per_device(known, [](int dev) {
    int major = 0, minor = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev) != cudaSuccess ||
        cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, dev) != cudaSuccess)
      return 0;
    return major * 10 + minor;
  });
}

int current_device_sms() {
  static std::atomic<int> known[64] = {};
  return per_device(known, [](int dev) {
    int v = 0;
    return cudaDeviceGetAttribute(&v, cudaDevAttrMultiProcessorCount, dev) == cudaSuccess ? v : 0;
  });
}

bool pdl_supported() { return current_device_sm() >= 90; }

}  // namespace lancet::cuda
