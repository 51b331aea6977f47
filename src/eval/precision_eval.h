// Precision of a reduced-precision model (FP8 weights and/or FP8 KV cache) against a
// reference model of the same checkpoint: the same prompts run through both, and every prompt
// position's logits are compared (top-1 agreement, cosine similarity, KL(ref || test)); a text
// is scored by both for perplexity. Used by `lancet eval-precision` and the precision tests
// (the first two levels of the usual FP8 validation: token agreement and logit similarity,
// then perplexity).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "model/llama_model.h"

namespace lancet {

struct PrecisionEvalConfig {
  int64_t block_size = 16;
  DType ref_kv_dtype = DType::kF32;   // kBF16 or kF8E4M3 to compare against a rounded cache
  DType test_kv_dtype = DType::kF32;  // kF8E4M3 to measure an FP8 KV cache
  // How each path multiplies an FP8 cache (set on the shared backend before each path runs):
  // kE4m3Query on the test path against kF16 on an FP8 reference isolates the query's rounding.
  Fp8AttentionMath ref_fp8_attention_math = Fp8AttentionMath::kF16;
  Fp8AttentionMath test_fp8_attention_math = Fp8AttentionMath::kF16;
  // Per-layer K/V scales for FP8 caches (runner/kv_calibration.h); required with kF8E4M3.
  std::vector<float> kv_k_scales, kv_v_scales;
  // The text is run as one sequence, prefilled this many tokens per step (bounds the logits
  // held at once: chunk x vocab floats).
  int64_t text_chunk = 256;
};

// Agreement of the two models' logits over a set of positions.
struct LogitAgreement {
  int64_t positions = 0;
  int64_t top1_agree = 0;
  double mean_cosine = 0;
  double min_cosine = 1;
  double mean_kl = 0;  // KL(softmax(ref) || softmax(test)), nats
  double top1_agreement() const { return positions ? static_cast<double>(top1_agree) / positions : 0; }
};

struct PrecisionReport {
  int64_t num_prompts = 0;
  LogitAgreement prompts;     // every position of every prompt
  int64_t text_tokens = 0;    // tokens scored (text length - 1)
  double ref_perplexity = 0;  // 0 when no text was given
  double test_perplexity = 0;
  LogitAgreement text;        // every position of the text
  double ref_seconds = 0;     // forward time of each model
  double test_seconds = 0;
  // test_perplexity / ref_perplexity - 1
  double perplexity_increase() const { return ref_perplexity > 0 ? test_perplexity / ref_perplexity - 1 : 0; }
};

// Logits of every position of one sequence ([ids.size(), vocab]), prefilled `chunk` tokens
// per step (0 = all at once) through a fresh paged cache of kv_dtype.
// FP8 caches take their scales from `scales` (k then v per layer; empty = none set) and are
// multiplied as `math` says (the backend is left set to it).
StatusOr<std::vector<float>> sequence_logits(LlamaModel& model, Backend& backend,
                                             const std::vector<int32_t>& ids, DType kv_dtype,
                                             int64_t block_size, int64_t chunk,
                                             const PrecisionEvalConfig* scales = nullptr,
                                             Fp8AttentionMath math = Fp8AttentionMath::kF16);

// Adds the comparison of ref/test logits ([n, vocab] each) to *acc (running means).
void accumulate_agreement(const float* ref /*[n, vocab]*/, const float* test /*[n, vocab]*/, int64_t n,
                          int64_t vocab, LogitAgreement* acc);

// Sum over positions i < n-1 of -log softmax(logits[i])[ids[i+1]].
double sum_next_token_nll(const float* logits /*[n, vocab]*/, const std::vector<int32_t>& ids, int64_t vocab);

// Both models must share the vocabulary and be built on `backend`. Prompts need at least one
// token; the text (may be empty) at least two.
StatusOr<PrecisionReport> eval_precision(LlamaModel& ref, LlamaModel& test, Backend& backend,
                                         const std::vector<std::vector<int32_t>>& prompts,
                                         const std::vector<int32_t>& text, const PrecisionEvalConfig& cfg);

}  // namespace lancet
