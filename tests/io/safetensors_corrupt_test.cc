// Corrupt safetensors files and indexes: each must give a non-OK Status whose message names
// the file (and the tensor when there is one), never a crash. Files are derived in a temp dir
// from a valid image made by the writer.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "io/safetensors.h"
#include "io_test_util.h"
#include "test_paths.h"

namespace lancet {
namespace {

namespace fs = std::filesystem;
using testing::raw_safetensors;
using testing::write_file;

class SafetensorsCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir();
    auto bytes = serialize_safetensors({{"w", DType::kF32, {2, 2}, w_, sizeof(w_)},
                                        {"b", DType::kBF16, {3}, b_, sizeof(b_)}},
                                       {{"format", "pt"}});
    ASSERT_TRUE(bytes.ok());
    valid_ = *bytes;
  }
  // Writes `bytes` as NAME.safetensors, opens it, and expects an error naming the file and
  // every string in `needles`.
  void expect_error(const std::string& name, const std::string& bytes,
                    std::vector<std::string> needles = {}) {
    const std::string path = dir_ + "/" + name + ".safetensors";
    write_file(path, bytes);
    auto f = SafetensorsFile::open(path);
    ASSERT_FALSE(f.ok()) << name << " parsed";
    const std::string& msg = f.status().message();
    EXPECT_NE(msg.find(path), std::string::npos) << name << ": " << msg;
    for (const auto& n : needles) EXPECT_NE(msg.find(n), std::string::npos) << name << ": " << msg;
  }

  std::string dir_;
  std::string valid_;
  float w_[4] = {1, 2, 3, 4};
  uint16_t b_[3] = {0x3f80, 0x4000, 0x4040};
};

TEST_F(SafetensorsCorrupt, ValidBaseParses) {
  write_file(dir_ + "/ok.safetensors", valid_);
  EXPECT_TRUE(SafetensorsFile::open(dir_ + "/ok.safetensors").ok());
}

TEST_F(SafetensorsCorrupt, HeaderLength) {
  expect_error("empty", "");
  expect_error("short", "\x10\x00\x00");
  expect_error("past_eof", testing::le64(1000) + "{}", {"past the end"});
  expect_error("over_cap", testing::le64(kSafetensorsMaxHeaderBytes + 1) + "{}", {"limit"});
  expect_error("huge", testing::le64(~0ull) + "{}");
  expect_error("zero", testing::le64(0));
}

TEST_F(SafetensorsCorrupt, HeaderJson) {
  expect_error("not_json", raw_safetensors("{\"w\": oops}", ""), {"JSON"});
  expect_error("not_object", raw_safetensors("[1, 2, 3]", ""));
  expect_error("trailing", raw_safetensors("{} {}", ""), {"JSON"});
  expect_error("empty_name",
               raw_safetensors(R"({"": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]}})", "a"),
               {"empty name"});
  expect_error("entry_not_object", raw_safetensors(R"({"t": 5})", ""), {"'t'"});
  expect_error("no_dtype", raw_safetensors(R"({"t": {"shape": [1], "data_offsets": [0, 4]}})",
                                           std::string(4, '\0')),
               {"'t'", "dtype"});
  expect_error("no_offsets", raw_safetensors(R"({"t": {"dtype": "F32", "shape": [1]}})", ""),
               {"'t'", "data_offsets"});
  expect_error("metadata_not_string",
               raw_safetensors(R"({"__metadata__": {"a": 1}})", ""), {"__metadata__"});
  expect_error("duplicate",
               raw_safetensors(R"({"t": {"dtype": "U8", "shape": [1], "data_offsets": [0, 1]},)"
                               R"( "t": {"dtype": "U8", "shape": [1], "data_offsets": [1, 2]}})",
                               "ab"),
               {"'t'", "twice"});
}

