// Keys of full KV blocks for prefix caching. A block's key is SHA-256 over the previous
// block's key, the block's token ids and a salt that covers everything else that changes the
// KV (model identity, KV dtype, adapter), so equal keys mean equal KV contents, collisions
// are infeasible, and a block is only shared when its whole prefix is shared.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <span>
#include <string>

namespace lancet {

struct BlockHash {
  std::array<uint8_t, 32> bytes{};
  bool operator==(const BlockHash& o) const { return bytes == o.bytes; }
};

struct BlockHashHasher {
  size_t operator()(const BlockHash& h) const {
    size_t v;
    static_assert(sizeof(v) <= sizeof(h.bytes));
    __builtin_memcpy(&v, h.bytes.data(), sizeof v);
    return v;
  }
};

// Salt for a model + cache configuration, e.g. kv_cache_salt("model-sha", "bf16", "").
BlockHash kv_cache_salt(const std::string& model_id, const std::string& kv_dtype,
                        const std::string& adapter);

// key(block i) = SHA-256(key(block i-1) or the salt for i == 0, tokens of block i).
BlockHash chain_block_hash(const BlockHash& parent, std::span<const int32_t> tokens);

}  // namespace lancet
