// `lancet --version`: the version, the backends compiled in (CPU SIMD levels this machine
// supports; CUDA architectures) and the GPUs the CUDA runtime sees.
#include <cstdio>
#include <string>

#include "cli/commands.h"
#ifdef LANCET_HAVE_CUDA
#include "backend/cuda/device_info.h"
#endif

namespace lancet::cli {

int cmd_version(int argc, char** argv) {
  std::printf("lancet %s\n", LANCET_VERSION);
  std::string simd = "scalar";
  __builtin_cpu_init();
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) simd += " avx2+fma";
  if (__builtin_cpu_supports("avx512f")) simd += " avx512f";
  if (__builtin_cpu_supports("avx512bf16")) simd += " avx512bf16";
  if (__builtin_cpu_supports("avx512vnni")) simd += " avx512vnni";
  std::printf("backend cpu: %s\n", simd.c_str());
#ifdef LANCET_HAVE_CUDA
  std::printf("backend cuda: %s\n", lancet::cuda::compiled_architectures().c_str());
  auto devices = lancet::cuda::list_devices();
  if (devices.empty()) std::printf("gpus: none visible\n");
  for (const auto& d : devices) {
    std::printf("gpu %d: %s (sm_%d%d, %.1f GiB, %d SMs)\n", d.index, d.name.c_str(), d.sm_major,
                d.sm_minor, d.total_memory / 1073741824.0, d.multiprocessors);
  }
#else
  std::printf("backend cuda: not compiled in\n");
#endif
  return 0;
}

}  // namespace lancet::cli
