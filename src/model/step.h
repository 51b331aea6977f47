// Per-step metadata, built once per forward pass and read by every layer (DESIGN.md §2):
// token ids, positions, per-sequence query offsets and context lengths, the slot each new
// token's K/V goes to, block tables, and which rows need logits. StepMetadata holds them on
// the host (built by runner/step_builder.h); StepView (what the ops read) points at one rank's
// backend copy (runner/step_upload.h, or the decode graphs' arena).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"

namespace lancet {

struct StepMetadata {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t max_context_len = 0;  // the longest context_lens entry
  int64_t num_logits_rows = 0;
  // The leading sequences that compute decode rows (attention_decode_seq), their rows and
  // their longest context: a mixed step's attention runs them apart from the prompt chunks
  // after them.
  int64_t decode_seqs = 0;
  int64_t decode_tokens = 0;
  int64_t decode_max_context_len = 0;
  // host
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens]
  std::vector<int32_t> query_start;   // [num_seqs + 1]
  std::vector<int32_t> context_lens;  // [num_seqs]
  std::vector<int64_t> slot_mapping;  // [num_tokens]
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq]
  std::vector<int32_t> logits_rows;   // [num_logits_rows] indexes into the step's tokens
  // LoRA adapters (backend/lora_args.h): the tokens of sequences served with an adapter,
  // grouped by slot; both empty when no sequence has one.
  int64_t lora_num_slots = 0;
  std::vector<int32_t> lora_rows;        // [adapted tokens]
  std::vector<int32_t> lora_slot_start;  // [lora_num_slots + 1] offsets into lora_rows
};

// The same arrays in one rank's backend memory, as the ops read them. token_ids are that
// rank's: with a vocab-parallel embedding, ids another rank owns read its zero row.
struct StepView {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t max_context_len = 0;
  int64_t num_logits_rows = 0;
  int64_t decode_seqs = 0;    // as StepMetadata's
  int64_t decode_tokens = 0;
  int64_t decode_max_context_len = 0;
  // The step's attention plan, made once for every layer (unset: LlamaModel::enqueue makes it
  // from the fields above); a decode graph's views also carry it in backend memory.
  AttentionStepPlan attn_plan;
  const int32_t* attn_plan_dev = nullptr;  // [2] {num_splits, split_len}
  const int32_t* token_ids = nullptr;     // [num_tokens]
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const int32_t* logits_rows = nullptr;   // [num_logits_rows]
  LoraStepRows lora;                       // empty: no token has an adapter
};

}  // namespace lancet
