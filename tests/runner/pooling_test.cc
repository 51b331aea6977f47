// Pooling: unit length, direction kept, a zero row stays zero.
#include "runner/pooling.h"

#include <gtest/gtest.h>

#include <cmath>

namespace lancet {
namespace {

TEST(Pooling, LastTokenIsL2Normalized) {
  const std::vector<float> h = {3.0f, -4.0f, 0.0f};
  const std::vector<float> e = pool_last_token(h);
  ASSERT_EQ(e.size(), 3u);
  EXPECT_FLOAT_EQ(e[0], 0.6f);
  EXPECT_FLOAT_EQ(e[1], -0.8f);
  EXPECT_EQ(e[2], 0.0f);
  const std::vector<float> zero(4, 0.0f);
  EXPECT_EQ(pool_last_token(zero), zero);
  std::vector<float> big(576);
  for (size_t i = 0; i < big.size(); ++i) big[i] = std::sin(static_cast<float>(i)) * 37.0f;
  double sq = 0;
  for (float v : pool_last_token(big)) sq += static_cast<double>(v) * v;
  EXPECT_NEAR(std::sqrt(sq), 1.0, 1e-6);
}

}  // namespace
}  // namespace lancet
