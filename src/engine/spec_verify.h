// Verification of one sequence's draft tokens against the target model's logits over the
// k+1 positions of one forward pass (Leviathan et al. 2023, "Fast Inference from Transformers
// via Speculative Decoding"), keeping the target's sampling distribution exactly:
//  - deterministic drafts (n-gram lookup, a greedy draft, or any draft without a distribution):
//    the target token at each position is drawn exactly as non-speculative decoding draws it
//    (same processed logits, same counter-based uniform), and a draft is accepted when it
//    equals that token. The output is then identical to non-speculative decoding, token for
//    token, for greedy and for seeded sampling;
//  - sampled drafts with their distribution q: accept draft d with probability
//    min(1, p(d) / q(d)); on rejection draw from the residual max(0, p - q) renormalised.
// Either way the first rejected position yields the target's own token, and when every draft
// is accepted the last row gives a bonus token, so 1..k+1 tokens come out.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "runner/sampler.h"

namespace lancet {

struct VerifyInput {
  std::span<const float> logits;     // [num_drafts + 1, vocab] target rows, position order
  int64_t vocab = 0;
  std::span<const int32_t> drafts;   // [num_drafts]
  // [num_drafts] the draft's distribution at each position, or empty for deterministic drafts.
  std::span<const TokenDistribution> draft_dists;
  const SamplingParams* params = nullptr;
  std::span<const int32_t> prompt_tokens;
  std::span<const int32_t> output_tokens;  // generated before the drafts
  std::span<const int32_t> eos_token_ids;
  uint64_t seed = 0;
  // >= 0: benchmark mode, each draft is accepted with this probability (a counter-based draw)
  // regardless of the distributions; the first refused position yields the target's token.
  double force_acceptance_rate = -1.0;
};

struct VerifyResult {
  std::vector<SampleResult> tokens;  // accepted drafts, then the target's token (1..k+1)
  int32_t num_accepted = 0;          // drafts accepted (tokens.size() - 1)
};

VerifyResult verify_drafts(const VerifyInput& in);

// Counter salts of the speculative draws (independent of the sampler's own stream).
inline constexpr uint64_t kSpecAcceptSalt = 0x5bd1e9955bd1e995ull;
inline constexpr uint64_t kSpecResidualSalt = 0x27d4eb2f165667c5ull;
inline constexpr uint64_t kSpecDraftSalt = 0x94d049bb133111ebull;
inline constexpr uint64_t kSpecForceSalt = 0xd6e8feb86659fd93ull;

}  // namespace lancet
