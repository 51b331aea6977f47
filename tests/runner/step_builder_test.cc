// build_step: which leading sequences of a step compute decode rows (the rows a mixed step's
// attention runs apart from its prompt chunks).
#include "runner/step_builder.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace lancet {
namespace {

// A step of sequences computing these many new tokens each, sequence i from position 40 + i.
StepMetadata step_of(const std::vector<int>& new_tokens) {
  static const std::vector<int32_t> table = {0, 1, 2, 3, 4, 5, 6, 7};
  static const std::vector<int32_t> ids(64, 5);
  std::vector<SeqStepInput> seqs(new_tokens.size());
  for (size_t i = 0; i < seqs.size(); ++i) {
    seqs[i].tokens = std::span<const int32_t>(ids.data(), static_cast<size_t>(new_tokens[i]));
    seqs[i].start_pos = 40 + static_cast<int64_t>(i);
    seqs[i].block_table = table;
    seqs[i].need_logits = true;
  }
  auto st = build_step(16, 8, seqs);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return st.ok() ? *st : StepMetadata{};
}

TEST(StepBuilder, CountsTheLeadingDecodeSequences) {
  // Decodes (one token; one with two drafts) before prompt chunks, as the scheduler orders them.
  StepMetadata st = step_of({1, 3, 1, 17, 1, 9});
  EXPECT_EQ(st.decode_seqs, 3);
  EXPECT_EQ(st.decode_tokens, 5);
  EXPECT_EQ(st.query_start[st.decode_seqs], st.decode_tokens);
  // The longest context among the decodes (41, 44, 43), not the step's (the 17-token chunk's 60).
  EXPECT_EQ(st.decode_max_context_len, 44);
  EXPECT_EQ(st.max_context_len, 60);
  // Four rows make a sequence a prompt chunk (attention_decode_seq).
  st = step_of({1, 4, 1});
  EXPECT_EQ(st.decode_seqs, 1);
  EXPECT_EQ(st.decode_tokens, 1);
  // A prompt first: no leading decodes, whatever follows.
  st = step_of({20, 1, 1});
  EXPECT_EQ(st.decode_seqs, 0);
  EXPECT_EQ(st.decode_tokens, 0);
  EXPECT_EQ(st.decode_max_context_len, 0);
  // Decodes only.
  st = step_of({1, 1, 2});
  EXPECT_EQ(st.decode_seqs, 3);
  EXPECT_EQ(st.decode_tokens, 4);
}

}  // namespace
}  // namespace lancet
