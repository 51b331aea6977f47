// Sampling on the device: one CTA per row draws a token with the CPU sampler's semantics
// (runner/sampler.h; backend.h DeviceSampleRow), so only token ids cross PCIe.
//
// No sort: the candidates are ordered by (logit descending, index ascending), and every cut
// the sampler makes is a position in that order, found by a radix select over a 32-bit key
// that orders the floats (three passes over the row of 11, 11 and 10 key bits, each a
// shared-memory histogram and a scan of its bins from the top):
//  - top-k: the k-th candidate, counting elements;
//  - top-p: the first candidate whose running mass reaches top_p of the top-k mass;
//  - the draw: the first candidate whose running mass exceeds u * (mass kept), u from
//    counter_uniform_value(seed, counter) exactly as on the host.
// A cut inside a run of equal logits keeps the lowest indices of the run; the drawn token in
// such a run is found by a select over the index. Min-p keeps a prefix (its test depends on
// the logit only), so it filters elements in the draw's passes.
// Masses are exp((x - max) / T) in double (the CPU's formula) scaled to 2^44 fixed point, so
// sums are exact and the result does not depend on the order of atomics (deterministic).
// NaN logits rank as -inf; -0.0 as +0.0 (equal, as the CPU compares them). A row with a
// structured-output mask (DeviceSampleRow::allowed, here device memory of ceil(vocab / 32) words)
// reads the tokens it refuses as -inf.
#include <cuda_runtime.h>

#include <cstdint>

#include "backend/counter_uniform.h"
#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

constexpr int kThreads = 512;
constexpr int kWarps = kThreads / 32;
constexpr int kBins = 2048;  // 11-bit digits
constexpr int kBinsPerThread = kBins / kThreads;
constexpr double kMassScale = 17592186044416.0;  // 2^44
constexpr unsigned kFull = 0xffffffffu;

using u64 = unsigned long long;

struct SampleShared {
  u64 mass[kBins];
  unsigned count[kBins];
  u64 warp_sum[kWarps];
  float warp_val[kWarps];
  int warp_idx[kWarps];
  int found_bin;
  u64 found_above;
};

