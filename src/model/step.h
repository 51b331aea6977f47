// Per-step metadata, built once per forward pass and read by every layer (DESIGN.md §2):
// token ids, positions, per-sequence query offsets and context lengths, the slot each new
// token's K/V goes to, block tables, and which rows need logits. StepMetadata holds them on
// the host; StepView (what the ops read) points at the backend's copy (model/step_upload.h,
// or the decode graphs' arena).
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "model/kv_cache.h"

namespace lancet {

// kSelected: the offsets (into this sequence's new tokens) listed in logits_offsets.
enum class LogitsMode { kNone, kLast, kAll, kSelected };

// One sequence's share of a step: num_tokens new tokens starting at position start_pos
// (the tokens before it are already in the cache: chunked prefill or decode).
struct SequenceStep {
  int64_t seq = 0;                 // PagedKvCache sequence id
  const int32_t* tokens = nullptr; // [num_tokens]
  int64_t num_tokens = 0;
  int64_t start_pos = 0;
  LogitsMode logits = LogitsMode::kLast;
  std::vector<int32_t> logits_offsets;  // kSelected only, increasing
};

struct StepMetadata {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t num_logits_rows = 0;
  // host
  std::vector<int32_t> token_ids;     // [num_tokens]
  std::vector<int32_t> positions;     // [num_tokens]
  std::vector<int32_t> query_start;   // [num_seqs + 1]
  std::vector<int32_t> context_lens;  // [num_seqs]
  std::vector<int64_t> slot_mapping;  // [num_tokens]
  std::vector<int32_t> block_tables;  // [num_seqs, max_blocks_per_seq]
  std::vector<int32_t> logits_rows;   // [num_logits_rows] indexes into the step's tokens
};

// The same arrays in backend memory, as the ops read them.
struct StepView {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t max_blocks_per_seq = 0;
  int64_t num_logits_rows = 0;
  const int32_t* token_ids = nullptr;     // [num_tokens]
  const int32_t* positions = nullptr;     // [num_tokens]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  const int32_t* logits_rows = nullptr;   // [num_logits_rows]
};

// Where a step's arrays sit in one backend buffer (byte offsets), for the two owners of such
// buffers: StepUploader (packed to the step) and DecodeGraphs (sized for its largest bucket).
struct StepArenaLayout {
  size_t token_ids = 0, positions = 0, query_start = 0, context_lens = 0, logits_rows = 0, slot_mapping = 0,
         block_tables = 0, bytes = 0;
  // The view of a step of these sizes whose arrays start at base + the offsets.
  StepView view(const void* base, int64_t num_tokens, int64_t num_seqs, int64_t max_blocks_per_seq,
                int64_t num_logits_rows) const;
};

// Reserves cache blocks for every sequence (ResourceExhausted when the cache is full) and
// builds the step. Logits rows come out in sequence order (all rows of a kAll sequence).
StatusOr<StepMetadata> build_step(PagedKvCache& cache, const std::vector<SequenceStep>& seqs);

}  // namespace lancet
