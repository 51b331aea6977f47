// build_step: flattens the batch into the arrays the backend ops read (host copies;
// StepUploader or the decode graphs move them to each rank's backend).
#include "runner/step_builder.h"

#include <algorithm>
#include <climits>
#include <string>
#include <vector>

namespace lancet {
namespace {

// Which of the sequence's new tokens need logits: 1 for each row, in token order.
Status logits_flags(const SeqStepInput& s, size_t si, std::vector<uint8_t>* want) {
  const int64_t n = static_cast<int64_t>(s.tokens.size());
  want->assign(static_cast<size_t>(n), 0);
  if (!s.logits_offsets.empty()) {
    int32_t prev = -1;
    for (int32_t off : s.logits_offsets) {
      if (off < 0 || off >= n || off <= prev)
        return OutOfRange("step: logits offset " + std::to_string(off) + " of sequence " + std::to_string(si) +
                          " outside its " + std::to_string(n) + " new tokens or not increasing");
      (*want)[off] = 1;
      prev = off;
    }
    return OkStatus();
  }
  const int64_t rows = s.logits_rows();
  if (rows > n)
    return InvalidArgument("step: sequence " + std::to_string(si) + " asks for more logits rows than it has new tokens");
  for (int64_t i = n - rows; i < n; ++i) (*want)[i] = 1;
  return OkStatus();
}

// The adapted tokens grouped by slot (a counting sort: token order within a slot).
Status lora_rows(std::span<const SeqStepInput> batch, int64_t num_slots, StepMetadata* m) {
  bool any = false;
  for (size_t si = 0; si < batch.size(); ++si) {
    const int32_t slot = batch[si].lora_slot;
    if (slot < 0) continue;
    if (slot >= num_slots)
      return InvalidArgument("step: sequence " + std::to_string(si) + " uses LoRA slot " + std::to_string(slot) +
                             "; the model has " + std::to_string(num_slots));
    any = true;
  }
  if (!any) return OkStatus();
  m->lora_num_slots = num_slots;
  m->lora_slot_start.assign(static_cast<size_t>(num_slots + 1), 0);
  for (size_t si = 0; si < batch.size(); ++si)
    if (batch[si].lora_slot >= 0) m->lora_slot_start[batch[si].lora_slot + 1] += static_cast<int32_t>(batch[si].tokens.size());
  for (int64_t s = 0; s < num_slots; ++s) m->lora_slot_start[s + 1] += m->lora_slot_start[s];
  m->lora_rows.resize(static_cast<size_t>(m->lora_slot_start[num_slots]));
  std::vector<int32_t> at(m->lora_slot_start.begin(), m->lora_slot_start.end() - 1);
  for (size_t si = 0; si < batch.size(); ++si) {
    const int32_t slot = batch[si].lora_slot;
    if (slot < 0) continue;
    const int32_t first = m->query_start[si];
    for (int32_t t = first; t < m->query_start[si + 1]; ++t) m->lora_rows[at[slot]++] = t;
  }
  return OkStatus();
}

}  // namespace

StatusOr<StepMetadata> build_step(int32_t bs, int64_t num_blocks, std::span<const SeqStepInput> batch,
                                  int64_t lora_num_slots) {
  StepMetadata m;
  m.num_seqs = static_cast<int64_t>(batch.size());
  // Every array sized once: at a thousand sequences this metadata is the largest part of the host step.
  size_t tokens = 0;
  for (const SeqStepInput& s : batch) tokens += s.tokens.size();
  m.token_ids.reserve(tokens);
  m.positions.reserve(tokens);
  m.slot_mapping.reserve(tokens);
  m.logits_rows.reserve(batch.size());
  m.query_start.reserve(batch.size() + 1);
  m.context_lens.reserve(batch.size());
  m.query_start.push_back(0);
  std::vector<uint8_t> want;
  for (size_t si = 0; si < batch.size(); ++si) {
    const SeqStepInput& s = batch[si];
    const std::span<const int32_t> table = s.block_table;
    const int64_t n = static_cast<int64_t>(s.tokens.size());
    if (s.start_pos < 0) return InvalidArgument("step: sequence " + std::to_string(si) + " has a bad token range");
    const int64_t ctx = s.start_pos + n;
    if (ctx > INT32_MAX) return OutOfRange("step: context too long");
    const int64_t need = (ctx + bs - 1) / bs;
    if (static_cast<int64_t>(table.size()) < need)
      return InvalidArgument("step: block table of sequence " + std::to_string(si) + " covers " +
                             std::to_string(table.size() * bs) + " tokens, needs " + std::to_string(ctx));
    m.max_blocks_per_seq = std::max<int64_t>(m.max_blocks_per_seq, need);
    RETURN_IF_ERROR(logits_flags(s, si, &want));
    for (int64_t i = 0; i < n; ++i) {
      const int64_t pos = s.start_pos + i;
      if (want[i]) m.logits_rows.push_back(static_cast<int32_t>(m.token_ids.size()));
      m.token_ids.push_back(s.tokens[i]);
      m.positions.push_back(static_cast<int32_t>(pos));
      m.slot_mapping.push_back(static_cast<int64_t>(table[pos / bs]) * bs + pos % bs);
    }
    m.query_start.push_back(static_cast<int32_t>(m.token_ids.size()));
    if (m.decode_seqs == static_cast<int64_t>(si) && attention_decode_seq(n)) {
      ++m.decode_seqs;
      m.decode_tokens += n;
      m.decode_max_context_len = std::max(m.decode_max_context_len, ctx);
    }
    m.context_lens.push_back(static_cast<int32_t>(ctx));
    m.max_context_len = std::max(m.max_context_len, ctx);
  }
  m.num_tokens = static_cast<int64_t>(m.token_ids.size());
  m.num_logits_rows = static_cast<int64_t>(m.logits_rows.size());
  m.max_blocks_per_seq = std::max<int64_t>(m.max_blocks_per_seq, 1);
  // Each row of the tables written once (its blocks, then zeros), and the ids the context
  // reaches checked in the same pass (a branch-free test per id; the message after the pass).
  const int64_t width = m.max_blocks_per_seq;
  const int32_t limit = static_cast<int32_t>(std::min<int64_t>(num_blocks, INT32_MAX));
  m.block_tables.reserve(static_cast<size_t>(m.num_seqs * width));
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    const std::span<const int32_t> t = batch[s].block_table;
    const int64_t n = std::min<int64_t>(width, static_cast<int64_t>(t.size()));
    const int64_t need = (m.context_lens[s] + bs - 1) / bs;
    int bad = 0;
    for (int64_t b = 0; b < need; ++b) bad |= static_cast<int>(t[b] < 0) | static_cast<int>(t[b] >= limit);
    if (bad)
      for (int64_t b = 0; b < need; ++b)
        if (t[b] < 0 || t[b] >= num_blocks)
          return InvalidArgument("step: block id " + std::to_string(t[b]) + " outside the cache");
    m.block_tables.insert(m.block_tables.end(), t.begin(), t.begin() + n);
    m.block_tables.resize(m.block_tables.size() + static_cast<size_t>(width - n), 0);
  }
  RETURN_IF_ERROR(lora_rows(batch, lora_num_slots, &m));
  return m;
}

}  // namespace lancet
