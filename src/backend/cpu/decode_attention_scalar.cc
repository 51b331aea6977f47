// Portable build (no ISA flags) of the split-KV decode attention kernel.
#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "backend/cpu/decode_attention.h"
#include "core/dtype.h"

namespace lancet::cpu {
namespace decode_scalar {
#include "backend/cpu/simd.h"
#include "backend/cpu/decode_attention_fp8.inc"
#include "backend/cpu/decode_attention_impl.inc"
}  // namespace decode_scalar

DecodePartitionFn decode_partition_scalar() { return &decode_scalar::decode_partition; }

}  // namespace lancet::cpu
