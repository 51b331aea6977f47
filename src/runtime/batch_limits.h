// Defaults of --max-num-seqs and --max-num-batched-tokens (0 = choose): on a GPU, steps of
// 8192 tokens and as many sequences as the KV cache holds at kAutoSeqTokens tokens each (64 to
// 1024, a multiple of 8); on the CPU, 2048 tokens and 64 sequences.
#pragma once

#include <cstdint>
#include <string>

namespace lancet {

inline constexpr int64_t kAutoSeqTokens = 2048;  // prompt + output of the sequence the default sizes for

struct BatchLimits {
  int64_t max_num_seqs = 0;
  int64_t max_num_batched_tokens = 0;
};

// The limits before the KV cache is sized: the token budget resolved; a chosen sequence count
// at its upper bound (what the activation reserve is planned for).
BatchLimits initial_batch_limits(const std::string& backend, int64_t max_num_seqs, int64_t max_num_batched_tokens);
// The chosen sequence count for a KV cache of kv_tokens tokens.
int64_t auto_max_num_seqs(const std::string& backend, int64_t kv_tokens);

}  // namespace lancet
