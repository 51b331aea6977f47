// Shared-tier entries. Header (byte offsets): 0 magic "LKVB" | 4 version | 8 num_layers |
// 12 num_kv_heads | 16 head_dim | 20 block_size | 24 dtype code | 28 num_ranks |
// 32 element bytes | 36 zero | 40 scales digest (u64) | 48 block key (32 bytes) | 80 payload
// (its length follows from the layout and is checked against the entry's) | then the u64
// XXH3 checksum of every byte before it.
#include "kv_tier/kv_entry_codec.h"

#include <algorithm>
#include <cstring>

#include <xxhash.h>

namespace lancet {
namespace {

constexpr char kMagic[4] = {'L', 'K', 'V', 'B'};

void put32(uint8_t* p, uint32_t v) {
  for (int i = 0; i < 4; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(uint8_t* p, uint64_t v) {
  for (int i = 0; i < 8; ++i) p[i] = static_cast<uint8_t>(v >> (8 * i));
}
uint32_t get32(const uint8_t* p) {
  uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<uint32_t>(p[i]) << (8 * i);
  return v;
}
uint64_t get64(const uint8_t* p) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(p[i]) << (8 * i);
  return v;
}

void write_header(const KvBlockLayout& l, const BlockHash& key, uint8_t* h) {
  std::memset(h, 0, kKvEntryHeaderBytes);
  std::memcpy(h, kMagic, 4);
  put32(h + 4, kKvEntryVersion);
  put32(h + 8, l.num_layers);
  put32(h + 12, l.num_kv_heads);
  put32(h + 16, l.head_dim);
  put32(h + 20, l.block_size);
  put32(h + 24, l.dtype_code);
  put32(h + 28, l.num_ranks);
  put32(h + 32, l.element_bytes);
  put64(h + 40, l.scales_digest);
  std::memcpy(h + 48, key.bytes.data(), key.bytes.size());
}

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s(2 * n, '0');
  for (size_t i = 0; i < n; ++i) {
    s[2 * i] = d[p[i] >> 4];
    s[2 * i + 1] = d[p[i] & 15];
  }
  return s;
}

}  // namespace

size_t kv_entry_bytes(const KvBlockLayout& layout) {
  return kKvEntryHeaderBytes + static_cast<size_t>(layout.payload_bytes()) + kKvEntryChecksumBytes;
}

std::string kv_entry_key(const KvBlockLayout& layout, const BlockHash& key) {
  uint8_t h[kKvEntryHeaderBytes];
  write_header(layout, BlockHash{}, h);
  uint8_t tag[8];
  put64(tag, XXH3_64bits(h, 48));  // the layout fields only
  return "lancet:kv:v" + std::to_string(kKvEntryVersion) + ":" + hex(tag, 8) + ":" +
         hex(key.bytes.data(), key.bytes.size());
}

std::span<uint8_t> kv_entry_payload(const KvBlockLayout& layout, std::span<uint8_t> entry) {
  return entry.subspan(kKvEntryHeaderBytes, static_cast<size_t>(layout.payload_bytes()));
}

Status seal_kv_entry(const KvBlockLayout& layout, const BlockHash& key, std::span<uint8_t> entry) {
  if (entry.size() != kv_entry_bytes(layout))
    return InvalidArgument("kv entry: " + std::to_string(entry.size()) + " bytes for an entry of " +
                           std::to_string(kv_entry_bytes(layout)));
  write_header(layout, key, entry.data());
  const size_t body = entry.size() - kKvEntryChecksumBytes;
  put64(entry.data() + body, XXH3_64bits(entry.data(), body));
  return OkStatus();
}

std::vector<uint8_t> encode_kv_entry(const KvBlockLayout& layout, const BlockHash& key,
                                     std::span<const uint8_t> payload) {
  std::vector<uint8_t> out(kv_entry_bytes(layout));
  const size_t n = std::min(payload.size(), static_cast<size_t>(layout.payload_bytes()));
  std::memcpy(out.data() + kKvEntryHeaderBytes, payload.data(), n);
  (void)seal_kv_entry(layout, key, out);  // sized above: cannot fail
  return out;
}

StatusOr<std::span<const uint8_t>> decode_kv_entry(const KvBlockLayout& layout, const BlockHash& key,
                                                   std::span<const uint8_t> entry) {
  const size_t want = kv_entry_bytes(layout);
  if (entry.size() < kKvEntryHeaderBytes)
    return InvalidArgument("kv entry: truncated header (" + std::to_string(entry.size()) + " bytes)");
  const uint8_t* h = entry.data();
  if (std::memcmp(h, kMagic, 4) != 0) return InvalidArgument("kv entry: bad magic");
  if (get32(h + 4) != kKvEntryVersion)
    return InvalidArgument("kv entry: format version " + std::to_string(get32(h + 4)) + ", expected " +
                           std::to_string(kKvEntryVersion));
  KvBlockLayout got;
  got.num_layers = get32(h + 8);
  got.num_kv_heads = get32(h + 12);
  got.head_dim = get32(h + 16);
  got.block_size = get32(h + 20);
  got.dtype_code = get32(h + 24);
  got.num_ranks = get32(h + 28);
  got.element_bytes = get32(h + 32);
  got.scales_digest = get64(h + 40);
  if (!(got == layout)) return InvalidArgument("kv entry: the layout differs from this cache's");
  if (std::memcmp(h + 48, key.bytes.data(), key.bytes.size()) != 0)
    return InvalidArgument("kv entry: filed under another block's key");
  if (entry.size() != want)
    return InvalidArgument("kv entry: " + std::to_string(entry.size()) + " bytes, expected " + std::to_string(want));
  const size_t body = want - kKvEntryChecksumBytes;
  if (get64(h + body) != XXH3_64bits(h, body)) return InvalidArgument("kv entry: checksum mismatch");
  return entry.subspan(kKvEntryHeaderBytes, static_cast<size_t>(layout.payload_bytes()));
}

}  // namespace lancet
