// StepUploader: packing a step's arrays and the one copy to the backend.
#include "model/step_upload.h"

#include <algorithm>
#include <cstring>

namespace lancet {
namespace {

size_t align16(size_t x) { return (x + 15) / 16 * 16; }

template <typename T>
void put(uint8_t* base, size_t offset, const std::vector<T>& v) {
  if (!v.empty()) std::memcpy(base + offset, v.data(), v.size() * sizeof(T));
}

}  // namespace

StepArenaLayout StepUploader::layout(const StepMetadata& st) {
  StepArenaLayout l;
  size_t o = 0;
  auto take = [&o](size_t* field, size_t bytes) {
    *field = o;
    o = align16(o + bytes);
  };
  take(&l.token_ids, st.token_ids.size() * sizeof(int32_t));
  take(&l.positions, st.positions.size() * sizeof(int32_t));
  take(&l.query_start, st.query_start.size() * sizeof(int32_t));
  take(&l.context_lens, st.context_lens.size() * sizeof(int32_t));
  take(&l.logits_rows, st.logits_rows.size() * sizeof(int32_t));
  take(&l.slot_mapping, st.slot_mapping.size() * sizeof(int64_t));
  take(&l.block_tables, st.block_tables.size() * sizeof(int32_t));
  l.bytes = std::max<size_t>(o, 16);
  return l;
}

StatusOr<StepView> StepUploader::upload(const StepMetadata& st) {
  const StepArenaLayout l = layout(st);
  if (host_.size() < l.bytes) host_.resize(l.bytes);
  if (dev_.nbytes() < l.bytes) {
    // Grow by half again, so steps that creep upwards do not reallocate every time.
    ASSIGN_OR_RETURN(dev_, be_.alloc(std::max(l.bytes, dev_.nbytes() + dev_.nbytes() / 2)));
  }
  uint8_t* h = host_.data();
  put(h, l.token_ids, st.token_ids);
  put(h, l.positions, st.positions);
  put(h, l.query_start, st.query_start);
  put(h, l.context_lens, st.context_lens);
  put(h, l.logits_rows, st.logits_rows);
  put(h, l.slot_mapping, st.slot_mapping);
  put(h, l.block_tables, st.block_tables);
  RETURN_IF_ERROR(be_.copy_to_device(dev_.data(), h, l.bytes));

  return l.view(dev_.data(), st.num_tokens, st.num_seqs, st.max_blocks_per_seq, st.num_logits_rows);
}

}  // namespace lancet
