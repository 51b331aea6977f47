// StepUploader: packing a step's arrays and the one copy to the backend; StepArenaLayout::view.
#include "runner/step_upload.h"

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
  take(&l.lora_rows, st.lora_rows.size() * sizeof(int32_t));
  take(&l.lora_slot_start, st.lora_slot_start.size() * sizeof(int32_t));
  l.bytes = std::max<size_t>(o, 16);
  return l;
}

StatusOr<StepView> StepUploader::upload(const StepMetadata& st, const TpRankLayout& rank) {
  const StepArenaLayout l = layout(st);
  Buffer& staging = host_[next_];
  next_ ^= 1;
  if (staging.nbytes() < l.bytes) {
    const size_t grown = std::max(l.bytes, staging.nbytes() + staging.nbytes() / 2);
    if (!staging.empty()) retired_.push_back(std::move(staging));
    ASSIGN_OR_RETURN(staging, be_.alloc_host(grown));
  }
  if (dev_.nbytes() < l.bytes) {
    // Grow by half again, so steps that creep upwards do not reallocate every time.
    ASSIGN_OR_RETURN(dev_, be_.alloc(std::max(l.bytes, dev_.nbytes() + dev_.nbytes() / 2)));
  }
  uint8_t* h = staging.as<uint8_t>();
  auto* ids = reinterpret_cast<int32_t*>(h + l.token_ids);
  for (size_t i = 0; i < st.token_ids.size(); ++i) ids[i] = rank_token_id(st.token_ids[i], rank);
  put(h, l.positions, st.positions);
  put(h, l.query_start, st.query_start);
  put(h, l.context_lens, st.context_lens);
  put(h, l.logits_rows, st.logits_rows);
  put(h, l.slot_mapping, st.slot_mapping);
  put(h, l.block_tables, st.block_tables);
  put(h, l.lora_rows, st.lora_rows);
  put(h, l.lora_slot_start, st.lora_slot_start);
  RETURN_IF_ERROR(be_.copy_to_device(dev_.data(), h, l.bytes));

  StepView v = l.view(dev_.data(), st.num_tokens, st.num_seqs, st.max_blocks_per_seq, st.num_logits_rows);
  v.max_context_len = st.max_context_len;
  v.decode_seqs = st.decode_seqs;
  v.decode_tokens = st.decode_tokens;
  v.decode_max_context_len = st.decode_max_context_len;
  if (!st.lora_slot_start.empty()) {
    const char* d = static_cast<const char*>(dev_.data());
    v.lora.num_slots = st.lora_num_slots;
    v.lora.num_rows = static_cast<int64_t>(st.lora_rows.size());
    v.lora.rows = reinterpret_cast<const int32_t*>(d + l.lora_rows);
    v.lora.slot_start = reinterpret_cast<const int32_t*>(d + l.lora_slot_start);
  }
  return v;
}

StepView StepArenaLayout::view(const void* base, int64_t num_tokens, int64_t num_seqs, int64_t max_blocks_per_seq,
                               int64_t num_logits_rows) const {
  const char* d = static_cast<const char*>(base);
  StepView v;
  v.num_tokens = num_tokens;
  v.num_seqs = num_seqs;
  v.max_blocks_per_seq = max_blocks_per_seq;
  v.num_logits_rows = num_logits_rows;
  v.token_ids = reinterpret_cast<const int32_t*>(d + token_ids);
  v.positions = reinterpret_cast<const int32_t*>(d + positions);
  v.query_start = reinterpret_cast<const int32_t*>(d + query_start);
  v.context_lens = reinterpret_cast<const int32_t*>(d + context_lens);
  v.logits_rows = reinterpret_cast<const int32_t*>(d + logits_rows);
  v.slot_mapping = reinterpret_cast<const int64_t*>(d + slot_mapping);
  v.block_tables = reinterpret_cast<const int32_t*>(d + block_tables);
  if (attn_plan) v.attn_plan_dev = reinterpret_cast<const int32_t*>(d + attn_plan);
  return v;
}

}  // namespace lancet
