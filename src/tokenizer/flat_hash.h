// Small open-addressing hash tables for the BPE hot loop: token pair -> merge, and byte string ->
// token id. Built once at load time and read-only afterwards (safe to share across threads).
// They beat std::unordered_map by avoiding a heap node and a pointer chase per lookup.
#pragma once

#include <cassert>
#include <cstdint>
#include <cstring>
#include <string>
#include <string_view>
#include <vector>

namespace lancet {

inline uint64_t mix64(uint64_t h) {
  h ^= h >> 33;
  h *= 0xff51afd7ed558ccdull;
  h ^= h >> 33;
  h *= 0xc4ceb9fe1a85ec53ull;
  h ^= h >> 33;
  return h;
}

inline uint64_t hash_bytes(const char* p, size_t n) {
  uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
  while (n >= 8) {
    uint64_t v;
    std::memcpy(&v, p, 8);
    h = (h ^ v) * 0x9FB21C651E98DF25ull;
    h ^= h >> 29;
    p += 8;
    n -= 8;
  }
  if (n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    h = (h ^ v) * 0x9FB21C651E98DF25ull;
    h ^= h >> 29;
  }
  return mix64(h);
}

inline size_t table_capacity_for(size_t n) {
  size_t cap = 16;
  while (cap < n * 2) cap <<= 1;  // load factor <= 0.5
  return cap;
}

// (left id, right id) -> (rank, merged id). Insert overwrites, as a later duplicate merge line
// does in the reference implementation.
class PairMergeMap {
 public:
  struct Value {
    int32_t rank = -1;
    int32_t id = -1;
  };
  void reserve(size_t n) {
    slots_.assign(table_capacity_for(n), Slot{});
    mask_ = slots_.size() - 1;
  }
  void insert(int32_t a, int32_t b, Value v) {
    assert(!slots_.empty());
    const uint64_t key = make_key(a, b);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == kEmpty || slots_[i].key == key) {
        slots_[i].key = key;
        slots_[i].value = v;
        return;
      }
    }
  }
  // Returns nullptr when the pair has no merge.
  const Value* find(int32_t a, int32_t b) const {
    const uint64_t key = make_key(a, b);
    for (size_t i = mix64(key) & mask_;; i = (i + 1) & mask_) {
      if (slots_[i].key == key) return &slots_[i].value;
      if (slots_[i].key == kEmpty) return nullptr;
    }
  }

 private:
  static constexpr uint64_t kEmpty = ~0ull;
  static uint64_t make_key(int32_t a, int32_t b) {
    return (static_cast<uint64_t>(static_cast<uint32_t>(a)) << 32) | static_cast<uint32_t>(b);
  }
  struct Slot {
    uint64_t key = kEmpty;
    Value value;
  };
  std::vector<Slot> slots_;
  size_t mask_ = 0;
};

// Byte string -> id. Keys are copied into one arena.
class BytesIdMap {
 public:
  void reserve(size_t n) {
    slots_.assign(table_capacity_for(n), Slot{});
    mask_ = slots_.size() - 1;
  }
  // Returns false when the key was already present (the first id is kept).
  bool insert(std::string_view key, int32_t id) {
    assert(!slots_.empty());
    const uint64_t h = hash_bytes(key.data(), key.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (s.id < 0) {
        s.hash = h;
        s.offset = static_cast<uint32_t>(arena_.size());
        s.length = static_cast<uint32_t>(key.size());
        s.id = id;
        arena_.append(key);
        return true;
      }
      if (s.hash == h && key_of(s) == key) return false;
    }
  }
  // Returns -1 when absent.
  int32_t find(std::string_view key) const {
    if (slots_.empty()) return -1;
    const uint64_t h = hash_bytes(key.data(), key.size());
    for (size_t i = h & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (s.id < 0) return -1;
      if (s.hash == h && key_of(s) == key) return s.id;
    }
  }

 private:
  struct Slot {
    uint64_t hash = 0;
    uint32_t offset = 0, length = 0;
    int32_t id = -1;
  };
  std::string_view key_of(const Slot& s) const {
    return std::string_view(arena_.data() + s.offset, s.length);
  }
  std::vector<Slot> slots_;
  std::string arena_;
  size_t mask_ = 0;
};

}  // namespace lancet
