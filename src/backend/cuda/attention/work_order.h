// The order in which the Hopper prompt kernel's persistent CTAs (prefill_sm90.cu) take its work
// items. Items are numbered longest first (the batch's last token tile, with the most keys,
// comes first: prefill_sm90_layout.cuh's locate_work); a grid of `ctas` CTAs walks them in
// rounds of `ctas` items, forward in even rounds and backward in odd ones ("snake" order), so
// the CTA that had one of the longest items of a round gets one of the shortest of the next and
// a causal prompt's work spreads evenly over the CTAs. Plain host/device C++: the planner's
// tests run it on the host.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define LANCET_WORK_ORDER_FN __host__ __device__ __forceinline__
#else
#define LANCET_WORK_ORDER_FN inline
#endif

namespace lancet::cuda {

// Item number k (k = 0, 1, ...) of CTA `cta` of `ctas`, or -1 when it has none left: once -1,
// -1 for every larger k. Every item in [0, items) goes to exactly one (cta, k).
LANCET_WORK_ORDER_FN int64_t persistent_item(int64_t cta, int64_t k, int64_t ctas, int64_t items) {
  const int64_t i = k * ctas + (k % 2 == 0 ? cta : ctas - 1 - cta);
  return i < items ? i : -1;
}

// CTAs of a persistent launch of `items` items on `num_sms` multiprocessors (one CTA each);
// num_sms <= 0: one CTA per item.
LANCET_WORK_ORDER_FN int64_t persistent_ctas(int64_t items, int64_t num_sms) {
  return num_sms > 0 && num_sms < items ? num_sms : items;
}

}  // namespace lancet::cuda

#undef LANCET_WORK_ORDER_FN
