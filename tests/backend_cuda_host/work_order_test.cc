// The Hopper prompt kernel's persistent work order (backend/cuda/attention/work_order.h), on the
// host: every item is taken exactly once, a CTA's items end at its first -1, and the items of a
// causal prompt (numbered longest first) spread evenly over the CTAs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "backend/cuda/attention/work_order.h"

namespace lancet::cuda {
namespace {

// The items each CTA takes, in order, as the kernel walks them (until the first -1).
std::vector<std::vector<int64_t>> walk(int64_t ctas, int64_t items) {
  std::vector<std::vector<int64_t>> taken(static_cast<size_t>(ctas));
  for (int64_t c = 0; c < ctas; ++c)
    for (int64_t k = 0;; ++k) {
      const int64_t i = persistent_item(c, k, ctas, items);
      if (i < 0) {
        for (int64_t later = k + 1; later < k + 4; ++later)
          EXPECT_EQ(persistent_item(c, later, ctas, items), -1) << "cta " << c << " k " << later;
        break;
      }
      taken[static_cast<size_t>(c)].push_back(i);
    }
  return taken;
}

TEST(PersistentItems, EveryItemIsTakenOnce) {
  for (int64_t items : {1, 7, 131, 132, 133, 264, 265, 1024, 1032, 5000})
    for (int64_t sms : {1, 2, 8, 132}) {
      const int64_t ctas = persistent_ctas(items, sms);
      ASSERT_EQ(ctas, std::min(items, sms));
      std::vector<int> seen(static_cast<size_t>(items), 0);
      for (const auto& list : walk(ctas, items))
        for (int64_t i : list) {
          ASSERT_GE(i, 0);
          ASSERT_LT(i, items);
          ++seen[static_cast<size_t>(i)];
        }
      const std::string what = std::to_string(items) + " items on " + std::to_string(ctas) + " ctas";
      EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), items) << what;
    }
  EXPECT_EQ(persistent_ctas(50, 0), 50);  // no SM count: one CTA per item
}

TEST(PersistentItems, SnakeOrderAlternatesDirection) {
  // Round 0 forward, round 1 backward: CTA 0 takes the first item of round 0 and the last of round 1.
  EXPECT_EQ(persistent_item(0, 0, 4, 100), 0);
  EXPECT_EQ(persistent_item(0, 1, 4, 100), 7);
  EXPECT_EQ(persistent_item(3, 1, 4, 100), 4);
  EXPECT_EQ(persistent_item(3, 2, 4, 100), 11);
  // A partial backward round goes to the last CTAs.
  EXPECT_EQ(persistent_item(3, 1, 4, 6), 4);
  EXPECT_EQ(persistent_item(2, 1, 4, 6), 5);
  EXPECT_EQ(persistent_item(1, 1, 4, 6), -1);
}

// A 4,096-token causal prompt, 32 query tokens per CTA (GQA 4) and 8 KV heads on 132 SMs: item i
// reads 128 - i / 8 key tiles. The most loaded CTA stays within 1% of the mean; taking items
// round-robin instead leaves one CTA 12.7% over it.
TEST(PersistentItems, CausalPromptTilesSpreadEvenly) {
  const int64_t ctas = 132, items = 128 * 8;
  auto cost = [](int64_t i) { return 128 - i / 8; };
  int64_t total = 0;
  for (int64_t i = 0; i < items; ++i) total += cost(i);
  const double mean = static_cast<double>(total) / ctas;
  int64_t snake_max = 0, rr_max = 0;
  for (const auto& list : walk(ctas, items)) {
    int64_t load = 0;
    for (int64_t i : list) load += cost(i);
    snake_max = std::max(snake_max, load);
  }
  for (int64_t c = 0; c < ctas; ++c) {
    int64_t load = 0;
    for (int64_t i = c; i < items; i += ctas) load += cost(i);
    rr_max = std::max(rr_max, load);
  }
  EXPECT_LT(snake_max / mean, 1.01);
  EXPECT_GT(rr_max / mean, 1.12);
}

}  // namespace
}  // namespace lancet::cuda
