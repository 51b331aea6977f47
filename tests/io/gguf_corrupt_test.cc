// Corrupt GGUF files: every malformed header, count, length, dim, offset or type must give a
// non-OK Status that names the file and the key or tensor at fault, never a crash or a huge
// allocation. Files are assembled byte by byte here so each field can be broken on purpose.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "io/gguf.h"

namespace lancet {
namespace {

constexpr const char* kName = "corrupt.gguf";

struct Bytes {
  std::vector<uint8_t> b;
  template <typename T>
  Bytes& put(T v) {
    const size_t n = b.size();
    b.resize(n + sizeof(T));
    std::memcpy(b.data() + n, &v, sizeof(T));
    return *this;
  }
  Bytes& str(const std::string& s) {
    put<uint64_t>(s.size());
    b.insert(b.end(), s.begin(), s.end());
    return *this;
  }
  Bytes& header(uint64_t n_tensors, uint64_t n_kv, uint32_t version = 3) {
    b.insert(b.end(), {'G', 'G', 'U', 'F'});
    return put(version).put(n_tensors).put(n_kv);
  }
  Bytes& kv_u32(const std::string& key, uint32_t v) { return str(key).put<uint32_t>(4).put(v); }
  Bytes& kv_str(const std::string& key, const std::string& v) { return str(key).put<uint32_t>(8).str(v); }
  Bytes& tensor(const std::string& name, std::vector<uint64_t> ne, uint32_t type, uint64_t offset) {
    str(name).put<uint32_t>(static_cast<uint32_t>(ne.size()));
    for (uint64_t d : ne) put(d);
    return put(type).put(offset);
  }
  Bytes& pad(uint64_t alignment = 32) {
    while (b.size() % alignment) b.push_back(0);
    return *this;
  }
  Bytes& zeros(size_t n) {
    b.insert(b.end(), n, 0);
    return *this;
  }
};

// A small valid file: two keys (one an array of strings), two f32 tensors.
Bytes valid_file() {
  Bytes f;
  f.header(2, 2);
  f.kv_str("general.architecture", "llama");
  f.str("tokens").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(2).str("a").str("bc");
  f.tensor("w", {4, 2}, 0, 0);   // 32 bytes
  f.tensor("v", {3}, 0, 32);     // 12 bytes
  f.pad().zeros(44);
  return f;
}

StatusOr<std::unique_ptr<GgufFile>> parse(const Bytes& f) {
  return parse_gguf_buffer(f.b.data(), f.b.size(), kName);
}

// Expects failure whose message contains the file name and every given fragment.
void expect_error(const Bytes& f, std::initializer_list<const char*> fragments) {
  auto r = parse(f);
  ASSERT_FALSE(r.ok()) << "accepted a corrupt file";
  const std::string& msg = r.status().message();
  EXPECT_NE(msg.find(kName), std::string::npos) << msg;
  for (const char* frag : fragments) EXPECT_NE(msg.find(frag), std::string::npos) << msg;
}

TEST(GgufCorrupt, ValidBaselineParses) {
  auto r = parse(valid_file());
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->tensors().size(), 2u);
  EXPECT_EQ((*(*r)->get_string_array("tokens"))[1], "bc");
  EXPECT_EQ((*r)->find_tensor("v")->shape, std::vector<int64_t>{3});
  EXPECT_EQ((*r)->find_tensor("w")->shape, (std::vector<int64_t>{2, 4}));
}

TEST(GgufCorrupt, BadMagic) {
  Bytes f = valid_file();
  f.b[3] = 'X';
  expect_error(f, {"magic"});
  expect_error(Bytes{}, {"magic"});
}

TEST(GgufCorrupt, BadVersion) {
  for (uint32_t v : {0u, 1u, 4u, 0x03000000u}) {
    Bytes f;
    f.header(0, 0, v);
    auto r = parse(f);
    ASSERT_FALSE(r.ok()) << v;
    EXPECT_NE(r.status().message().find("version"), std::string::npos);
    EXPECT_NE(r.status().message().find(kName), std::string::npos);
  }
  Bytes v2;
  v2.header(0, 0, 2);
  EXPECT_TRUE(parse(v2).ok());
}

TEST(GgufCorrupt, HugeCounts) {
  Bytes t;
  t.header(uint64_t{1} << 60, 0);
  expect_error(t, {"tensor count"});
  Bytes k;
  k.header(0, ~uint64_t{0});
  expect_error(k, {"metadata count"});
  Bytes both;  // each plausible alone, not together
  both.header(1, 3).zeros(40);
  expect_error(both, {"count"});
}

TEST(GgufCorrupt, StringLengthPastEnd) {
  Bytes f;
  f.header(0, 1).str("general.name").put<uint32_t>(8).put<uint64_t>(1000).zeros(20);
  expect_error(f, {"general.name", "truncated"});
  Bytes key;
  key.header(0, 1).put<uint64_t>(~uint64_t{0} - 3).zeros(20);
  expect_error(key, {"metadata key #0"});
}

TEST(GgufCorrupt, ArrayLengthPastEnd) {
  Bytes f;
  f.header(0, 1).str("tokenizer.ggml.scores").put<uint32_t>(9).put<uint32_t>(6)
      .put<uint64_t>(uint64_t{1} << 61).zeros(64);
  expect_error(f, {"tokenizer.ggml.scores", "array"});
  Bytes s;  // strings take >= 8 bytes each
  s.header(0, 1).str("tokenizer.ggml.tokens").put<uint32_t>(9).put<uint32_t>(8).put<uint64_t>(10).zeros(70);
  expect_error(s, {"tokenizer.ggml.tokens"});
}

TEST(GgufCorrupt, BadValueTypes) {
  Bytes f;
  f.header(0, 1).str("k.bad").put<uint32_t>(13).zeros(16);
  expect_error(f, {"k.bad", "type"});
  Bytes a;
  a.header(0, 1).str("k.arr").put<uint32_t>(9).put<uint32_t>(77).put<uint64_t>(1).zeros(16);
  expect_error(a, {"k.arr", "element type"});
  Bytes b;
  b.header(0, 1).str("k.bool").put<uint32_t>(7).put<uint8_t>(2).zeros(16);
  expect_error(b, {"k.bool"});
}

TEST(GgufCorrupt, NestingTooDeep) {
  Bytes f;
  f.header(0, 1).str("k.deep").put<uint32_t>(9);
  for (int i = 0; i < 100; ++i) f.put<uint32_t>(9).put<uint64_t>(1);
  f.put<uint32_t>(0).put<uint64_t>(1).put<uint8_t>(0);
  expect_error(f, {"k.deep", "nested"});
}

TEST(GgufCorrupt, DuplicateKey) {
  Bytes f;
  f.header(0, 2).kv_u32("llama.block_count", 2).kv_u32("llama.block_count", 3);
  expect_error(f, {"duplicate", "llama.block_count"});
}

TEST(GgufCorrupt, DuplicateTensorName) {
  Bytes f;
  f.header(2, 0).tensor("blk.0.attn_q.weight", {4}, 0, 0).tensor("blk.0.attn_q.weight", {4}, 0, 32);
  f.pad().zeros(64);
  expect_error(f, {"duplicate", "blk.0.attn_q.weight"});
}

TEST(GgufCorrupt, Alignment) {
  for (uint32_t a : {0u, 48u, 3u}) {
    Bytes f;
    f.header(0, 1).kv_u32("general.alignment", a);
    expect_error(f, {"general.alignment", "power of two"});
  }
  Bytes s;  // wrong type
  s.header(0, 1).kv_str("general.alignment", "32");
  expect_error(s, {"general.alignment"});
  Bytes ok;
  ok.header(1, 1).kv_u32("general.alignment", 64).tensor("t", {2}, 0, 0).pad(64).zeros(8);
  auto r = parse(ok);
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->data_offset() % 64, 0u);
  Bytes mis;  // offset not a multiple of the alignment
  mis.header(1, 0).tensor("t.mis", {2}, 0, 8).pad().zeros(64);
  expect_error(mis, {"t.mis", "alignment"});
}

