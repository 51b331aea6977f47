// Packing f32 values into E4M3 codes for the kernels that write FP8 GEMM inputs (the row
// quantizer, the gate/up epilogue, the fused norm): each conversion is __nv_fp8_e4m3(v * inv)'s
// (round to nearest, saturating to +-448), four codes per 32-bit store.
#pragma once

#include <cuda_fp8.h>

#include <cstdint>

namespace lancet::cuda {

__device__ __forceinline__ uint32_t fp8x4(float4 v, float inv) {
  const __nv_fp8x2_storage_t lo =
      __nv_cvt_float2_to_fp8x2(make_float2(v.x * inv, v.y * inv), __NV_SATFINITE, __NV_E4M3);
  const __nv_fp8x2_storage_t hi =
      __nv_cvt_float2_to_fp8x2(make_float2(v.z * inv, v.w * inv), __NV_SATFINITE, __NV_E4M3);
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

}  // namespace lancet::cuda
