// safetensors reader/writer on valid input: the HF-written fixtures (compared with an
// independent Python reader and with numbers taken from it once), sharded loading, and the
// writer's output read back by both readers.
#include "io/safetensors.h"

#include <gtest/gtest.h>

#include <cstring>

#include "io_test_util.h"
#include "test_paths.h"

namespace lancet {
namespace {

using testing::fixture_dir;

std::vector<float> bf16_values(const TensorView& t, size_t n) {
  std::vector<float> out;
  const auto* p = static_cast<const uint16_t*>(t.data);
  for (size_t i = 0; i < n; ++i) {
    uint16_t h;
    std::memcpy(&h, p + i, 2);
    out.push_back(bf16_to_f32(h));
  }
  return out;
}

TEST(SafetensorsDType, NamesRoundTrip) {
  EXPECT_STREQ(safetensors_dtype_name(DType::kBF16), "BF16");
  EXPECT_STREQ(safetensors_dtype_name(DType::kF8E4M3), "F8_E4M3");
  EXPECT_EQ(safetensors_dtype_name(DType::kQ4_K), nullptr);
  EXPECT_EQ(dtype_from_safetensors_name("F8_E5M2"), DType::kF8E5M2);
  EXPECT_EQ(dtype_from_safetensors_name("BOOL"), DType::kBool);
  EXPECT_FALSE(dtype_from_safetensors_name("bf16").has_value());  // names are upper case
  EXPECT_FALSE(dtype_from_safetensors_name("U16").has_value());
}

TEST(SafetensorsFixture, SingleFileMatchesPythonReader) {
  const std::string path = fixture_dir("tiny-llama32") + "/model.safetensors";
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->metadata().at("format"), "pt");
  // 3 layers x 9 + embed + final norm; tied, so no lm_head.
  EXPECT_EQ((*f)->tensors().size(), 29u);
  EXPECT_EQ((*f)->find("lm_head.weight"), nullptr);

  const TensorView* e = (*f)->find("model.embed_tokens.weight");
  ASSERT_NE(e, nullptr);
  EXPECT_EQ(e->dtype, DType::kBF16);
  EXPECT_EQ(e->shape, (std::vector<int64_t>{1024, 256}));
  EXPECT_EQ(e->nbytes, 1024u * 256u * 2u);
  auto ours = bf16_values(*e, 6);
  // Read once with Python (json + numpy) from the HF-written file.
  const float golden[] = {-0.0810546875f, -0.169921875f, 0.0198974609375f,
                          0.0111083984375f, -0.04638671875f, -0.13671875f};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(ours[i], golden[i]) << i;

