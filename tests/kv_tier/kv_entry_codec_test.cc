// Entry encoding of the shared KV tier: a sealed entry reads back; damage, truncation, another
// layout, another version or another block's key are refused; keys separate layouts.
#include <gtest/gtest.h>

#include <cstring>
#include <numeric>

#include "kv_tier/kv_entry_codec.h"
#include "kv_tier/redis_connection.h"

namespace lancet {
namespace {

KvBlockLayout small_layout() {
  KvBlockLayout l;
  l.num_layers = 3;
  l.num_kv_heads = 2;
  l.head_dim = 4;
  l.block_size = 16;
  l.dtype_code = 2;  // bf16
  l.element_bytes = 2;
  return l;
}

BlockHash key_of(int i) {
  const int32_t toks[2] = {i, i + 1};
  return chain_block_hash(kv_cache_salt("m", "bf16", ""), toks);
}

std::vector<uint8_t> payload_for(const KvBlockLayout& l) {
  std::vector<uint8_t> p(static_cast<size_t>(l.payload_bytes()));
  for (size_t i = 0; i < p.size(); ++i) p[i] = static_cast<uint8_t>(i * 7 + 3);
  return p;
}

TEST(KvEntryCodec, RoundTripsThePayload) {
  const KvBlockLayout l = small_layout();
  EXPECT_EQ(l.payload_bytes(), 3 * 2 * 16 * 2 * 4 * 2);
  const auto payload = payload_for(l);
  const auto entry = encode_kv_entry(l, key_of(1), payload);
  ASSERT_EQ(entry.size(), kv_entry_bytes(l));
  EXPECT_EQ(entry.size(), kKvEntryHeaderBytes + payload.size() + kKvEntryChecksumBytes);
  auto got = decode_kv_entry(l, key_of(1), entry);
  ASSERT_TRUE(got.ok()) << got.status().to_string();
  ASSERT_EQ(got->size(), payload.size());
  EXPECT_EQ(std::memcmp(got->data(), payload.data(), payload.size()), 0);
}

TEST(KvEntryCodec, SealWritesAroundAPayloadInPlace) {
  const KvBlockLayout l = small_layout();
  const auto payload = payload_for(l);
  std::vector<uint8_t> buf(kv_entry_bytes(l));
  auto slot = kv_entry_payload(l, buf);
  std::memcpy(slot.data(), payload.data(), payload.size());
  ASSERT_TRUE(seal_kv_entry(l, key_of(2), buf).ok());
  EXPECT_EQ(buf, encode_kv_entry(l, key_of(2), payload));
  std::vector<uint8_t> wrong(buf.size() - 1);
  EXPECT_FALSE(seal_kv_entry(l, key_of(2), wrong).ok());
}

TEST(KvEntryCodec, DetectsAFlippedBitAnywhere) {
  const KvBlockLayout l = small_layout();
  const auto entry = encode_kv_entry(l, key_of(1), payload_for(l));
  // In the payload, in the checksum itself, and in a header byte the fields do not cover.
  for (size_t at : {kKvEntryHeaderBytes + 5, entry.size() - 1, size_t{37}}) {
    auto bad = entry;
    bad[at] ^= 0x10;
    auto got = decode_kv_entry(l, key_of(1), bad);
    ASSERT_FALSE(got.ok()) << "byte " << at;
    EXPECT_NE(got.status().message().find("checksum"), std::string::npos) << got.status().to_string();
  }
}

TEST(KvEntryCodec, RefusesTruncatedEntries) {
  const KvBlockLayout l = small_layout();
  const auto entry = encode_kv_entry(l, key_of(1), payload_for(l));
  for (size_t n : {size_t{0}, size_t{10}, kKvEntryHeaderBytes, entry.size() - 1}) {
    std::span<const uint8_t> cut(entry.data(), n);
    EXPECT_FALSE(decode_kv_entry(l, key_of(1), cut).ok()) << n << " bytes";
  }
  auto longer = entry;
  longer.push_back(0);
  EXPECT_FALSE(decode_kv_entry(l, key_of(1), longer).ok());
}

TEST(KvEntryCodec, RefusesAnotherLayoutVersionOrKey) {
  const KvBlockLayout l = small_layout();
  const auto entry = encode_kv_entry(l, key_of(1), payload_for(l));
  auto other = [&](auto change) {
    KvBlockLayout o = l;
    change(o);
    return o;
  };
  for (const KvBlockLayout& o :
       {other([](KvBlockLayout& x) { x.num_layers = 4; }), other([](KvBlockLayout& x) { x.num_kv_heads = 1; }),
        other([](KvBlockLayout& x) { x.head_dim = 8; }), other([](KvBlockLayout& x) { x.block_size = 32; }),
        other([](KvBlockLayout& x) { x.dtype_code = 1; }), other([](KvBlockLayout& x) { x.num_ranks = 2; }),
        other([](KvBlockLayout& x) { x.scales_digest = 42; })}) {
    auto got = decode_kv_entry(o, key_of(1), entry);
    ASSERT_FALSE(got.ok());
    EXPECT_NE(got.status().message().find("layout"), std::string::npos) << got.status().to_string();
  }
  auto misfiled = decode_kv_entry(l, key_of(9), entry);
  ASSERT_FALSE(misfiled.ok());
  EXPECT_NE(misfiled.status().message().find("key"), std::string::npos);
  auto old_version = entry;
  old_version[4] = static_cast<uint8_t>(kKvEntryVersion + 1);
  auto v = decode_kv_entry(l, key_of(1), old_version);
  ASSERT_FALSE(v.ok());
  EXPECT_NE(v.status().message().find("version"), std::string::npos);
  auto magic = entry;
  magic[0] = 'X';
  EXPECT_FALSE(decode_kv_entry(l, key_of(1), magic).ok());
}

TEST(KvEntryCodec, KeysNameTheVersionLayoutAndBlock) {
  const KvBlockLayout l = small_layout();
  const std::string k = kv_entry_key(l, key_of(1));
  EXPECT_EQ(k.rfind("lancet:kv:v1:", 0), 0u) << k;
  EXPECT_EQ(k.size(), std::string("lancet:kv:v1:").size() + 16 + 1 + 64);
  EXPECT_EQ(k, kv_entry_key(l, key_of(1)));
  EXPECT_NE(k, kv_entry_key(l, key_of(2)));
  KvBlockLayout fp8 = l;
  fp8.dtype_code = 3;
  fp8.element_bytes = 1;
  EXPECT_NE(k.substr(0, 30), kv_entry_key(fp8, key_of(1)).substr(0, 30));
}

TEST(RedisUrl, ParsesTcpAndUnixForms) {
  auto a = parse_redis_url("redis://10.0.0.5:6380/2");
  ASSERT_TRUE(a.ok());
  EXPECT_EQ(a->host, "10.0.0.5");
  EXPECT_EQ(a->port, 6380);
  EXPECT_EQ(a->db, 2);
  auto b = parse_redis_url("redis://cache");
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->host, "cache");
  EXPECT_EQ(b->port, 6379);
  EXPECT_EQ(b->db, 0);
  auto c = parse_redis_url("redis://:s3cret@[::1]:7000");
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(c->host, "::1");
  EXPECT_EQ(c->port, 7000);
  EXPECT_EQ(c->password, "s3cret");
  EXPECT_EQ(c->describe().find("s3cret"), std::string::npos);
  auto d = parse_redis_url("unix:///run/redis/redis.sock?db=3");
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->unix_path, "/run/redis/redis.sock");
  EXPECT_EQ(d->db, 3);
  for (const char* bad : {"http://x:1", "redis://", "redis://h:0", "redis://h:99999", "redis://h:12/x",
                          "unix://relative.sock", "unix:///s?database=1", "redis://h:port"})
    EXPECT_FALSE(parse_redis_url(bad).ok()) << bad;
}

}  // namespace
}  // namespace lancet
