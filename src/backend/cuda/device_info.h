// What the CUDA runtime sees: used by `lancet --version` and backend selection.
#pragma once

#include <string>
#include <vector>

namespace lancet::cuda {

struct DeviceInfo {
  int index = 0;
  std::string name;
  int sm_major = 0;
  int sm_minor = 0;
  size_t total_memory = 0;
  int multiprocessors = 0;
};

// Devices visible to this process; empty (not an error) when no driver or GPU is present.
std::vector<DeviceInfo> list_devices();
// The architectures this binary carries code for, e.g. "sm_80 sm_90a".
std::string compiled_architectures();
// The current device's compute capability as major * 10 + minor (90 for an H100/H200), 0 when
// there is no device; read once per device.
int current_device_sm();
// The current device's multiprocessor count (132 on an H200), 0 when there is no device; read
// once per device.
int current_device_sms();

}  // namespace lancet::cuda
