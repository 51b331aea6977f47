// How a K or V value (f32) is stored in a cache of type T: f32 as it is, bf16 rounded to
// nearest, fp8 e4m3 saturated to +-448 (the caller has divided by the layer's scale). Shared by
// every kernel that writes the cache, so they store the same bytes.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp8.h>

namespace lancet::cuda {

template <typename T>
__device__ __forceinline__ T kv_store_value(float v);
template <>
__device__ __forceinline__ float kv_store_value<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 kv_store_value<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __nv_fp8_e4m3 kv_store_value<__nv_fp8_e4m3>(float v) { return __nv_fp8_e4m3(v); }

}  // namespace lancet::cuda
