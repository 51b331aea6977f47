// StepUploader: the packed arena holds every array of the step byte for byte, 16-byte
// aligned, and is reused (grown only when a step needs more) from step to step.
#include "runner/step_upload.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "runner/step_builder.h"

namespace lancet {
namespace {

template <typename T>
std::vector<T> read(const T* p, size_t n) {
  return std::vector<T>(p, p + n);
}

// Three sequences: a 5-token prompt chunk at position 11, a decode row, a 2-token
// verification-style step with both rows selected.
StepMetadata make_step(int64_t extra_blocks) {
  const int64_t bs = 4;
  std::vector<std::vector<int32_t>> tables = {{7, 3, 9, 1, 0}, {2, 5}, {4, 6, 8}};
  for (int64_t i = 0; i < extra_blocks; ++i) tables[0].push_back(static_cast<int32_t>(10 + i));
  std::vector<int32_t> a = {11, 12, 13, 14, 15}, b = {21}, c = {31, 32};
  std::vector<SeqStepInput> seqs(3);
  seqs[0].tokens = a;
  seqs[0].start_pos = 11 + extra_blocks * bs;
  seqs[0].need_logits = true;
  seqs[1].tokens = b;
  seqs[1].start_pos = 6;
  seqs[1].need_logits = true;
  seqs[2].tokens = c;
  seqs[2].start_pos = 9;
  seqs[2].num_logits = 2;
  for (size_t i = 0; i < 3; ++i) seqs[i].block_table = tables[i];
  auto st = build_step(bs, 64, seqs);
  EXPECT_TRUE(st.ok()) << st.status().to_string();
  return *st;
}

void expect_view_equals(const StepView& v, const StepMetadata& st) {
  EXPECT_EQ(v.num_tokens, st.num_tokens);
  EXPECT_EQ(v.num_seqs, st.num_seqs);
  EXPECT_EQ(v.max_blocks_per_seq, st.max_blocks_per_seq);
  EXPECT_EQ(v.num_logits_rows, st.num_logits_rows);
  EXPECT_EQ(v.decode_seqs, st.decode_seqs);
  EXPECT_EQ(v.decode_tokens, st.decode_tokens);
  EXPECT_EQ(v.decode_max_context_len, st.decode_max_context_len);
  EXPECT_EQ(read(v.token_ids, st.token_ids.size()), st.token_ids);
  EXPECT_EQ(read(v.positions, st.positions.size()), st.positions);
  EXPECT_EQ(read(v.query_start, st.query_start.size()), st.query_start);
  EXPECT_EQ(read(v.context_lens, st.context_lens.size()), st.context_lens);
  EXPECT_EQ(read(v.slot_mapping, st.slot_mapping.size()), st.slot_mapping);
  EXPECT_EQ(read(v.block_tables, st.block_tables.size()), st.block_tables);
  EXPECT_EQ(read(v.logits_rows, st.logits_rows.size()), st.logits_rows);
  for (const void* p : {static_cast<const void*>(v.token_ids), static_cast<const void*>(v.positions),
                        static_cast<const void*>(v.query_start), static_cast<const void*>(v.context_lens),
                        static_cast<const void*>(v.slot_mapping), static_cast<const void*>(v.block_tables),
                        static_cast<const void*>(v.logits_rows)})
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 16, 0u);
}

const TpRankLayout kOneRank = [] {
  TpRankLayout l;
  l.vocab = 64;  // every id of the test steps is below it
  return l;
}();

TEST(StepUploader, ArenaHoldsEveryArrayAndIsReused) {
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  StepUploader up(**be);
  const StepMetadata small = make_step(0);
  // The host arrays the ops will read: spot-check the builder's values first.
  EXPECT_EQ(small.num_tokens, 8);
  EXPECT_EQ(small.logits_rows, (std::vector<int32_t>{4, 5, 6, 7}));
  EXPECT_EQ(small.slot_mapping[0], 9 * 4 + 3);  // position 11: block 2 of the table (id 9), offset 3
  auto v1 = up.upload(small, kOneRank);
  ASSERT_TRUE(v1.ok()) << v1.status().to_string();
  expect_view_equals(*v1, small);

  // A bigger step grows the arena; a smaller one after it reuses it (same base address).
  const StepMetadata big = make_step(40);
  auto v2 = up.upload(big, kOneRank);
  ASSERT_TRUE(v2.ok());
  expect_view_equals(*v2, big);
  auto v3 = up.upload(small, kOneRank);
  ASSERT_TRUE(v3.ok());
  expect_view_equals(*v3, small);
  EXPECT_EQ(v3->token_ids, v2->token_ids);

  // An empty step still gets a valid (non-null) arena.
  auto v4 = up.upload(StepMetadata{}, kOneRank);
  ASSERT_TRUE(v4.ok());
  EXPECT_NE(v4->token_ids, nullptr);
}

// A rank of a vocab-parallel group reads its own rows: ids of other ranks go to its zero row.
TEST(StepUploader, RankTokenIdsIndexTheRanksVocabRows) {
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  StepUploader up(**be);
  const StepMetadata st = make_step(0);  // ids 11..15, 21, 31, 32
  TpRankLayout rank1;
  rank1.vocab_begin = 16;
  rank1.vocab = 16;  // ids [16, 32)
  auto v = up.upload(st, rank1);
  ASSERT_TRUE(v.ok());
  EXPECT_EQ(read(v->token_ids, 8), (std::vector<int32_t>{16, 16, 16, 16, 16, 5, 15, 16}));
  EXPECT_EQ(read(v->positions, 8), st.positions);
}

TEST(StepUploader, LayoutIsPackedAndAligned) {
  const StepMetadata st = make_step(3);
  const StepArenaLayout l = StepUploader::layout(st);
  EXPECT_EQ(l.token_ids, 0u);
  EXPECT_EQ(l.positions, 32u);  // 8 int32 ids
  EXPECT_GE(l.block_tables, l.slot_mapping + st.slot_mapping.size() * sizeof(int64_t));
  EXPECT_EQ(l.bytes % 16, 0u);
  EXPECT_GE(l.bytes, l.block_tables + st.block_tables.size() * sizeof(int32_t));
  EXPECT_LT(l.bytes, l.block_tables + st.block_tables.size() * sizeof(int32_t) + 16);
}

// LoRA: the adapted tokens grouped by slot (in token order within a slot), uploaded with the
// step; a step without adapters has none, and a slot the model lacks is refused.
TEST(StepUploader, LoraRowsAreGroupedBySlot) {
  const int64_t bs = 4;
  std::vector<int32_t> table = {0, 1, 2, 3};
  std::vector<int32_t> a = {1, 2, 3}, b = {4}, c = {5, 6}, d = {7};
  std::vector<SeqStepInput> seqs(4);
  for (SeqStepInput& s : seqs) {
    s.block_table = table;
    s.need_logits = true;
  }
  seqs[0].tokens = a;  // tokens 0-2, slot 2
  seqs[0].lora_slot = 2;
  seqs[1].tokens = b;  // token 3, base
  seqs[2].tokens = c;  // tokens 4-5, slot 0
  seqs[2].lora_slot = 0;
  seqs[3].tokens = d;  // token 6, slot 2
  seqs[3].lora_slot = 2;
  auto st = build_step(bs, 64, seqs, /*lora_num_slots=*/3);
  ASSERT_TRUE(st.ok()) << st.status().to_string();
  EXPECT_EQ(st->lora_num_slots, 3);
  EXPECT_EQ(st->lora_slot_start, (std::vector<int32_t>{0, 2, 2, 6}));
  EXPECT_EQ(st->lora_rows, (std::vector<int32_t>{4, 5, 0, 1, 2, 6}));
  auto be = make_backend("cpu");
  ASSERT_TRUE(be.ok());
  StepUploader up(**be);
  auto v = up.upload(*st, kOneRank);
  ASSERT_TRUE(v.ok());
  expect_view_equals(*v, *st);
  EXPECT_EQ(v->lora.num_slots, 3);
  EXPECT_EQ(v->lora.num_rows, 6);
  EXPECT_EQ(read(v->lora.rows, 6), st->lora_rows);
  EXPECT_EQ(read(v->lora.slot_start, 4), st->lora_slot_start);

  for (SeqStepInput& s : seqs) s.lora_slot = -1;
  auto base = build_step(bs, 64, seqs, 3);
  ASSERT_TRUE(base.ok());
  EXPECT_TRUE(base->lora_rows.empty());
  auto vb = up.upload(*base, kOneRank);
  ASSERT_TRUE(vb.ok());
  EXPECT_TRUE(vb->lora.empty());

  seqs[1].lora_slot = 3;
  EXPECT_EQ(build_step(bs, 64, seqs, 3).status().code(), StatusCode::kInvalidArgument);
  seqs[1].lora_slot = 0;
  EXPECT_EQ(build_step(bs, 64, seqs, 0).status().code(), StatusCode::kInvalidArgument) << "a model without slots";
}

}  // namespace
}  // namespace lancet
