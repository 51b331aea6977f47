// build_step_with_tables: flattens the step's sequences into the arrays the backend ops read
// (host copies; StepUploader or the decode graphs move them to the backend).
#include "model/step_tables.h"

#include <algorithm>
#include <string>

namespace lancet {

StatusOr<StepMetadata> build_step_with_tables(int64_t bs, int64_t num_blocks,
                                              const std::vector<SequenceStep>& seqs,
                                              const std::vector<std::span<const int32_t>>& tables) {
  if (tables.size() != seqs.size()) return InvalidArgument("step: one block table per sequence expected");
  StepMetadata m;
  m.num_seqs = static_cast<int64_t>(seqs.size());
  m.query_start.push_back(0);
  for (size_t si = 0; si < seqs.size(); ++si) {
    const SequenceStep& s = seqs[si];
    const std::span<const int32_t> table = tables[si];
    if (s.num_tokens < 0 || s.start_pos < 0 || (s.num_tokens > 0 && !s.tokens))
      return InvalidArgument("step: sequence " + std::to_string(si) + " has a bad token range");
    const int64_t ctx = s.start_pos + s.num_tokens;
    if (ctx > INT32_MAX) return OutOfRange("step: context too long");
    const int64_t need = (ctx + bs - 1) / bs;
    if (static_cast<int64_t>(table.size()) < need)
      return InvalidArgument("step: block table of sequence " + std::to_string(si) + " covers " +
                             std::to_string(table.size() * bs) + " tokens, needs " + std::to_string(ctx));
    for (int64_t b = 0; b < need; ++b)
      if (table[b] < 0 || table[b] >= num_blocks)
        return InvalidArgument("step: block id " + std::to_string(table[b]) + " outside the cache");
    m.max_blocks_per_seq = std::max<int64_t>(m.max_blocks_per_seq, need);
    for (int32_t off : s.logits_offsets)
      if (off < 0 || off >= s.num_tokens)
        return OutOfRange("step: logits offset " + std::to_string(off) + " outside the sequence's " +
                          std::to_string(s.num_tokens) + " new tokens");
    size_t next_sel = 0;
    for (int64_t i = 0; i < s.num_tokens; ++i) {
      const int64_t pos = s.start_pos + i;
      bool want = s.logits == LogitsMode::kAll || (s.logits == LogitsMode::kLast && i == s.num_tokens - 1);
      if (s.logits == LogitsMode::kSelected) {
        while (next_sel < s.logits_offsets.size() && s.logits_offsets[next_sel] < i) ++next_sel;
        want = next_sel < s.logits_offsets.size() && s.logits_offsets[next_sel] == i;
      }
      if (want) m.logits_rows.push_back(static_cast<int32_t>(m.token_ids.size()));
      m.token_ids.push_back(s.tokens[i]);
      m.positions.push_back(static_cast<int32_t>(pos));
      m.slot_mapping.push_back(static_cast<int64_t>(table[pos / bs]) * bs + pos % bs);
    }
    m.query_start.push_back(static_cast<int32_t>(m.token_ids.size()));
    m.context_lens.push_back(static_cast<int32_t>(ctx));
  }
  m.num_tokens = static_cast<int64_t>(m.token_ids.size());
  m.num_logits_rows = static_cast<int64_t>(m.logits_rows.size());
  m.max_blocks_per_seq = std::max<int64_t>(m.max_blocks_per_seq, 1);
  m.block_tables.assign(m.num_seqs * m.max_blocks_per_seq, 0);
  for (int64_t s = 0; s < m.num_seqs; ++s) {
    const int64_t n = std::min<int64_t>(m.max_blocks_per_seq, static_cast<int64_t>(tables[s].size()));
    std::copy(tables[s].begin(), tables[s].begin() + n, m.block_tables.begin() + s * m.max_blocks_per_seq);
  }
  return m;
}

}  // namespace lancet