TEST(GgufCorrupt, TensorOffsetPastEnd) {
  Bytes f;
  f.header(1, 0).tensor("output.weight", {8}, 0, uint64_t{1} << 40).pad().zeros(32);
  expect_error(f, {"output.weight", "offset"});
  Bytes wrap;  // offset + data start overflows
  wrap.header(1, 0).tensor("output.weight", {8}, 0, ~uint64_t{0} - 31).pad().zeros(32);
  expect_error(wrap, {"output.weight"});
}

TEST(GgufCorrupt, TensorSizePastEnd) {
  Bytes f;
  f.header(1, 0).tensor("token_embd.weight", {64, 1000}, 0, 0).pad().zeros(1024);
  expect_error(f, {"token_embd.weight", "past the end"});
}

TEST(GgufCorrupt, DimsProductOverflows) {
  Bytes f;
  f.header(1, 0).tensor("big", {uint64_t{1} << 32, uint64_t{1} << 32, 4}, 0, 0).pad().zeros(32);
  expect_error(f, {"big", "overflow"});
  Bytes bytes;  // elements fit int64, but bytes (x4 for f32) do not
  bytes.header(1, 0).tensor("big.bytes", {uint64_t{1} << 62}, 0, 0).pad().zeros(32);
  expect_error(bytes, {"big.bytes"});
  Bytes zero;
  zero.header(1, 0).tensor("zero", {4, 0}, 0, 0).pad().zeros(32);
  expect_error(zero, {"zero", "dim"});
}

TEST(GgufCorrupt, UnknownTensorType) {
  for (uint32_t t : {4u, 16u, 99u, 0xffffffffu}) {
    Bytes f;
    f.header(1, 0).tensor("blk.3.ffn_up.weight", {256}, t, 0).pad().zeros(1024);
    expect_error(f, {"blk.3.ffn_up.weight", "type"});
  }
}

TEST(GgufCorrupt, RowNotWholeBlocks) {
  Bytes f;
  f.header(1, 0).tensor("q8", {31, 2}, 8, 0).pad().zeros(128);
  expect_error(f, {"q8", "block"});
}

TEST(GgufCorrupt, TooManyDims) {
  Bytes f;
  f.header(1, 0).tensor("five", {1, 1, 1, 1, 1}, 0, 0).pad().zeros(32);
  expect_error(f, {"five", "dims"});
}

TEST(GgufCorrupt, EveryTruncationFailsCleanly) {
  const Bytes f = valid_file();
  ASSERT_TRUE(parse(f).ok());
  for (size_t n = 0; n < f.b.size(); ++n) {
    // A fresh heap copy of exactly n bytes, so reading past it is caught by sanitizers.
    std::vector<uint8_t> prefix(f.b.begin(), f.b.begin() + n);
    auto r = parse_gguf_buffer(prefix.data(), prefix.size(), kName);
    ASSERT_FALSE(r.ok()) << "prefix of " << n << " bytes accepted";
    EXPECT_NE(r.status().message().find(kName), std::string::npos) << r.status().message();
  }
}

}  // namespace
}  // namespace lancet
