// AVX2 + FMA + F16C build of the split-KV decode attention kernel.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/decode_attention.h"
#include "core/dtype.h"

namespace lancet::cpu {
namespace decode_avx2 {
#include "backend/cpu/simd.h"
#include "backend/cpu/decode_attention_fp8.inc"
#include "backend/cpu/decode_attention_impl.inc"
}  // namespace decode_avx2

DecodePartitionFn decode_partition_avx2() { return &decode_avx2::decode_partition; }

}  // namespace lancet::cpu
