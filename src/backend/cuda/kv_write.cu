// Writes this step's K and V rows into their paged cache slots (f32, bf16, or fp8 e4m3 storing
// x / scale, saturated to +-448); one block
// per token, a negative slot skips the token (padding), a slot past the cache sets an error bit.
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

template <typename T>
__device__ __forceinline__ T from_f32(float v);
template <>
__device__ __forceinline__ float from_f32<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_f32<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }

template <>
__device__ __forceinline__ __nv_fp8_e4m3 from_f32<__nv_fp8_e4m3>(float v) { return __nv_fp8_e4m3(v); }

// inv_ks / inv_vs: 1 / the layer's K and V scales (1 for f32 and bf16 caches).
template <typename T>
__global__ void kv_write_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                const int64_t* __restrict__ slots, int64_t row /*kv_heads * head_dim*/,
                                int64_t num_slots, T* __restrict__ kc, T* __restrict__ vc, unsigned* err,
                                float inv_ks, float inv_vs) {
  const int64_t t = blockIdx.x;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  if (slot >= num_slots) {
    if (threadIdx.x == 0) atomicOr(err, kErrKvSlot);
    return;
  }
  const float* ks = k + t * row;
  const float* vs = v + t * row;
  T* kd = kc + slot * row;
  T* vd = vc + slot * row;
  for (int64_t i = threadIdx.x; i < row; i += blockDim.x) {
    kd[i] = from_f32<T>(ks[i] * inv_ks);
    vd[i] = from_f32<T>(vs[i] * inv_vs);
  }
}

}  // namespace

cudaError_t launch_kv_write(const KvWriteArgs& a, const KvCacheLayer& c, unsigned* err, cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (a.num_tokens > 0x7fffffffLL) return cudaErrorInvalidValue;
  const int64_t row = c.num_kv_heads * c.head_dim;
  const int64_t num_slots = c.num_blocks * c.block_size;
  const int threads = row >= 1024 ? 256 : 128;
  const unsigned grid = static_cast<unsigned>(a.num_tokens);
  if (c.dtype == DType::kBF16) {
    kv_write_kernel<__nv_bfloat16><<<grid, threads, 0, s>>>(a.k, a.v, a.slot_mapping, row, num_slots,
                                                            static_cast<__nv_bfloat16*>(c.k),
                                                            static_cast<__nv_bfloat16*>(c.v), err, 1.0f, 1.0f);
  } else if (c.dtype == DType::kF8E4M3) {
    kv_write_kernel<__nv_fp8_e4m3><<<grid, threads, 0, s>>>(a.k, a.v, a.slot_mapping, row, num_slots,
                                                            static_cast<__nv_fp8_e4m3*>(c.k),
                                                            static_cast<__nv_fp8_e4m3*>(c.v), err,
                                                            1.0f / c.k_scale, 1.0f / c.v_scale);
  } else {
    kv_write_kernel<float><<<grid, threads, 0, s>>>(a.k, a.v, a.slot_mapping, row, num_slots,
                                                    static_cast<float*>(c.k), static_cast<float*>(c.v), err, 1.0f,
                                                    1.0f);
  }
  return cudaGetLastError();
}

}  // namespace lancet::cuda