TEST_F(SafetensorsCorrupt, TensorEntries) {
  const std::string data(16, '\0');
  auto one = [&](const std::string& entry) {
    return raw_safetensors("{\"t\": " + entry + "}", data);
  };
  expect_error("unknown_dtype", one(R"({"dtype": "Q7", "shape": [4], "data_offsets": [0, 4]})"),
               {"'t'", "Q7"});
  expect_error("negative_dim", one(R"({"dtype": "F32", "shape": [-1], "data_offsets": [0, 4]})"),
               {"'t'", "shape"});
  expect_error("float_dim", one(R"({"dtype": "F32", "shape": [1.5], "data_offsets": [0, 4]})"),
               {"'t'"});
  expect_error("overflow_dims",
               one(R"({"dtype": "F32", "shape": [4611686018427387904, 4611686018427387904],)"
                   R"( "data_offsets": [0, 4]})"),
               {"'t'", "overflow"});
  expect_error("overflow_bytes",
               one(R"({"dtype": "F64", "shape": [4611686018427387904], "data_offsets": [0, 8]})"),
               {"'t'"});
  expect_error("dim_past_int64",
               one(R"({"dtype": "U8", "shape": [18446744073709551615], "data_offsets": [0, 1]})"),
               {"'t'"});
  expect_error("out_of_range",
               one(R"({"dtype": "F32", "shape": [4], "data_offsets": [8, 24]})"), {"'t'", "past"});
  expect_error("offset_overflow",
               one(R"({"dtype": "U8", "shape": [1], "data_offsets": [18446744073709551615, 0]})"),
               {"'t'"});
  expect_error("end_before_begin",
               one(R"({"dtype": "U8", "shape": [0], "data_offsets": [8, 4]})"), {"'t'", "begin"});
  expect_error("size_mismatch",
               one(R"({"dtype": "BF16", "shape": [4], "data_offsets": [0, 16]})"),
               {"'t'", "needs 8"});
  expect_error("negative_offset",
               one(R"({"dtype": "U8", "shape": [1], "data_offsets": [-1, 0]})"), {"'t'"});
  expect_error("three_offsets",
               one(R"({"dtype": "U8", "shape": [1], "data_offsets": [0, 1, 2]})"), {"'t'"});
  expect_error("overlap",
               raw_safetensors(R"({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},)"
                               R"( "b": {"dtype": "F32", "shape": [2], "data_offsets": [4, 12]}})",
                               data),
               {"'a'", "'b'", "overlap"});
  // An empty tensor between two others does not hide an overlap.
  expect_error("overlap_past_empty",
               raw_safetensors(R"({"a": {"dtype": "U8", "shape": [10], "data_offsets": [0, 10]},)"
                               R"( "e": {"dtype": "U8", "shape": [0], "data_offsets": [4, 4]},)"
                               R"( "b": {"dtype": "U8", "shape": [2], "data_offsets": [6, 8]}})",
                               data),
               {"overlap"});
}

TEST_F(SafetensorsCorrupt, EveryTruncationFails) {
  // The last tensor ends at the end of the file, so every strict prefix is invalid.
  for (size_t n = 0; n < valid_.size(); ++n) {
    auto r = parse_safetensors_buffer(reinterpret_cast<const uint8_t*>(valid_.data()), n, "trunc");
    EXPECT_FALSE(r.ok()) << "prefix of " << n << " bytes parsed";
    if (!r.ok()) EXPECT_EQ(r.status().message().rfind("trunc: ", 0), 0u) << r.status().message();
  }
  expect_error("truncated", valid_.substr(0, valid_.size() - 3), {"past the data section"});
}