// The candidate order as an unsigned key: a larger key is a larger float.
__device__ __forceinline__ float normalize(float x) {
  if (isnan(x)) return -INFINITY;
  return x == 0.0f ? 0.0f : x;
}
__device__ __forceinline__ uint32_t order_key(float x /*normalized*/) {
  const uint32_t b = __float_as_uint(x);
  return (b & 0x80000000u) ? ~b : (b | 0x80000000u);
}
__device__ __forceinline__ float key_value(uint32_t k) {
  return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

// One row's logits as the sampler sees them: normalized, and -inf where the mask refuses.
struct RowLogits {
  const float* x;
  const uint32_t* allowed;  // null: no mask
  __device__ __forceinline__ float operator[](int i) const {
    if (allowed && !((allowed[i >> 5] >> (i & 31)) & 1u)) return -INFINITY;
    return normalize(x[i]);
  }
};

// Per-row constants of the mass function.
struct RowCtx {
  float maxv = 0.0f;
  float inv_t = 1.0f;
  double total = 0.0;     // the row's mass (as a probability normaliser, in units of exp(0))
  double min_p = 0.0;
};

// exp((x - max) / T) as the CPU computes it: float difference, double product and exp. The
// best logit's weight is 1 whatever the difference's arithmetic (inf - inf, 0 * inf).
__device__ __forceinline__ double weight(float x, const RowCtx& rc) {
  if (x == rc.maxv) return 1.0;
  return exp(static_cast<double>(x - rc.maxv) * static_cast<double>(rc.inv_t));
}
__device__ __forceinline__ u64 fixed_mass(double w) { return __double2ull_rn(w * kMassScale); }
// The CPU's min-p test: probs[j] >= min_p * probs[0], probs = w / total, w of the best = 1.
__device__ __forceinline__ bool min_p_keeps(double w, const RowCtx& rc) {
  return w / rc.total >= rc.min_p * (1.0 / rc.total);
}

// A prefix of the candidate order: every element with a key above `key`, the `ties` lowest
// indices of the elements with key `key`, and (minp) only elements passing the min-p test.
struct Domain {
  uint32_t key = 0;  // 0 with ties 0: every element (no normalized float has key 0)
  uint32_t ties = 0;
  bool minp = false;
};

// ---- block-wide helpers (every thread calls them) ----
// Exclusive prefix sum over threads in thread order; *total gets the sum of all.
__device__ u64 block_exclusive_scan(u64 v, u64* total, SampleShared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  u64 inc = v;
  for (int off = 1; off < 32; off <<= 1) {
    const u64 n = __shfl_up_sync(kFull, inc, off);
    if (lane >= off) inc += n;
  }
  if (lane == 31) sh.warp_sum[warp] = inc;
  __syncthreads();
  u64 before = 0, all = 0;
  for (int w = 0; w < kWarps; ++w) {
    if (w < warp) before += sh.warp_sum[w];
    all += sh.warp_sum[w];
  }
  __syncthreads();
  *total = all;
  return before + inc - v;
}

__device__ u64 block_sum(u64 v, SampleShared& sh) {
  u64 total = 0;
  block_exclusive_scan(v, &total, sh);
  return total;
}

// The largest value and its lowest index.
__device__ void block_argmax(float v, int i, float* best_v, int* best_i, SampleShared& sh) {
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  for (int off = 16; off > 0; off >>= 1) {
    const float ov = __shfl_xor_sync(kFull, v, off);
    const int oi = __shfl_xor_sync(kFull, i, off);
    if (ov > v || (ov == v && oi < i)) {
      v = ov;
      i = oi;
    }
  }
  if (lane == 0) {
    sh.warp_val[warp] = v;
    sh.warp_idx[warp] = i;
  }
  __syncthreads();
  float bv = sh.warp_val[0];
  int bi = sh.warp_idx[0];
  for (int w = 1; w < kWarps; ++w) {
    const float ov = sh.warp_val[w];
    const int oi = sh.warp_idx[w];
    if (ov > bv || (ov == bv && oi < bi)) {
      bv = ov;
      bi = oi;
    }
  }
  __syncthreads();
  *best_v = bv;
  *best_i = bi;
}

__device__ void zero_bins(SampleShared& sh) {
  for (int b = threadIdx.x; b < kBins; b += kThreads) {
    sh.mass[b] = 0;
    sh.count[b] = 0;
  }
  if (threadIdx.x == 0) sh.found_bin = -1;
  __syncthreads();
}

// Adds one element per lane to the count histogram, one atomic per distinct bin of the warp
// (logits crowd into few bins at the first level).
__device__ __forceinline__ void count_add(SampleShared& sh, bool valid, unsigned bin) {
  const unsigned peers = __match_any_sync(kFull, valid ? bin : 0xffffffffu);
  if (valid && static_cast<int>(threadIdx.x % 32) == __ffs(peers) - 1) atomicAdd(&sh.count[bin], __popc(peers));
}

struct ScanOut {
  bool found = false;
  int bin = 0;
  u64 above = 0;   // running value before the bin
  u64 total = 0;   // above_in + everything in the histogram
  u64 target = 0;  // the target used (computed from total for a draw)
};

// Scans the bins from the highest down and finds the first whose running value (starting at
// `above`) exceeds `target`. With draw_u >= 0 the target is floor(draw_u * total) instead.
__device__ ScanOut scan_bins(SampleShared& sh, bool by_mass, u64 above, u64 target, double draw_u) {
  u64 v[kBinsPerThread];
  u64 local = 0;
  for (int j = 0; j < kBinsPerThread; ++j) {
    const int b = kBins - 1 - (static_cast<int>(threadIdx.x) * kBinsPerThread + j);
    v[j] = by_mass ? sh.mass[b] : static_cast<u64>(sh.count[b]);
    local += v[j];
  }
  ScanOut o;
  u64 sum = 0;
  const u64 excl = block_exclusive_scan(local, &sum, sh);
  o.total = above + sum;
  if (draw_u >= 0.0) {
    target = o.total ? __double2ull_rd(draw_u * static_cast<double>(o.total)) : 0;
    if (o.total && target >= o.total) target = o.total - 1;
  }
  o.target = target;
  u64 running = above + excl;
  if (running <= target && target < running + local) {
    for (int j = 0; j < kBinsPerThread; ++j) {
      if (running + v[j] > target) {
        sh.found_bin = kBins - 1 - (static_cast<int>(threadIdx.x) * kBinsPerThread + j);
        sh.found_above = running;
        break;
      }
      running += v[j];
    }
  }
  __syncthreads();
  o.found = sh.found_bin >= 0;
  o.bin = sh.found_bin;
  o.above = sh.found_above;
  __syncthreads();  // the next level zeroes the bins and found_bin
  return o;
}

struct Select {
  bool found = false;
  uint32_t key = 0;
  u64 above = 0;           // count or mass of the domain's elements with larger keys
  uint32_t group = 0;      // domain elements with this key
  u64 target = 0;
};

// The first element of the domain, in candidate order, at which the running count (by_mass
// false) or mass exceeds target (draw_u >= 0: target = floor(draw_u * domain mass)).
__device__ Select select_key(const RowLogits& x, int vocab, const RowCtx& rc, const Domain& dom,
                             bool by_mass, u64 target, double draw_u, SampleShared& sh) {
  constexpr int kShift[3] = {21, 10, 0};
  constexpr int kWidth[3] = {11, 11, 10};
  Select s;
  uint32_t prefix = 0;
  u64 above = 0;
  for (int level = 0; level < 3; ++level) {
    const int shift = kShift[level], hi = kShift[level] + kWidth[level];
    const uint32_t mask = (1u << kWidth[level]) - 1;
    const bool last = level == 2;
    zero_bins(sh);
    // The domain's partial run of equal keys, as one contribution.
    if (threadIdx.x == 0 && dom.ties > 0 && (level == 0 || (dom.key >> hi) == prefix)) {
      const double w = weight(key_value(dom.key), rc);
      if (!dom.minp || min_p_keeps(w, rc)) {
        const u64 m = fixed_mass(w);
        const unsigned b = (dom.key >> shift) & mask;
        if (!by_mass) {
          atomicAdd(&sh.count[b], dom.ties);
        } else if (m > 0) {
          atomicAdd(&sh.mass[b], m * dom.ties);
          atomicAdd(&sh.count[b], dom.ties);
        }
      }
    }
    for (int base = 0; base < vocab; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      bool valid = i < vocab;
      unsigned bin = 0;
      u64 m = 0;
      if (valid) {
        const float xv = x[i];
        const uint32_t key = order_key(xv);
        valid = key > dom.key && (level == 0 || (key >> hi) == prefix);
        if (valid && (by_mass || dom.minp)) {
          const double w = weight(xv, rc);
          if (dom.minp && !min_p_keeps(w, rc)) valid = false;
          m = fixed_mass(w);
          if (by_mass && m == 0) valid = false;  // no mass: never where a running mass crosses
        }
        bin = (key >> shift) & mask;
      }
      if (by_mass) {
        if (valid) atomicAdd(&sh.mass[bin], m);
        if (last) count_add(sh, valid, bin);
      } else {
        count_add(sh, valid, bin);
      }
    }
    __syncthreads();
    const ScanOut o = scan_bins(sh, by_mass, above, target, level == 0 ? draw_u : -1.0);
    if (level == 0) target = o.target;
    if (!o.found) return s;
    above = o.above;
    prefix = (prefix << kWidth[level]) | static_cast<uint32_t>(o.bin);
    if (last) s.group = sh.count[o.bin];
  }
  __syncthreads();
  s.found = true;
  s.key = prefix;
  s.above = above;
  s.target = target;
  return s;
}

// Index of the j-th (0-based) lowest index among the elements with this key.
__device__ int select_index(const RowLogits& x, int vocab, uint32_t key, uint32_t j, SampleShared& sh) {
  if (j == 0) {
    int best = vocab;
    for (int i = threadIdx.x; i < vocab; i += kThreads)
      if (order_key(x[i]) == key && i < best) best = i;
    float unused = 0.0f;
    int bi = vocab;
    block_argmax(0.0f, best, &unused, &bi, sh);  // equal values: the lowest index wins
    return bi;
  }
  // Two levels over the index bits (vocab <= 2^19: 8 + 11 bits); bins are numbered so that
  // the top-down scan visits indices in ascending order.
  constexpr int kIdxShift[2] = {11, 0};
  int prefix = 0;
  u64 above = 0;
  for (int level = 0; level < 2; ++level) {
    zero_bins(sh);
    for (int base = 0; base < vocab; base += kThreads) {
      const int i = base + static_cast<int>(threadIdx.x);
      bool valid = i < vocab && order_key(x[i]) == key && (level == 0 || (i >> 11) == prefix);
      const unsigned digit = level == 0 ? static_cast<unsigned>(i >> 11) : static_cast<unsigned>(i & 2047);
      count_add(sh, valid, valid ? kBins - 1 - digit : 0u);
    }
    __syncthreads();
    const ScanOut o = scan_bins(sh, false, above, j, -1.0);
    if (!o.found) return vocab;  // fewer than j + 1 elements: the caller's invariant broke
    above = o.above;
    const int digit = kBins - 1 - o.bin;
    prefix = level == 0 ? digit : (prefix << kIdxShift[0]) | digit;
  }
  return prefix;
}

__global__ void __launch_bounds__(kThreads) sample_rows_kernel(const float* __restrict__ logits, int vocab,
                                                               const DeviceSampleRow* __restrict__ params,
                                                               int32_t* __restrict__ tokens) {
  __shared__ SampleShared sh;
  const DeviceSampleRow p = params[blockIdx.x];
  const RowLogits x{logits + static_cast<int64_t>(p.row) * vocab, p.allowed};

  // Pass 1: the largest logit and its lowest index (the greedy token).
  float best = -INFINITY;
  int best_i = vocab;
  for (int i = threadIdx.x; i < vocab; i += kThreads) {
    const float v = x[i];
    if (best_i == vocab || v > best) {
      best = v;
      best_i = i;
    }
  }
  float maxv = 0.0f;
  int argmax = 0;
  block_argmax(best, best_i, &maxv, &argmax, sh);
  if (argmax >= vocab) argmax = 0;
  if (p.temperature <= 0.0f || maxv == -INFINITY) {
    // Greedy, or nothing has mass (every logit -inf): the argmax.
    if (threadIdx.x == 0) tokens[blockIdx.x] = argmax;
    return;
  }

  RowCtx rc;
  rc.maxv = maxv;
  rc.inv_t = __fdiv_rn(1.0f, p.temperature);
  rc.min_p = static_cast<double>(p.min_p);
  // Pass 2: the row's mass.
  u64 local = 0;
  for (int i = threadIdx.x; i < vocab; i += kThreads) local += fixed_mass(weight(x[i], rc));
  const u64 total = block_sum(local, sh);
  rc.total = static_cast<double>(total) / kMassScale;

  // top-k: the k-th candidate by count; its mass renormalises top-p.
  Domain dom;
  u64 kept = total;
  const int k = (p.top_k > 0 && p.top_k < vocab) ? p.top_k : vocab;
  if (k < vocab) {
    const Select s = select_key(x, vocab, rc, dom, false, static_cast<u64>(k - 1), -1.0, sh);
    if (s.found) {
      dom.key = s.key;
      dom.ties = static_cast<uint32_t>(k - static_cast<int64_t>(s.above));
      local = 0;
      for (int i = threadIdx.x; i < vocab; i += kThreads) {
        const float v = x[i];
        if (order_key(v) > dom.key) local += fixed_mass(weight(v, rc));
      }
      kept = block_sum(local, sh) + fixed_mass(weight(key_value(dom.key), rc)) * dom.ties;
    }
  }
  // top-p: the first candidate whose running mass reaches top_p * kept (>= T is > ceil(T) - 1).
  if (p.top_p < 1.0f) {
    const double t = static_cast<double>(p.top_p) * static_cast<double>(kept);
    u64 target = __double2ull_ru(t);
    target = target > 0 ? target - 1 : 0;
    const Select s = select_key(x, vocab, rc, dom, true, target, -1.0, sh);
    if (s.found) {
      const u64 w = fixed_mass(weight(key_value(s.key), rc));
      u64 j = w ? (s.target - s.above) / w : 0;
      if (j + 1 > s.group) j = s.group ? s.group - 1 : 0;
      dom.key = s.key;
      dom.ties = static_cast<uint32_t>(j + 1);
    }
  }
  dom.minp = p.min_p > 0.0f;
  // The draw: the first candidate whose running mass exceeds u * (mass kept).
  const double u = counter_uniform_value(p.seed, p.counter);
  const Select s = select_key(x, vocab, rc, dom, true, 0, u, sh);
  int token = argmax;
  if (s.found) {
    const u64 w = fixed_mass(weight(key_value(s.key), rc));
    u64 j = w ? (s.target - s.above) / w : 0;
    if (j + 1 > s.group) j = s.group ? s.group - 1 : 0;
    const int t = select_index(x, vocab, s.key, static_cast<uint32_t>(j), sh);
    if (t < vocab) token = t;
  }
  if (threadIdx.x == 0) tokens[blockIdx.x] = token;
}

}  // namespace

cudaError_t launch_sample_rows(const float* logits, int64_t vocab, const DeviceSampleRow* params, int64_t n,
                               int32_t* tokens, cudaStream_t s) {
  if (n <= 0) return cudaSuccess;
  if (vocab <= 0 || vocab > kSampleMaxVocab || n > 65535LL * 32) return cudaErrorInvalidValue;
  sample_rows_kernel<<<static_cast<unsigned>(n), kThreads, 0, s>>>(logits, static_cast<int>(vocab), params,
                                                                   tokens);
  return cudaGetLastError();
}

}  // namespace lancet::cuda
