// Run-time choice of the kernel table: the best instruction set this CPU supports.
#include <string>

#include "backend/cpu/kernels.h"

namespace lancet::cpu {

static bool cpu_has_avx512() {
  return __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq");
}
static bool cpu_has_avx2() {
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
}

StatusOr<const CpuKernels*> select_kernels(const std::string& isa) {
  if (isa == "auto") {
    if (cpu_has_avx512()) return kernels_avx512();
    if (cpu_has_avx2()) return kernels_avx2();
    return kernels_scalar();
  }
  if (isa == "avx512") {
    if (!cpu_has_avx512()) return Unimplemented("cpu backend: this CPU lacks AVX-512");
    return kernels_avx512();
  }
  if (isa == "avx2") {
    if (!cpu_has_avx2()) return Unimplemented("cpu backend: this CPU lacks AVX2/FMA/F16C");
    return kernels_avx2();
  }
  if (isa == "scalar") return kernels_scalar();
  return InvalidArgument("cpu backend: unknown isa '" + isa + "' (auto, avx512, avx2, scalar)");
}

}  // namespace lancet::cpu
