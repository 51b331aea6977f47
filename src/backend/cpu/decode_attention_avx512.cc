// AVX-512 (F, BW, VL, DQ) build of the split-KV decode attention kernel.
// GCC 12 flags its own AVX-512 intrinsic headers (_mm512_undefined_*) at -O3.
#pragma GCC diagnostic ignored "-Wuninitialized"
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/decode_attention.h"
#include "core/dtype.h"

namespace lancet::cpu {
namespace decode_avx512 {
#include "backend/cpu/simd.h"
#include "backend/cpu/decode_attention_fp8.inc"
#include "backend/cpu/decode_attention_impl.inc"
}  // namespace decode_avx512

DecodePartitionFn decode_partition_avx512() { return &decode_avx512::decode_partition; }

}  // namespace lancet::cpu
