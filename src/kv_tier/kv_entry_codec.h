// The bytes of one shared-tier entry: a fixed header (magic, format version, the block layout
// and the block's own key), the block's KV payload (kv/kv_block_layout.h), and a 64-bit
// XXH3 checksum over header and payload. A reader accepts an entry only when every header
// field matches what it expects and the checksum holds, so a corrupt, truncated, foreign-
// layout or misfiled entry is refused and its block recomputed. (The checksum catches damage,
// not forgery: whoever can write to the store can write KV; the store must be trusted.)
// All integers little-endian.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/status.h"
#include "kv/block_hash.h"
#include "kv/kv_block_layout.h"

namespace lancet {

inline constexpr uint32_t kKvEntryVersion = 1;
inline constexpr size_t kKvEntryHeaderBytes = 80;
inline constexpr size_t kKvEntryChecksumBytes = 8;

// Header + payload + checksum.
size_t kv_entry_bytes(const KvBlockLayout& layout);
// The store key: "lancet:kv:v<version>:<16 hex digits of the layout>:<64 hex digits of the
// block key>", so caches of other layouts never even look at each other's entries.
std::string kv_entry_key(const KvBlockLayout& layout, const BlockHash& key);

// `entry` holds kv_entry_bytes(layout) bytes whose payload part (the middle) is already
// filled: writes the header and the checksum around it.
Status seal_kv_entry(const KvBlockLayout& layout, const BlockHash& key, std::span<uint8_t> entry);
// The payload part of an entry buffer.
std::span<uint8_t> kv_entry_payload(const KvBlockLayout& layout, std::span<uint8_t> entry);
// A whole entry from a payload (tests and tools).
std::vector<uint8_t> encode_kv_entry(const KvBlockLayout& layout, const BlockHash& key,
                                     std::span<const uint8_t> payload);
// Checks an entry read back for `key` under `layout`; returns its payload (a view into
// `entry`) or an InvalidArgument naming the first check that failed.
StatusOr<std::span<const uint8_t>> decode_kv_entry(const KvBlockLayout& layout, const BlockHash& key,
                                                   std::span<const uint8_t> entry);

}  // namespace lancet
