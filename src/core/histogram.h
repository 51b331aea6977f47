// A fixed-bucket histogram of observations (counts per bucket, sum, count), the shape
// Prometheus histograms have. Used by the engine (tokens per step) and the server's metrics;
// rendering to text is the server's business. Not thread-safe: the owner locks.
#pragma once

#include <cstdint>
#include <vector>

namespace lancet {

class Histogram {
 public:
  Histogram() = default;
  // bounds: ascending upper bounds (inclusive) of the finite buckets; one more bucket takes
  // everything above the last.
  explicit Histogram(std::vector<double> bounds);
  void observe(double v);
  const std::vector<double>& bounds() const { return bounds_; }
  // Per bucket (not cumulative), bounds().size() + 1 entries.
  const std::vector<uint64_t>& counts() const { return counts_; }
  double sum() const { return sum_; }
  uint64_t count() const { return count_; }

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_ = std::vector<uint64_t>(1, 0);
  double sum_ = 0;
  uint64_t count_ = 0;
};

}  // namespace lancet
