// Writes this step's K and V rows into their paged cache slots (f32, bf16, or fp8 e4m3 storing
// x / scale, saturated to +-448); a negative slot skips the token (padding), a slot past the
// cache sets an error bit. Grid (token, row chunk), four values per thread, so a decode step's
// write is one round trip; launched with programmatic dependent launch (pdl.cuh).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_store.cuh"
#include "backend/cuda/pdl.cuh"

namespace lancet::cuda {
namespace {

constexpr int kThreads = 128;
constexpr int kPer = 4;  // values per thread

// inv_ks / inv_vs: 1 / the layer's K and V scales (1 for f32 and bf16 caches).
template <typename T>
__global__ void kv_write_kernel(const float* __restrict__ k, const float* __restrict__ v,
                                const int64_t* __restrict__ slots, int64_t row /*kv_heads * head_dim*/,
                                int64_t num_slots, T* __restrict__ kc, T* __restrict__ vc, unsigned* err,
                                float inv_ks, float inv_vs) {
  pdl_wait();
  const int64_t t = blockIdx.x;
  const int64_t i0 = (static_cast<int64_t>(blockIdx.y) * kThreads + threadIdx.x) * kPer;
  if (i0 >= row) return;
  const int64_t slot = slots[t];
  if (slot < 0) return;
  if (slot >= num_slots) {
    if (i0 == 0) atomicOr(err, kErrKvSlot);
    return;
  }
  const float* ks = k + t * row;
  const float* vs = v + t * row;
  T* kd = kc + slot * row;
  T* vd = vc + slot * row;
  float kv[kPer], vv[kPer];
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    kv[j] = i0 + j < row ? ks[i0 + j] : 0.0f;
    vv[j] = i0 + j < row ? vs[i0 + j] : 0.0f;
  }
#pragma unroll
  for (int j = 0; j < kPer; ++j) {
    if (i0 + j >= row) break;
    kd[i0 + j] = kv_store_value<T>(kv[j] * inv_ks);
    vd[i0 + j] = kv_store_value<T>(vv[j] * inv_vs);
  }
}

}  // namespace

cudaError_t launch_kv_write(const KvWriteArgs& a, const KvCacheLayer& c, unsigned* err, cudaStream_t s) {
  if (a.num_tokens <= 0) return cudaSuccess;
  if (a.num_tokens > 0x7fffffffLL) return cudaErrorInvalidValue;
  const int64_t row = c.num_kv_heads * c.head_dim;
  const int64_t num_slots = c.num_blocks * c.block_size;
  const int64_t chunks = (row + kThreads * kPer - 1) / (kThreads * kPer);
  if (chunks > 65535) return cudaErrorInvalidValue;
  const dim3 grid(static_cast<unsigned>(a.num_tokens), static_cast<unsigned>(chunks));
  if (c.dtype == DType::kBF16)
    return launch_pdl(kv_write_kernel<__nv_bfloat16>, grid, dim3(kThreads), 0, s, a.k, a.v, a.slot_mapping, row,
                      num_slots, static_cast<__nv_bfloat16*>(c.k), static_cast<__nv_bfloat16*>(c.v), err, 1.0f,
                      1.0f);
  if (c.dtype == DType::kF8E4M3)
    return launch_pdl(kv_write_kernel<__nv_fp8_e4m3>, grid, dim3(kThreads), 0, s, a.k, a.v, a.slot_mapping, row,
                      num_slots, static_cast<__nv_fp8_e4m3*>(c.k), static_cast<__nv_fp8_e4m3*>(c.v), err,
                      1.0f / c.k_scale, 1.0f / c.v_scale);
  return launch_pdl(kv_write_kernel<float>, grid, dim3(kThreads), 0, s, a.k, a.v, a.slot_mapping, row, num_slots,
                    static_cast<float*>(c.k), static_cast<float*>(c.v), err, 1.0f, 1.0f);
}

}  // namespace lancet::cuda
