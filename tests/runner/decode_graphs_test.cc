// DecodeGraphs' batch buckets (host arithmetic, no backend): every batch up to 4096 pads to a
// bucket at least its size, buckets grow with the batch, a bucket above 64 holds less than an
// eighth of padding rows, and batch_bucket_floor is the smallest batch of its bucket.
#include <gtest/gtest.h>

#include <set>

#include "runner/decode_graphs.h"

namespace lancet {
namespace {

TEST(DecodeGraphs, BatchBucketsPadLittleAndStayFew) {
  std::set<int64_t> buckets;
  int64_t prev = 0;
  for (int64_t n = 1; n <= 4096; ++n) {
    const int64_t b = DecodeGraphs::batch_bucket(n);
    ASSERT_GE(b, n) << n;
    ASSERT_GE(b, prev) << n;
    if (n > 64) ASSERT_LT(8 * (b - n), b) << "batch " << n << " pads to " << b;
    ASSERT_EQ(DecodeGraphs::batch_bucket(b), b) << n;  // a bucket is its own bucket
    buckets.insert(b);
    prev = b;
  }
  // 1, 2, 4, 8; 16, 24, ..., 64; then 8 buckets per doubling: 43 up to 1024, 59 up to 4096.
  EXPECT_EQ(buckets.size(), 4u + 7u + 8u * 6u);
  EXPECT_EQ(DecodeGraphs::batch_bucket(9), 16);
  EXPECT_EQ(DecodeGraphs::batch_bucket(65), 72);
  EXPECT_EQ(DecodeGraphs::batch_bucket(129), 144);
  EXPECT_EQ(DecodeGraphs::batch_bucket(1000), 1024);
  EXPECT_EQ(DecodeGraphs::batch_bucket(1025), 1152);
  for (int64_t b : buckets) {
    const int64_t floor = DecodeGraphs::batch_bucket_floor(b);
    ASSERT_EQ(DecodeGraphs::batch_bucket(floor), b) << b;
    if (floor > 1) ASSERT_LT(DecodeGraphs::batch_bucket(floor - 1), b) << b;
  }
}

}  // namespace
}  // namespace lancet