TEST_F(SafetensorsCorrupt, RandomByteFlipsNeverCrash) {
  std::mt19937 rng(1234);
  int ok = 0;
  for (int i = 0; i < 3000; ++i) {
    std::string b = valid_;
    int flips = 1 + static_cast<int>(rng() % 3);
    for (int k = 0; k < flips; ++k) b[rng() % b.size()] = static_cast<char>(rng());
    auto r = parse_safetensors_buffer(reinterpret_cast<const uint8_t*>(b.data()), b.size(), "m");
    if (r.ok()) {
      ++ok;
      for (const auto& [name, t] : r->tensors) {
        // Any accepted view lies inside the buffer.
        auto off = static_cast<const char*>(t.data) - b.data();
        EXPECT_GE(off, 0);
        EXPECT_LE(static_cast<uint64_t>(off) + t.nbytes, b.size()) << name;
      }
    }
  }
  EXPECT_GT(ok, 0);  // flips in the data section leave a valid file
}

class IndexCorrupt : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::make_temp_dir();
    float x[2] = {1, 2};
    ASSERT_TRUE(write_safetensors(dir_ + "/a.safetensors", {{"x", DType::kF32, {2}, x, 8}}).ok());
    ASSERT_TRUE(write_safetensors(dir_ + "/b.safetensors", {{"y", DType::kF32, {2}, x, 8},
                                                           {"x2", DType::kF32, {1}, x, 4}})
                    .ok());
  }
  StatusOr<std::unique_ptr<SafetensorsCheckpoint>> open(const std::string& index) {
    write_file(dir_ + "/model.safetensors.index.json", index);
    return SafetensorsCheckpoint::open_index(dir_ + "/model.safetensors.index.json");
  }
  void expect_error(const std::string& index, std::vector<std::string> needles) {
    auto r = open(index);
    ASSERT_FALSE(r.ok()) << index;
    for (const auto& n : needles) {
      EXPECT_NE(r.status().message().find(n), std::string::npos) << r.status().message();
    }
  }
  std::string dir_;
};

TEST_F(IndexCorrupt, ValidIndexLoads) {
  auto r = open(R"({"metadata": {}, "weight_map": {"x": "a.safetensors", "y": "b.safetensors",)"
                R"( "x2": "b.safetensors"}})");
  ASSERT_TRUE(r.ok()) << r.status().to_string();
  EXPECT_EQ((*r)->files().size(), 2u);  // b opened once for two tensors
  EXPECT_EQ((*r)->tensors().size(), 3u);
  EXPECT_EQ(static_cast<const float*>((*r)->find("y")->data)[1], 2.0f);
}

TEST_F(IndexCorrupt, BadIndexes) {
  const std::string idx = "model.safetensors.index.json";
  expect_error("not json", {idx, "JSON"});
  expect_error("[]", {idx});
  expect_error(R"({"metadata": {}})", {idx, "weight_map"});
  expect_error(R"({"weight_map": {}})", {idx, "empty"});
  expect_error(R"({"weight_map": {"x": 3}})", {idx, "'x'"});
  expect_error(R"({"weight_map": {"x": "missing.safetensors"}})",
               {idx, "missing.safetensors"});
  expect_error(R"({"weight_map": {"x": "../a.safetensors"}})", {idx, "'x'", "escaping"});
  expect_error(R"({"weight_map": {"x": "sub/../../a.safetensors"}})", {idx, "escaping"});
  expect_error(R"({"weight_map": {"x": "/etc/passwd"}})", {idx, "'x'", "absolute"});
  expect_error(R"({"weight_map": {"x": ""}})", {idx, "'x'"});
  // Listed in a shard that does not hold it.
  expect_error(R"({"weight_map": {"x": "a.safetensors", "y": "a.safetensors"}})",
               {idx, "'y'", "a.safetensors"});
  // The same tensor in two shards.
  write_file(dir_ + "/c.safetensors", testing::read_file(dir_ + "/a.safetensors"));
  expect_error(R"({"weight_map": {"x": "a.safetensors", "z": "c.safetensors"}})",
               {"'x'", "c.safetensors"});
  // A corrupt shard is reported with the index and the shard's own message.
  write_file(dir_ + "/d.safetensors", testing::le64(1 << 20) + "{}");
  expect_error(R"({"weight_map": {"x": "d.safetensors"}})", {idx, "d.safetensors", "past the end"});
}

}  // namespace
}  // namespace lancet
