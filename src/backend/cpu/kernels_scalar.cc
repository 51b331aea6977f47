// Portable build of the CPU kernels (no ISA flags): the fallback on any x86-64 CPU.
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
namespace isa_scalar {
#define LANCET_ISA_NAME "scalar"
#include "backend/cpu/simd.h"
#include "backend/cpu/kernels_impl.inc"
#undef LANCET_ISA_NAME
}  // namespace isa_scalar

const CpuKernels* kernels_scalar() { return &isa_scalar::kTable; }

}  // namespace lancet::cpu
