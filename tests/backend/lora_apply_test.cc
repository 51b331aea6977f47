// The CPU backend's LoRA op against a float64 evaluation of y + (x A_s^T)(scale B_s)^T, row by
// row: slots of different ranks (padded to the module's max rank), a slot that leaves the
// projection alone, rows in any token order, tokens without an adapter untouched, and bad
// slot offsets or rows refused.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "backend/backend.h"
#include "cpu_test_util.h"

namespace lancet {
namespace {

struct SlotFactors {
  int64_t rank = 0;
  float scale = 1.0f;
  std::vector<float> a, b;  // [rank, in], [out, rank]
};

TEST(LoraApply, MatchesFloat64ReferencePerSlot) {
  auto be = make_cpu_backend();
  ASSERT_TRUE(be.ok()) << be.status().to_string();
  const int64_t S = 4, R = 8, in = 37, out = 19, T = 11;
  auto w = (*be)->alloc_lora_module(S, R, in, out);
  ASSERT_TRUE(w.ok()) << w.status().to_string();
  // Slot 0 rank 8 (the max), slot 1 rank 3, slot 2 empty (rank 0), slot 3 rank 5.
  std::vector<SlotFactors> f(S);
  const int64_t ranks[S] = {8, 3, 0, 5};
  for (int64_t s = 0; s < S; ++s) {
    f[s].rank = ranks[s];
    f[s].scale = 0.5f + static_cast<float>(s);
    f[s].a = testing::random_floats(static_cast<size_t>(ranks[s] * in), 10 + s);
    f[s].b = testing::random_floats(static_cast<size_t>(out * ranks[s]), 20 + s);
    ASSERT_TRUE((*be)->set_lora_slot(*w, s, f[s].a.data(), f[s].b.data(), ranks[s], f[s].scale).ok());
  }
  EXPECT_EQ(w->host_rank, (std::vector<int32_t>{8, 3, 0, 5}));
  EXPECT_TRUE(w->any_slot());
  const std::vector<float> x = testing::random_floats(static_cast<size_t>(T * in), 1);
  std::vector<float> y = testing::random_floats(static_cast<size_t>(T * out), 2);
  const std::vector<float> y0 = y;
  // Tokens 7, 2 -> slot 0; 9 -> slot 1; 4 -> slot 2 (empty); 0, 10, 5 -> slot 3; the others none.
  const std::vector<int32_t> rows = {7, 2, 9, 4, 0, 10, 5};
  const std::vector<int32_t> start = {0, 2, 3, 4, 7};
  const int32_t slot_of[T] = {3, -1, 0, -1, 2, 3, -1, 0, -1, 1, 3};
  std::vector<float> scratch(rows.size() * R);
  LoraApplyArgs a;
  a.x = x.data();
  a.y = y.data();
  a.scratch = scratch.data();
  a.num_tokens = T;
  a.w = &*w;
  a.rows = LoraStepRows{S, static_cast<int64_t>(rows.size()), rows.data(), start.data()};
  ASSERT_TRUE((*be)->lora_apply(a).ok());
  double max_delta = 0;
  for (int64_t t = 0; t < T; ++t) {
    const int32_t s = slot_of[t];
    for (int64_t o = 0; o < out; ++o) {
      double want = y0[t * out + o];
      if (s >= 0) {
        for (int64_t j = 0; j < f[s].rank; ++j) {
          double xa = 0;
          for (int64_t i = 0; i < in; ++i) xa += static_cast<double>(x[t * in + i]) * f[s].a[j * in + i];
          want += xa * f[s].scale * f[s].b[o * f[s].rank + j];
        }
      }
      const double got = y[t * out + o];
      if (s < 0 || s == 2) {
        EXPECT_EQ(got, y0[t * out + o]) << "token " << t << " has no (or an empty) adapter and must be untouched";
      } else {
        EXPECT_NEAR(got, want, 1e-4 * (1 + std::fabs(want))) << "token " << t << " slot " << s << " out " << o;
        max_delta = std::max(max_delta, std::fabs(want - y0[t * out + o]));
      }
    }
  }
  EXPECT_GT(max_delta, 1.0) << "the adapters changed nothing: the check would pass without them";

  // Emptying slot 3 leaves its rows alone from then on.
  ASSERT_TRUE((*be)->set_lora_slot(*w, 3, nullptr, nullptr, 0, 0.0f).ok());
  EXPECT_EQ(w->host_rank[3], 0);
  std::vector<float> y2 = y0;
  a.y = y2.data();
  ASSERT_TRUE((*be)->lora_apply(a).ok());
  for (int32_t t : {0, 5, 10})
    for (int64_t o = 0; o < out; ++o) EXPECT_EQ(y2[t * out + o], y0[t * out + o]);
}

TEST(LoraApply, RefusesBadShapesAndRows) {
  auto be = make_cpu_backend();
  ASSERT_TRUE(be.ok());
  EXPECT_FALSE((*be)->alloc_lora_module(0, 8, 4, 4).ok());
  auto w = (*be)->alloc_lora_module(2, 4, 6, 5);
  ASSERT_TRUE(w.ok());
  std::vector<float> a(5 * 6, 1.0f), b(5 * 5, 1.0f);
  EXPECT_FALSE((*be)->set_lora_slot(*w, 2, a.data(), b.data(), 4, 1.0f).ok()) << "slot past the module's";
  EXPECT_FALSE((*be)->set_lora_slot(*w, 0, a.data(), b.data(), 5, 1.0f).ok()) << "rank past max_rank";
  ASSERT_TRUE((*be)->set_lora_slot(*w, 0, a.data(), b.data(), 4, 1.0f).ok());
  std::vector<float> x(3 * 6, 1.0f), y(3 * 5, 0.0f), scratch(3 * 4);
  LoraApplyArgs args;
  args.x = x.data();
  args.y = y.data();
  args.scratch = scratch.data();
  args.num_tokens = 3;
  args.w = &*w;
  const std::vector<int32_t> bad_row = {5};
  const std::vector<int32_t> start = {0, 1, 1};
  args.rows = LoraStepRows{2, 1, bad_row.data(), start.data()};
  EXPECT_EQ((*be)->lora_apply(args).code(), StatusCode::kInvalidArgument) << "a row past the step's tokens";
  const std::vector<int32_t> row = {1};
  const std::vector<int32_t> bad_start = {0, 3, 1};
  args.rows = LoraStepRows{2, 1, row.data(), bad_start.data()};
  EXPECT_EQ((*be)->lora_apply(args).code(), StatusCode::kInvalidArgument) << "slot offsets past the rows";
  args.rows = LoraStepRows{3, 1, row.data(), start.data()};
  EXPECT_EQ((*be)->lora_apply(args).code(), StatusCode::kInvalidArgument) << "a step made for other slots";
}

}  // namespace
}  // namespace lancet
