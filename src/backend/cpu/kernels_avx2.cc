// AVX2 + FMA + F16C build of the CPU kernels (the baseline SIMD level).
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/kernels.h"
#include "core/dtype.h"
#include "quant/gguf_blocks.h"

namespace lancet::cpu {
namespace isa_avx2 {
#define LANCET_ISA_NAME "avx2"
#include "backend/cpu/simd.h"
#include "backend/cpu/kernels_impl.inc"
#undef LANCET_ISA_NAME
}  // namespace isa_avx2

const CpuKernels* kernels_avx2() { return &isa_avx2::kTable; }

}  // namespace lancet::cpu
