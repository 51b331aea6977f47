// Fixed-bucket histogram: an observation lands in the first bucket whose upper bound is >= it
// (Prometheus' "le"), values above the last bound in the overflow bucket; sum and count.
#include "core/histogram.h"

#include <gtest/gtest.h>

namespace lancet {
namespace {

TEST(Histogram, BucketsAreInclusiveUpperBoundsWithAnOverflowBucket) {
  Histogram h({1, 8, 16});
  for (double v : {0.5, 1.0, 1.5, 8.0, 16.0, 17.0, 1000.0}) h.observe(v);
  EXPECT_EQ(h.counts(), (std::vector<uint64_t>{2, 2, 1, 2}));
  EXPECT_EQ(h.count(), 7u);
  EXPECT_DOUBLE_EQ(h.sum(), 0.5 + 1.0 + 1.5 + 8.0 + 16.0 + 17.0 + 1000.0);
  EXPECT_EQ(h.bounds(), (std::vector<double>{1, 8, 16}));
}

TEST(Histogram, EmptyHasOneBucketAndNothingCounted) {
  Histogram h;
  EXPECT_EQ(h.counts(), std::vector<uint64_t>{0});
  h.observe(3);
  EXPECT_EQ(h.counts(), std::vector<uint64_t>{1});
  EXPECT_EQ(h.count(), 1u);
}

}  // namespace
}  // namespace lancet
