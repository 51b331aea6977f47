// StepUploader: a step's metadata to one rank's backend in one copy. The arrays are packed into
// a host staging buffer and copied into one device arena; both persist and grow to the
// largest step, so a step costs no allocation and one copy instead of one of each per array.
// The arena is reused by the next upload: that copy is queued behind the work of the step
// before it on the backend's stream, so the view stays valid for the work queued after it.
// The staging is pinned where the backend has it (alloc_host), so the copy is queued without
// waiting: from pageable memory CUDA may first wait for the stream's earlier work, which under
// asynchronous scheduling stalls the host behind the step in flight. Two staging buffers are
// filled in turn, as DecodeGraphs' arenas are: at most two steps are launched and not
// collected (DeviceTokenRing), so the copy that last read a buffer has run when it is refilled.
#pragma once

#include <cstdint>
#include <vector>

#include "backend/backend.h"
#include "core/status.h"
#include "model/step.h"
#include "model/tp_shard.h"

namespace lancet {

// Where a step's arrays sit in one backend buffer (byte offsets), for the two owners of such
// buffers: StepUploader (packed to the step) and DecodeGraphs (sized for its largest bucket).
struct StepArenaLayout {
  size_t token_ids = 0, positions = 0, query_start = 0, context_lens = 0, logits_rows = 0, slot_mapping = 0,
         block_tables = 0, bytes = 0;
  // DecodeGraphs' arenas: the step's attention plan {num_splits, split_len} (0: none).
  size_t attn_plan = 0;
  // LoRA rows and slot offsets (StepMetadata::lora_rows; 0 bytes and unset without them).
  size_t lora_rows = 0, lora_slot_start = 0;
  // The view of a step of these sizes whose arrays start at base + the offsets.
  StepView view(const void* base, int64_t num_tokens, int64_t num_seqs, int64_t max_blocks_per_seq,
                int64_t num_logits_rows) const;
};

// The id rank `layout` reads for `id` (already checked to be in the vocabulary): its row of the
// vocab-parallel embedding, or the zero row after them when another rank owns the id. The
// identity on one rank.
inline int32_t rank_token_id(int32_t id, const TpRankLayout& layout) {
  const int64_t local = id - layout.vocab_begin;
  return static_cast<int32_t>(local >= 0 && local < layout.vocab ? local : layout.vocab);
}

class StepUploader {
 public:
  explicit StepUploader(Backend& backend) : be_(backend) {}

  // Copies st's arrays (token ids as `layout`'s rank reads them) to the backend; the view
  // points into the arena (valid until the next upload).
  StatusOr<StepView> upload(const StepMetadata& st, const TpRankLayout& layout);

  // The arrays' offsets in the arena for a step of these sizes (each 16-byte aligned), and
  // its total size.
  static StepArenaLayout layout(const StepMetadata& st);

 private:
  Backend& be_;
  Buffer host_[2];  // staging, filled in turn
  int next_ = 0;
  // Outgrown staging, kept while a queued copy may still read it (each buffer grows by half
  // again, so this stays within a few times the largest step).
  std::vector<Buffer> retired_;
  Buffer dev_;
};

}  // namespace lancet
