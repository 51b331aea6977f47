// AVX-512 (F, BW, VL, DQ) build of the CPU kernels.
// GCC 12 flags its own AVX-512 intrinsic headers (_mm512_undefined_*) at -O3.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
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
namespace isa_avx512 {
#define LANCET_ISA_NAME "avx512"
#include "backend/cpu/simd.h"
#include "backend/cpu/kernels_impl.inc"
#undef LANCET_ISA_NAME
}  // namespace isa_avx512

const CpuKernels* kernels_avx512() { return &isa_avx512::kTable; }

}  // namespace lancet::cpu
