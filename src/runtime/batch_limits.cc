#include "runtime/batch_limits.h"

#include <algorithm>

namespace lancet {
namespace {

constexpr int64_t kGpuTokens = 8192, kCpuTokens = 2048;
constexpr int64_t kGpuMinSeqs = 64, kGpuMaxSeqs = 1024, kCpuSeqs = 64;

bool on_gpu(const std::string& backend) { return backend != "cpu"; }

}  // namespace

BatchLimits initial_batch_limits(const std::string& backend, int64_t max_num_seqs, int64_t max_num_batched_tokens) {
  BatchLimits l;
  l.max_num_batched_tokens = max_num_batched_tokens > 0 ? max_num_batched_tokens
                             : on_gpu(backend)          ? kGpuTokens
                                                        : kCpuTokens;
  l.max_num_seqs = max_num_seqs > 0 ? max_num_seqs : on_gpu(backend) ? kGpuMaxSeqs : kCpuSeqs;
  return l;
}

int64_t auto_max_num_seqs(const std::string& backend, int64_t kv_tokens) {
  if (!on_gpu(backend)) return kCpuSeqs;
  const int64_t fit = kv_tokens / kAutoSeqTokens / 8 * 8;
  return std::clamp(fit, kGpuMinSeqs, kGpuMaxSeqs);
}

}  // namespace lancet
