// Device enumeration through the CUDA runtime. A machine without a GPU returns no devices.
#include "backend/cuda/device_info.h"

#include <cuda_runtime.h>

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

}  // namespace lancet::cuda
