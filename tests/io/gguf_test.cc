// GGUF reader/writer against the PyPI gguf package: a file gguf-py writes loads with identical
// metadata and tensor bytes; a file we write reads back identically in gguf-py; the real
// SmolLM2 GGUF loads with the geometry gguf-py reports and the known published values.
#include "io/gguf.h"

#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>

#include "core/sha256.h"
#include "io/gguf_source.h"
#include "io/gguf_writer.h"
#include "quant/gguf_blocks.h"
#include "test_paths.h"

namespace lancet {
namespace {

using nlohmann::json;

std::string tool() { return testing::python() + " " + testing::source_dir() + "/tests/io/gguf_py_tool.py"; }

json read_json(const std::string& path) {
  std::ifstream f(path);
  return json::parse(f);
}

// Compares one stored value with the manifest's JSON value of the given type name.
void expect_value_eq(const std::string& key, const GgufValue& v, const std::string& type,
                     const json& want, const json& entry) {
  ASSERT_EQ(gguf_type_name(v.type), type) << key;
  if (type == "string") {
    EXPECT_EQ(v.as_string(), want.get<std::string>()) << key;
  } else if (type == "bool") {
    EXPECT_EQ(v.as_bool(), want.get<bool>()) << key;
  } else if (type == "f32" || type == "f64") {
    EXPECT_EQ(v.as_f64(), want.get<double>()) << key;
  } else if (type == "u8" || type == "u16" || type == "u32" || type == "u64") {
    EXPECT_EQ(v.as_u64(), want.get<uint64_t>()) << key;
  } else if (type == "array") {
    const std::string elem = entry.at("elem");
    ASSERT_EQ(gguf_type_name(v.elem_type), elem) << key;
    ASSERT_EQ(v.as_array().size(), want.size()) << key;
    for (size_t i = 0; i < want.size(); ++i) {
      if (elem == "array") {
        json inner_entry = {{"elem", entry.at("inner")}};
        expect_value_eq(key + "[" + std::to_string(i) + "]", v.as_array()[i], "array", want[i], inner_entry);
      } else {
        expect_value_eq(key + "[" + std::to_string(i) + "]", v.as_array()[i], elem, want[i], entry);
      }
    }
  } else {
    EXPECT_EQ(v.as_i64(), want.get<int64_t>()) << key;
  }
}

TEST(Gguf, ReadsFileWrittenByGgufPy) {
  const std::string dir = testing::make_temp_dir();
  std::string out;
  ASSERT_EQ(testing::run_command(tool() + " write " + dir + "/py.gguf " + dir + "/py.json", &out), 0) << out;
  auto f = GgufFile::open(dir + "/py.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  const json m = read_json(dir + "/py.json");
  EXPECT_EQ((*f)->version(), 3u);
  EXPECT_EQ((*f)->alignment(), m.at("alignment").get<uint64_t>());
  EXPECT_EQ((*f)->data_offset() % 64, 0u);

  ASSERT_EQ((*f)->metadata().size(), m.at("kv").size());
  for (size_t i = 0; i < m.at("kv").size(); ++i) {
    const json& e = m["kv"][i];
    const std::string key = e.at("key");
    EXPECT_EQ((*f)->metadata()[i].first, key) << "metadata order";
    const GgufValue* v = (*f)->find(key);
    ASSERT_NE(v, nullptr) << key;
    expect_value_eq(key, *v, e.at("type"), e.at("value"), e);
  }
  // Typed getters.
  EXPECT_EQ(*(*f)->get_u32("test.u32"), 4000000000u);
  EXPECT_EQ(*(*f)->get_i64("test.i64"), -(int64_t{1} << 62) - 7);
  EXPECT_EQ(*(*f)->get_u64("test.u64"), (uint64_t{1} << 63) + 12345);
  EXPECT_FLOAT_EQ(*(*f)->get_f32("test.f32"), 3.14159f);
  EXPECT_EQ(*(*f)->get_string("general.architecture"), "llama");
  EXPECT_EQ((*(*f)->get_string_array("test.arr_string"))[3], "Ġthe");
  EXPECT_EQ((*(*f)->get_int_array("test.arr_i32"))[3], 2147483647);
  EXPECT_EQ((*f)->get_u32("test.i8").status().code(), StatusCode::kInvalidArgument);  // negative
  EXPECT_EQ((*f)->get_u32("test.u64").status().code(), StatusCode::kInvalidArgument);  // too big
  EXPECT_EQ((*f)->get_string("test.u8").status().code(), StatusCode::kInvalidArgument);
  auto missing = (*f)->get_u32("no.such.key");
  EXPECT_EQ(missing.status().code(), StatusCode::kNotFound);
  EXPECT_NE(missing.status().message().find("no.such.key"), std::string::npos);

  ASSERT_EQ((*f)->tensors().size(), m.at("tensors").size());
  for (size_t i = 0; i < m["tensors"].size(); ++i) {
    const json& e = m["tensors"][i];
    const GgufTensor& t = (*f)->tensors()[i];
    EXPECT_EQ(t.name, e.at("name").get<std::string>());
    EXPECT_EQ(t.ggml_type, e.at("ggml_type").get<uint32_t>()) << t.name;
    EXPECT_EQ(t.ne, e.at("ne").get<std::vector<int64_t>>()) << t.name;
    std::vector<int64_t> rev(t.ne.rbegin(), t.ne.rend());
    EXPECT_EQ(t.shape, rev) << t.name;
    EXPECT_EQ(to_hex(sha256(t.data, t.nbytes)), e.at("sha256").get<std::string>()) << t.name;
    EXPECT_EQ(reinterpret_cast<uintptr_t>(t.data) % 64, 0u) << t.name;
  }
  EXPECT_EQ((*f)->find_tensor("t.i32_3d")->dtype, DType::kI32);
  EXPECT_EQ((*f)->find_tensor("t.q4_k")->nbytes, 288u);
}

// Builds a file with our writer holding every metadata type and several tensor types, plus a
// manifest in gguf_py_tool.py's format.
void write_ours(const std::string& path, json* manifest) {
  GgufWriter w;
  json kv = json::array();
  auto add = [&](const std::string& key, GgufValue v, json value, const char* elem = nullptr) {
    json e = {{"key", key}, {"type", gguf_type_name(v.type)}, {"value", value}};
    if (elem) e["elem"] = elem;
    kv.push_back(e);
    w.add(key, std::move(v));
  };
  add("general.architecture", GgufValue::str("llama"), "llama");
  add("a.u8", GgufValue::u8(255), 255);
  add("a.i8", GgufValue::i8(-128), -128);
  add("a.u16", GgufValue::u16(65535), 65535);
  add("a.i16", GgufValue::i16(-32768), -32768);
  add("a.u32", GgufValue::u32(0xffffffffu), 0xffffffffu);
  add("a.i32", GgufValue::i32(-5), -5);
  add("a.f32", GgufValue::f32(0.1f), static_cast<double>(0.1f));
  add("a.bool", GgufValue::boolean(true), true);
  add("a.str", GgufValue::str("tokenizer ✓"), "tokenizer ✓");
  add("a.u64", GgufValue::u64(~uint64_t{0}), ~uint64_t{0});
  add("a.i64", GgufValue::i64(std::numeric_limits<int64_t>::min()), std::numeric_limits<int64_t>::min());
  add("a.f64", GgufValue::f64(-1e300), -1e300);
  add("a.arr_str", GgufValue::string_array({"x", "yy", ""}), json::array({"x", "yy", ""}), "string");
  add("a.arr_i32", GgufValue::array(GgufType::kI32, {GgufValue::i32(1), GgufValue::i32(-2)}),
      json::array({1, -2}), "i32");
  add("a.arr_f32", GgufValue::array(GgufType::kF32, {GgufValue::f32(0.5f), GgufValue::f32(-3.0f)}),
      json::array({0.5, -3.0}), "f32");
  add("a.arr_u8", GgufValue::array(GgufType::kU8, {GgufValue::u8(1), GgufValue::u8(2)}),
      json::array({1, 2}), "u8");
  add("a.arr_bool", GgufValue::array(GgufType::kBool, {GgufValue::boolean(false)}),
      json::array({false}), "bool");

  json tensors = json::array();
  auto add_tensor = [&](const std::string& name, DType dt, std::vector<int64_t> shape,
                        std::vector<uint8_t> bytes) {
    std::vector<int64_t> ne(shape.rbegin(), shape.rend());
    tensors.push_back({{"name", name}, {"ggml_type", *ggml_type_from_dtype(dt)}, {"ne", ne},
                       {"sha256", to_hex(sha256(bytes.data(), bytes.size()))}});
    ASSERT_TRUE(w.add_tensor(name, dt, shape, std::move(bytes)).ok());
  };
  std::vector<uint8_t> b(7 * 5 * 4);
  for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<uint8_t>(i * 7 + 1);
  add_tensor("w.f32", DType::kF32, {7, 5}, b);  // 140 bytes: the next tensor needs padding
  add_tensor("w.f16", DType::kF16, {3}, {0, 0x3c, 0, 0xc0, 0xff, 0x7b});
  std::vector<float> x(2 * 64);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(0.37f * i);
  std::vector<uint8_t> q8(*dtype_row_bytes(DType::kQ8_0, x.size()));
  ASSERT_TRUE(quantize_row(DType::kQ8_0, x.data(), q8.data(), x.size()).ok());
  add_tensor("w.q8_0", DType::kQ8_0, {2, 64}, q8);
  std::vector<float> xk(256);
  for (size_t i = 0; i < xk.size(); ++i) xk[i] = std::cos(0.11f * i);
  std::vector<uint8_t> q4k(144);
  ASSERT_TRUE(quantize_row(DType::kQ4_K, xk.data(), q4k.data(), 256).ok());
  add_tensor("w.q4_k", DType::kQ4_K, {1, 1, 256}, q4k);
  // A streamed tensor.
  std::vector<uint8_t> bf(2 * 4);
  for (size_t i = 0; i < bf.size(); ++i) bf[i] = static_cast<uint8_t>(0x3f + i);
  tensors.push_back({{"name", "w.bf16"}, {"ggml_type", 30}, {"ne", {4}},
                     {"sha256", to_hex(sha256(bf.data(), bf.size()))}});
  ASSERT_TRUE(w.add_tensor("w.bf16", DType::kBF16, {4}, [bf](uint8_t* dst, uint64_t n) {
                 std::memcpy(dst, bf.data(), n);
                 return OkStatus();
               }).ok());
  Status s = w.write(path);
  ASSERT_TRUE(s.ok()) << s.to_string();
  *manifest = {{"alignment", 32}, {"kv", kv}, {"tensors", tensors}};
}

TEST(Gguf, FileWeWriteReadsIdenticallyInGgufPyAndHere) {
  const std::string dir = testing::make_temp_dir();
  json m;
  ASSERT_NO_FATAL_FAILURE(write_ours(dir + "/ours.gguf", &m));
  {
    std::ofstream(dir + "/ours.json") << m.dump();
  }
  std::string out;
  EXPECT_EQ(testing::run_command(tool() + " check " + dir + "/ours.gguf " + dir + "/ours.json", &out), 0)
      << out;
  // And our reader: same manifest.
  auto f = GgufFile::open(dir + "/ours.gguf");
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  ASSERT_EQ((*f)->metadata().size(), m["kv"].size());
  for (const json& e : m["kv"]) {
    const GgufValue* v = (*f)->find(e["key"]);
    ASSERT_NE(v, nullptr);
    expect_value_eq(e["key"], *v, e["type"], e["value"], e);
  }
  for (size_t i = 0; i < m["tensors"].size(); ++i) {
    const GgufTensor& t = (*f)->tensors()[i];
    EXPECT_EQ(to_hex(sha256(t.data, t.nbytes)), m["tensors"][i]["sha256"].get<std::string>());
  }
}

TEST(Gguf, WriterRoundTripsNestedAndEmptyArraysAndAlignment) {
  const std::string path = testing::make_temp_dir() + "/n.gguf";
  GgufWriter w(128);
  GgufValue nested = GgufValue::array(
      GgufType::kArray, {GgufValue::string_array({"a", "b"}), GgufValue::string_array({})});
  w.add("n.nested", nested);
  w.add("n.empty", GgufValue::array(GgufType::kF64, {}));
  ASSERT_TRUE(w.add_tensor("t", DType::kF32, {3}, std::vector<uint8_t>(12, 1)).ok());
  ASSERT_TRUE(w.add_tensor("u", DType::kF32, {1}, std::vector<uint8_t>(4, 2)).ok());
  ASSERT_TRUE(w.write(path).ok());
  auto f = GgufFile::open(path);
  ASSERT_TRUE(f.ok()) << f.status().to_string();
  EXPECT_EQ(*(*f)->find("n.nested"), nested);
  EXPECT_TRUE((*f)->find("n.empty")->as_array().empty());
  EXPECT_EQ((*f)->alignment(), 128u);
  EXPECT_EQ(*(*f)->get_u32("general.alignment"), 128u);
  EXPECT_EQ((*f)->find_tensor("u")->offset, 128u);
  EXPECT_EQ((*f)->find_tensor("u")->data[0], 2);

  GgufWriter bad;
  bad.add("k", GgufValue::u8(1));
  bad.add("k", GgufValue::u8(2));
  EXPECT_FALSE(bad.write(path + ".bad").ok());
  GgufWriter mixed;
  mixed.add("m", GgufValue::array(GgufType::kI32, {GgufValue::i32(1), GgufValue::u8(2)}));
  EXPECT_FALSE(mixed.write(path + ".bad").ok());
  EXPECT_FALSE(w.add_tensor("q", DType::kQ8_0, {2, 31}, std::vector<uint8_t>(68)).ok());
  EXPECT_FALSE(w.add_tensor("r", DType::kF32, {2}, std::vector<uint8_t>(7)).ok());
}

// Reads the SmolLM2 facts through gguf-py once.
const json& smol_dump() {
  static const json j = [] {
    const std::string dir = testing::make_temp_dir();
    std::string out;
    int rc = testing::run_command(tool() + " dump " + testing::default_model() + " " + dir + "/s.json", &out);
    EXPECT_EQ(rc, 0) << out;
    return rc == 0 ? read_json(dir + "/s.json") : json::object();
  }();
  return j;
}

TEST(GgufSmolLM2, LoadsWithRealGeometry) {
  if (testing::default_model().empty()) FAIL() << "SmolLM2 GGUF not fetched (tools/fetch_model.sh)";
  auto src = open_gguf_source(testing::default_model());
  ASSERT_TRUE(src.ok()) << src.status().to_string();
  const ModelConfig& c = (*src)->config();
  // Published SmolLM2-135M geometry.
  EXPECT_EQ(c.hidden_size, 576);
  EXPECT_EQ(c.num_layers, 30);
  EXPECT_EQ(c.num_heads, 9);
  EXPECT_EQ(c.num_kv_heads, 3);
  EXPECT_EQ(c.intermediate_size, 1536);
  EXPECT_EQ(c.vocab_size, 49152);
  EXPECT_EQ(c.head_dim, 64);
  EXPECT_TRUE(c.tie_word_embeddings);
  EXPECT_TRUE(c.rope_interleaved);
  EXPECT_EQ(c.quant.method, QuantMethod::kGguf);
  EXPECT_EQ(c.dtype, DType::kQ4_1);
  EXPECT_STREQ((*src)->format(), "gguf");
  ASSERT_NE((*src)->gguf(), nullptr);
  EXPECT_TRUE((*src)->tokenizer().from_gguf);

  const json& d = smol_dump();
  ASSERT_FALSE(d.empty());
  EXPECT_EQ(c.hidden_size, d["embedding_length"].get<int64_t>());
  EXPECT_EQ(c.num_layers, d["block_count"].get<int64_t>());
  EXPECT_EQ(c.num_heads, d["attention.head_count"].get<int64_t>());
  EXPECT_EQ(c.num_kv_heads, d["attention.head_count_kv"].get<int64_t>());
  EXPECT_EQ(c.intermediate_size, d["feed_forward_length"].get<int64_t>());
  EXPECT_EQ(c.vocab_size, d["vocab_size"].get<int64_t>());
  EXPECT_EQ(c.max_position_embeddings, d["context_length"].get<int64_t>());
  EXPECT_EQ(c.head_dim, d["rope.dimension_count"].get<int64_t>());
  EXPECT_EQ(static_cast<float>(c.rms_norm_eps), d["attention.layer_norm_rms_epsilon"].get<float>());
  EXPECT_EQ(c.rope_theta, d["rope.freq_base"].get<double>());
  EXPECT_EQ(c.bos_token_id, d["bos"].get<int64_t>());
  ASSERT_FALSE(c.eos_token_ids.empty());
  EXPECT_EQ(c.eos_token_ids[0], d["eos"].get<int64_t>());
  EXPECT_EQ((*src)->tokenizer().chat_template, d["chat_template"].get<std::string>());
  EXPECT_EQ((*src)->tokenizer().eos_token, "<|im_end|>");

  // Every tensor: name mapped, ggml dims reversed into shape, type as gguf-py reads it.
  const GgufFile& f = *(*src)->gguf();
  ASSERT_EQ(f.tensors().size(), d["tensors"].size());
  EXPECT_EQ((*src)->tensors().size(), f.tensors().size());
  for (const json& e : d["tensors"]) {
    const GgufTensor* t = f.find_tensor(e["name"]);
    ASSERT_NE(t, nullptr) << e["name"];
    EXPECT_EQ(t->ggml_type, e["ggml_type"].get<uint32_t>());
    EXPECT_EQ(t->ne, e["ne"].get<std::vector<int64_t>>());
    auto hf = gguf_to_hf_name(t->name);
    ASSERT_TRUE(hf.has_value()) << t->name;
    const TensorView* v = (*src)->find(*hf);
    ASSERT_NE(v, nullptr) << *hf;
    EXPECT_EQ(v->shape, t->shape);
    EXPECT_EQ(v->data, t->data);
  }
  const TensorView* embed = (*src)->find("model.embed_tokens.weight");
  ASSERT_NE(embed, nullptr);
  EXPECT_EQ(embed->shape, (std::vector<int64_t>{49152, 576}));
  EXPECT_EQ(embed->dtype, DType::kQ8_0);
  EXPECT_EQ((*src)->find("model.layers.0.self_attn.k_proj.weight")->shape,
            (std::vector<int64_t>{192, 576}));
  EXPECT_EQ((*src)->find("model.layers.29.mlp.down_proj.weight")->shape,
            (std::vector<int64_t>{576, 1536}));
  EXPECT_EQ((*src)->find("lm_head.weight"), nullptr);

  // Dequantized rows equal gguf-py's.
  for (const auto& [gname, row] : d["rows"].items()) {
    const GgufTensor* t = f.find_tensor(gname);
    ASSERT_NE(t, nullptr);
    const int64_t cols = t->shape.back();
    const uint64_t row_bytes = *dtype_row_bytes(t->dtype, cols);
    std::vector<float> got(cols);
    ASSERT_TRUE(dequantize_row(t->dtype, t->data + row["row"].get<int64_t>() * row_bytes, got.data(), cols).ok());
    const auto want = row["values"].get<std::vector<float>>();
    ASSERT_EQ(want.size(), got.size());
    for (int64_t i = 0; i < cols; ++i) ASSERT_EQ(got[i], want[i]) << gname << " col " << i;
  }
}

TEST(GgufSource, NameMappingRoundTrips) {
  EXPECT_EQ(*gguf_to_hf_name("blk.12.attn_q.weight"), "model.layers.12.self_attn.q_proj.weight");
  EXPECT_EQ(*gguf_to_hf_name("blk.0.ffn_norm.weight"), "model.layers.0.post_attention_layernorm.weight");
  EXPECT_EQ(*gguf_to_hf_name("output.weight"), "lm_head.weight");
  EXPECT_EQ(*gguf_to_hf_name("rope_freqs.weight"), "rope_freqs");
  EXPECT_FALSE(gguf_to_hf_name("blk.x.attn_q.weight").has_value());
  EXPECT_FALSE(gguf_to_hf_name("blk.01.attn_q.weight").has_value());
  EXPECT_FALSE(gguf_to_hf_name("blk.1.attn_qkv.weight").has_value());
  EXPECT_EQ(*hf_to_gguf_name("model.layers.7.mlp.down_proj.weight"), "blk.7.ffn_down.weight");
  EXPECT_EQ(*hf_to_gguf_name("model.embed_tokens.weight"), "token_embd.weight");
}

}  // namespace
}  // namespace lancet
