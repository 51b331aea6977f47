// Status, SHA-256 (FIPS 180-2 test vectors), thread pool, checked math.
#include <gtest/gtest.h>

#include <atomic>
#include <vector>

#include "core/checked_math.h"
#include "core/sha256.h"
#include "core/status.h"
#include "core/thread_pool.h"

namespace lancet {
namespace {

StatusOr<int> parse_positive(int x) {
  if (x <= 0) return InvalidArgument("need a positive value, got " + std::to_string(x));
  return x;
}
Status use(int x, int* out) {
  ASSIGN_OR_RETURN(*out, parse_positive(x));
  return OkStatus();
}

TEST(Status, PropagatesThroughMacros) {
  int v = 0;
  EXPECT_TRUE(use(3, &v).ok());
  EXPECT_EQ(v, 3);
  Status s = use(-1, &v);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.to_string(), "INVALID_ARGUMENT: need a positive value, got -1");
  EXPECT_EQ(s.with_context("file.gguf").message(), "file.gguf: need a positive value, got -1");
}

TEST(Sha256, KnownVectors) {
  EXPECT_EQ(to_hex(sha256("abc")),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(to_hex(sha256("")),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  std::string million(1000000, 'a');
  EXPECT_EQ(to_hex(sha256(million)),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(ThreadPool, CoversRangeExactlyOnce) {
  ThreadPool pool(4);
  for (int64_t n : {1, 7, 97, 1000}) {
    std::vector<std::atomic<int>> hits(n);
    pool.parallel_for(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) hits[i]++;
    });
    for (auto& h : hits) EXPECT_EQ(h.load(), 1);
  }
  // Many back-to-back jobs (generation handoff).
  std::atomic<int64_t> sum{0};
  for (int r = 0; r < 2000; ++r)
    pool.parallel_for(10, [&](int64_t b, int64_t e, int) { sum += e - b; });
  EXPECT_EQ(sum.load(), 20000);
}

TEST(CheckedMath, DetectsOverflow) {
  std::vector<int64_t> ok_dims = {4096, 14336};
  EXPECT_EQ(checked_product(ok_dims).value(), 4096ull * 14336ull);
  std::vector<int64_t> big = {1ll << 40, 1ll << 40};
  EXPECT_FALSE(checked_product(big).has_value());
  std::vector<int64_t> neg = {3, -1};
  EXPECT_FALSE(checked_product(neg).has_value());
  EXPECT_TRUE(range_within(10, 5, 15));
  EXPECT_FALSE(range_within(10, 6, 15));
  EXPECT_FALSE(range_within(~0ull, 2, ~0ull));
}

}  // namespace
}  // namespace lancet
