// Rope and the KV cache write of a decode-sized step in one kernel: a decode layer otherwise
// runs two launches of a few microseconds for a few kilobytes (the rope kernel, then
// kv_write.cu's). Grid (token, item chunk); one thread per item of the token: a q pair rotated
// in place, a k pair rotated in place and stored in the token's cache slot, or a v pair stored
// there. Values, rotation and stored bytes are those of rope_kernel followed by
// kv_write_kernel (the same arithmetic, kv_store.cuh's conversions). Launched with programmatic
// dependent launch (pdl.cuh).
#include <cuda_bf16.h>
#include <cuda_fp8.h>

#include "backend/cuda/kernels.h"
#include "backend/cuda/kv_store.cuh"
#include "backend/cuda/pdl.cuh"

namespace lancet::cuda {
namespace {

constexpr int kThreads = 128;

template <typename T>
__global__ void rope_kv_write_kernel(RopeArgs r, KvWriteArgs w, T* __restrict__ kc, T* __restrict__ vc,
                                     int64_t num_slots, float inv_ks, float inv_vs, unsigned* err) {
  pdl_wait();
  pdl_release_if_small();
  const int64_t t = blockIdx.x;
  const int64_t half = r.rotary_dim / 2;
  const int64_t item = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x;
  // Items: q pairs, k pairs (rotary dims), then v pairs over the whole head (dims i, i + D/2).
  const int64_t nq = r.num_heads * half, nk = r.num_kv_heads * half, vhalf = r.head_dim / 2;
  // k's dims past rotary_dim (none for Llama) are stored by the v items.
  const int64_t nv = r.num_kv_heads * vhalf;
  if (item >= nq + nk + nv) return;
  const int64_t row = r.num_kv_heads * r.head_dim;
  const int64_t slot = w.slot_mapping[t];
  const bool store = slot >= 0 && slot < num_slots;
  if (slot >= num_slots && item == 0) atomicOr(err, kErrKvSlot);
  if (item < nq + nk) {
    const int32_t pos = r.positions[t];
    if (pos < 0 || pos >= r.max_positions) {
      if (item == 0) atomicOr(err, kErrRopePosition);
      return;
    }
    const bool is_q = item < nq;
    const int64_t p = is_q ? item : item - nq;
    const int64_t head = p / half, i = p % half;
    float* v = is_q ? r.q + (t * r.num_heads + head) * r.head_dim : r.k + (t * r.num_kv_heads + head) * r.head_dim;
    const int64_t i0 = r.interleaved ? 2 * i : i;
    const int64_t i1 = r.interleaved ? 2 * i + 1 : i + half;
    const float c = r.cos[static_cast<int64_t>(pos) * half + i], sn = r.sin[static_cast<int64_t>(pos) * half + i];
    const float x0 = v[i0], x1 = v[i1];
    const float y0 = x0 * c - x1 * sn, y1 = x1 * c + x0 * sn;
    v[i0] = y0;
    v[i1] = y1;
    if (!is_q && store) {
      T* kd = kc + slot * row + head * r.head_dim;
      kd[i0] = kv_store_value<T>(y0 * inv_ks);
      kd[i1] = kv_store_value<T>(y1 * inv_ks);
    }
    return;
  }
  if (!store) return;
  const int64_t p = item - nq - nk;
  const int64_t head = p / vhalf, i = p % vhalf;
  const int64_t off = head * r.head_dim;
  const float* vs = w.v + t * row + off;
  T* vd = vc + slot * row + off;
  vd[i] = kv_store_value<T>(vs[i] * inv_vs);
  vd[i + vhalf] = kv_store_value<T>(vs[i + vhalf] * inv_vs);
  // k's dims past rotary_dim keep their values: stored here, by the same items.
  if (r.rotary_dim < r.head_dim) {
    const float* ks = w.k + t * row + off;
    T* kd = kc + slot * row + off;
    if (i >= r.rotary_dim) kd[i] = kv_store_value<T>(ks[i] * inv_ks);
    if (i + vhalf >= r.rotary_dim) kd[i + vhalf] = kv_store_value<T>(ks[i + vhalf] * inv_ks);
  }
}

}  // namespace

cudaError_t launch_rope_kv_write(const RopeArgs& r, const KvWriteArgs& w, const KvCacheLayer& c, unsigned* err,
                                 cudaStream_t s) {
  if (r.num_tokens <= 0) return cudaSuccess;
  if (r.num_tokens > 0x7fffffffLL || r.num_tokens != w.num_tokens || r.k != w.k || r.head_dim % 2 != 0 ||
      r.num_kv_heads != c.num_kv_heads || r.head_dim != c.head_dim)
    return cudaErrorInvalidValue;
  const int64_t items = (r.num_heads + r.num_kv_heads) * (r.rotary_dim / 2) + r.num_kv_heads * (r.head_dim / 2);
  const int64_t chunks = (items + kThreads - 1) / kThreads;
  if (chunks > 65535) return cudaErrorInvalidValue;
  const int64_t num_slots = c.num_blocks * c.block_size;
  const dim3 grid(static_cast<unsigned>(r.num_tokens), static_cast<unsigned>(chunks));
  if (c.dtype == DType::kBF16)
    return launch_pdl(rope_kv_write_kernel<__nv_bfloat16>, grid, dim3(kThreads), 0, s, r, w,
                      static_cast<__nv_bfloat16*>(c.k), static_cast<__nv_bfloat16*>(c.v), num_slots, 1.0f, 1.0f, err);
  if (c.dtype == DType::kF8E4M3)
    return launch_pdl(rope_kv_write_kernel<__nv_fp8_e4m3>, grid, dim3(kThreads), 0, s, r, w,
                      static_cast<__nv_fp8_e4m3*>(c.k), static_cast<__nv_fp8_e4m3*>(c.v), num_slots,
                      1.0f / c.k_scale, 1.0f / c.v_scale, err);
  return launch_pdl(rope_kv_write_kernel<float>, grid, dim3(kThreads), 0, s, r, w, static_cast<float*>(c.k),
                    static_cast<float*>(c.v), num_slots, 1.0f, 1.0f, err);
}

}  // namespace lancet::cuda
