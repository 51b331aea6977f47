// Overflow-safe size arithmetic for parsing untrusted files: every count, offset and dims
// product goes through these before anything is allocated or indexed.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>

namespace lancet {

inline bool checked_mul(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_mul_overflow(a, b, out);
}
inline bool checked_add(uint64_t a, uint64_t b, uint64_t* out) {
  return !__builtin_add_overflow(a, b, out);
}
// Product of dims; nullopt on overflow or a negative dim.
inline std::optional<uint64_t> checked_product(std::span<const int64_t> dims) {
  uint64_t p = 1;
  for (int64_t d : dims) {
    if (d < 0 || !checked_mul(p, static_cast<uint64_t>(d), &p)) return std::nullopt;
  }
  return p;
}
// True when [offset, offset+size) lies inside [0, limit).
inline bool range_within(uint64_t offset, uint64_t size, uint64_t limit) {
  uint64_t end;
  return checked_add(offset, size, &end) && end <= limit;
}

}  // namespace lancet