  // And live, for a tensor deep inside the file.
  const std::string name = "model.layers.2.mlp.down_proj.weight";
  const TensorView* d = (*f)->find(name);
  ASSERT_NE(d, nullptr);
  EXPECT_EQ(d->shape, (std::vector<int64_t>{256, 512}));
  std::string out = testing::python_peek(path, name, 8);
  EXPECT_EQ(out.rfind("BF16 256 512 |", 0), 0u) << out;
  auto ref = testing::peek_values(out);
  ASSERT_EQ(ref.size(), 8u) << out;
  auto got = bf16_values(*d, 8);
  for (int i = 0; i < 8; ++i) EXPECT_EQ(got[i], static_cast<float>(ref[i])) << i;
}

TEST(SafetensorsFixture, ShardedIndexLoadsEveryTensorOnce) {
  const std::string dir = fixture_dir("tiny-llama3");
  auto ck = SafetensorsCheckpoint::open_index(dir + "/model.safetensors.index.json");
  ASSERT_TRUE(ck.ok()) << ck.status().to_string();
  EXPECT_EQ((*ck)->files().size(), 4u);
  EXPECT_EQ((*ck)->tensors().size(), 2u * 9u + 3u);
  EXPECT_EQ((*ck)->file_of("lm_head.weight"), dir + "/model-00004-of-00004.safetensors");
  EXPECT_EQ((*ck)->file_of("model.layers.1.mlp.gate_proj.weight"),
            dir + "/model-00003-of-00004.safetensors");
  EXPECT_EQ((*ck)->file_of("nope"), "");

  const TensorView* q = (*ck)->find("model.layers.0.self_attn.q_proj.weight");
  ASSERT_NE(q, nullptr);
  EXPECT_EQ(q->shape, (std::vector<int64_t>{512, 256}));  // 4 heads x 128 <- hidden 256
  const TensorView* k = (*ck)->find("model.layers.1.self_attn.k_proj.weight");
  ASSERT_NE(k, nullptr);
  EXPECT_EQ(k->shape, (std::vector<int64_t>{128, 256}));

  auto embed = bf16_values(*(*ck)->find("model.embed_tokens.weight"), 4);
  EXPECT_EQ(embed, (std::vector<float>{0.125f, -0.162109375f, 0.035888671875f, 0.16796875f}));
  auto head = bf16_values(*(*ck)->find("lm_head.weight"), 4);
  EXPECT_EQ(head, (std::vector<float>{0.06591796875f, -0.00616455078125f, -0.034912109375f,
                                      0.0223388671875f}));
}

TEST(SafetensorsFixture, EveryFixtureParses) {
  for (const char* name : {"tiny-llama32", "tiny-gqa8", "tiny-rope-linear", "tiny-rope-yarn"}) {
    auto f = SafetensorsFile::open(fixture_dir(name) + "/model.safetensors");
    ASSERT_TRUE(f.ok()) << name << ": " << f.status().to_string();
    for (const auto& [tname, t] : (*f)->tensors()) {
      EXPECT_EQ(t.dtype, DType::kBF16) << tname;
      EXPECT_EQ(t.nbytes, static_cast<uint64_t>(t.numel()) * 2) << tname;
    }
  }
}

// A mixed set of tensors for writer tests.
struct Sample {
  std::vector<float> f32 = {1.5f, -2.0f, 3.25f, 0.0f, 1e-3f, -7.0f};
  std::vector<uint16_t> bf16 = {0x3f80, 0xc000, 0x4049, 0x0000};
  std::vector<uint8_t> fp8 = {0x38, 0xb8, 0x7e, 0x00, 0x01, 0xfe};
  std::vector<int64_t> i64 = {-5, 1ll << 40};
  std::vector<uint8_t> flags = {1, 0, 1};
  float scalar = 0.0625f;
  std::vector<SafetensorsWriteTensor> tensors() const {
    return {
        {"b.bf16", DType::kBF16, {2, 2}, bf16.data(), 8},
        {"a.f32", DType::kF32, {2, 3}, f32.data(), 24},
        {"c.fp8", DType::kF8E4M3, {3, 2}, fp8.data(), 6},
        {"d.i64", DType::kI64, {2}, i64.data(), 16},
        {"e.bool", DType::kBool, {3}, flags.data(), 3},
        {"f.scalar", DType::kF32, {}, &scalar, 4},
        {"g.empty", DType::kF16, {0, 4}, nullptr, 0},
    };
  }
};

TEST(SafetensorsWriter, RoundTripThroughBufferAndFile) {
  Sample s;
  auto bytes = serialize_safetensors(s.tensors(), {{"format", "pt"}, {"note", "x"}});
  ASSERT_TRUE(bytes.ok()) << bytes.status().to_string();
  auto parsed = parse_safetensors_buffer(reinterpret_cast<const uint8_t*>(bytes->data()),
                                         bytes->size(), "buf");
  ASSERT_TRUE(parsed.ok()) << parsed.status().to_string();
  EXPECT_EQ(parsed->data_offset % 8, 0u);
  // The padding is spaces after the JSON, as the format's reference writer does.
  const std::string header = bytes->substr(8, parsed->data_offset - 8);
  const size_t last = header.find_last_not_of(' ');
  ASSERT_NE(last, std::string::npos);
  EXPECT_EQ(header[last], '}');
  EXPECT_LT(header.size() - last - 1, 8u);
  EXPECT_EQ(parsed->metadata.at("note"), "x");
  ASSERT_EQ(parsed->tensors.size(), 7u);
  const auto* data_start = reinterpret_cast<const uint8_t*>(bytes->data()) + parsed->data_offset;
  for (const auto& t : s.tensors()) {
    const TensorView& v = parsed->tensors.at(t.name);
    EXPECT_EQ(v.dtype, t.dtype) << t.name;
    EXPECT_EQ(v.shape, t.shape) << t.name;
    ASSERT_EQ(v.nbytes, t.nbytes) << t.name;
    if (t.nbytes) EXPECT_EQ(std::memcmp(v.data, t.data, t.nbytes), 0) << t.name;
    // Each tensor is aligned to its element size within the (8-aligned) data section.
    auto off = static_cast<const uint8_t*>(v.data) - data_start;
    EXPECT_EQ(off % dtype_info(t.dtype).block_bytes, 0) << t.name;
  }

  const std::string path = testing::make_temp_dir() + "/w.safetensors";
  ASSERT_TRUE(write_safetensors(path, s.tensors(), {{"format", "pt"}, {"note", "x"}}).ok());
  EXPECT_EQ(testing::read_file(path), *bytes);  // streaming and in-memory agree byte for byte
  auto f = SafetensorsFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ((*f)->find("c.fp8")->shape, (std::vector<int64_t>{3, 2}));
  EXPECT_EQ(static_cast<const uint8_t*>((*f)->find("c.fp8")->data)[2], 0x7e);
}

TEST(SafetensorsWriter, OutputReadsInPython) {
  Sample s;
  const std::string path = testing::make_temp_dir() + "/w.safetensors";
  ASSERT_TRUE(write_safetensors(path, s.tensors()).ok());
  auto f32 = testing::peek_values(testing::python_peek(path, "a.f32", 6));
  ASSERT_EQ(f32.size(), 6u);
  for (int i = 0; i < 6; ++i) EXPECT_EQ(static_cast<float>(f32[i]), s.f32[i]);
  std::string bf = testing::python_peek(path, "b.bf16", 4);
  EXPECT_EQ(bf.rfind("BF16 2 2 |", 0), 0u) << bf;
  EXPECT_EQ(testing::peek_values(bf), (std::vector<double>{1.0, -2.0, 3.140625, 0.0}));
  auto i64 = testing::peek_values(testing::python_peek(path, "d.i64", 2));
  EXPECT_EQ(i64, (std::vector<double>{-5.0, 1099511627776.0}));
}

TEST(SafetensorsWriter, RejectsBadInput) {
  float x[4] = {};
  auto bad_size = serialize_safetensors({{"t", DType::kF32, {2, 2}, x, 12}});
  EXPECT_FALSE(bad_size.ok());
  EXPECT_NE(bad_size.status().message().find("'t'"), std::string::npos);
  EXPECT_FALSE(serialize_safetensors({{"t", DType::kF32, {1}, x, 4}, {"t", DType::kF32, {1}, x, 4}})
                   .ok());
  EXPECT_FALSE(serialize_safetensors({{"q", DType::kQ4_0, {32}, x, 16}}).ok());
  EXPECT_FALSE(serialize_safetensors({{"n", DType::kF32, {-1}, x, 4}}).ok());
  EXPECT_FALSE(serialize_safetensors({{"__metadata__", DType::kF32, {1}, x, 4}}).ok());
  // A failed write leaves no file behind.
  const std::string path = testing::make_temp_dir() + "/bad.safetensors";
  EXPECT_FALSE(write_safetensors(path, {{"t", DType::kF32, {2}, x, 4}}).ok());
  EXPECT_FALSE(SafetensorsFile::open(path).ok());
  EXPECT_FALSE(write_safetensors("/nonexistent-dir/x.safetensors", {}).ok());
}

}  // namespace
}  // namespace lancet
