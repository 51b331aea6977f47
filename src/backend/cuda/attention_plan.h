// The CUDA backend's attention plan (plan/run): which kernel a step's paged attention uses and
// how it splits the keys, a pure function of the step's shape (rows, sequences, heads, longest
// context), the cache and the device, so that the plan made once per step on the host, the
// per-call plan of an unplanned call and a replayed graph's plan all agree.
#pragma once

#include <cstdint>

#include "backend/backend.h"

namespace lancet::cuda {

// The kernels paged attention chooses between.
enum class AttentionRoute {
  kPrefillF32Cache,  // prompt chunks over an f32 cache (or with groups too large to pack)
  kPrefillPacked,    // prompt chunks on the tensor cores (sm_90a kernel, else the sm_80 one)
  kDecode,           // decode and verification rows on the tensor cores
  kExact,            // exact precision or f32 caches: the CUDA-core kernel
};

struct AttentionShape {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t num_heads = 0;
  int64_t max_context_len = 0;  // <= 0: unknown (no split)
  int64_t decode_seqs = 0;      // leading sequences of decode rows, and their rows
  int64_t decode_tokens = 0;
  int64_t decode_max_context_len = 0;  // the longest context among them (<= 0: max_context_len)
};

struct AttentionDevice {
  int num_sms = 0;
  bool exact = false;  // ActivationPrecision::kExact
};

AttentionRoute attention_route(const AttentionShape& s, const KvCacheLayer& c, const AttentionDevice& d);

// The split plan of the route (AttentionStepPlan: num_splits >= 1; max_splits bounds the plan of
// any step with at least num_tokens rows and at most max_context_len keys on this route).
// A prompt step that starts with decode rows (decode_seqs > 0) is planned in two parts: the
// decodes on the decode route, the prompt chunks after them on the prompt route. In one
// prompt-kernel launch each decode sequence would take a CTA of 128 query rows with one to
// three of them used, reading its whole context at the cost of a full tile.
AttentionStepPlan plan_attention_splits(const AttentionShape& s, const KvCacheLayer& c, const AttentionDevice& d);

}  // namespace lancet::cuda
