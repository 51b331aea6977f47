// `lancet inspect` and `lancet verify` as a user runs them: inspect's dims equal config.json
// (read here independently) for every fixture and the GGUF metadata (read with the PyPI gguf
// package) for SmolLM2; verify passes on intact models and fails on a corrupted copy.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "test_paths.h"

namespace fs = std::filesystem;
using nlohmann::json;

namespace lancet {
namespace {

json run_json(const std::string& args) {
  std::string out;
  int rc = testing::run_command(testing::lancet_binary() + " " + args + " 2>/dev/null", &out);
  EXPECT_EQ(rc, 0) << out;
  return json::parse(out, nullptr, /*allow_exceptions=*/false);
}

class InspectFixture : public ::testing::TestWithParam<std::string> {};

TEST_P(InspectFixture, DimsMatchConfigJson) {
  const std::string dir = testing::fixture_dir(GetParam());
  json cfg = json::parse(std::ifstream(dir + "/config.json"));
  json j = run_json("inspect --json " + dir);
  ASSERT_TRUE(j.is_object());
  EXPECT_EQ(j["hidden_size"], cfg["hidden_size"]);
  EXPECT_EQ(j["intermediate_size"], cfg["intermediate_size"]);
  EXPECT_EQ(j["num_layers"], cfg["num_hidden_layers"]);
  EXPECT_EQ(j["num_heads"], cfg["num_attention_heads"]);
  EXPECT_EQ(j["num_kv_heads"], cfg["num_key_value_heads"]);
  EXPECT_EQ(j["head_dim"], cfg["head_dim"]);
  EXPECT_EQ(j["vocab_size"], cfg["vocab_size"]);
  EXPECT_EQ(j["max_position_embeddings"], cfg["max_position_embeddings"]);
  EXPECT_EQ(j["tie_word_embeddings"], cfg["tie_word_embeddings"]);
  const json& rope = cfg.contains("rope_parameters") ? cfg["rope_parameters"] : cfg["rope_scaling"];
  const double theta = cfg.contains("rope_theta") ? cfg["rope_theta"].get<double>()
                                                  : rope["rope_theta"].get<double>();
  EXPECT_EQ(j["rope"]["theta"].get<double>(), theta);
  EXPECT_EQ(j["rope"]["type"], rope["rope_type"]);
  EXPECT_EQ(j["rope"]["factor"].get<double>(), rope["factor"].get<double>());
  if (rope.contains("original_max_position_embeddings"))
    EXPECT_EQ(j["rope"]["original_max_position_embeddings"], rope["original_max_position_embeddings"]);
  // Parameter count: every tensor of a Llama model with these dims.
  const int64_t h = cfg["hidden_size"], inter = cfg["intermediate_size"], v = cfg["vocab_size"];
  const int64_t layers = cfg["num_hidden_layers"], hd = cfg["head_dim"];
  const int64_t nh = cfg["num_attention_heads"], nkv = cfg["num_key_value_heads"];
  const int64_t per_layer = 2 * h + h * nh * hd * 2 + 2 * h * nkv * hd + 3 * h * inter;
  const int64_t params = v * h * (cfg["tie_word_embeddings"].get<bool>() ? 1 : 2) + h + layers * per_layer;
  EXPECT_EQ(j["parameters"].get<int64_t>(), params);
  EXPECT_EQ(j["weight_bytes"].get<int64_t>(), params * 2);  // bf16
  EXPECT_EQ(j["dtypes"]["bf16"]["elements"].get<int64_t>(), params);
  EXPECT_EQ(j["kv_bytes_per_token"]["bf16"].get<int64_t>(), 2 * layers * nkv * hd * 2);
}

INSTANTIATE_TEST_SUITE_P(AllFixtures, InspectFixture,
                         ::testing::Values("tiny-llama3", "tiny-llama32", "tiny-gqa8",
                                           "tiny-rope-linear", "tiny-rope-yarn"));

TEST(Inspect, SmolLM2GgufMatchesGgufPyMetadata) {
  const std::string model = testing::default_model();
  ASSERT_FALSE(model.empty()) << "default model missing: run tools/fetch_model.sh";
  json j = run_json("inspect --json " + model);
  std::string out;
  const std::string script =
      "import gguf,json,sys\n"
      "r=gguf.GGUFReader(sys.argv[1])\n"
      "f=lambda k: r.fields[k].contents()\n"
      "print(json.dumps({k: f('llama.'+k) for k in ['embedding_length','block_count',"
      "'feed_forward_length','attention.head_count','attention.head_count_kv','context_length',"
      "'rope.freq_base','vocab_size']} | {'n_tensors': len(r.tensors),"
      " 'params': int(sum(int(t.n_elements) for t in r.tensors))}))\n";
  const std::string dir = testing::make_temp_dir();
  std::ofstream(dir + "/meta.py") << script;
  ASSERT_EQ(testing::run_command(testing::python() + " " + dir + "/meta.py " + model, &out), 0) << out;
  json ref = json::parse(out);
  EXPECT_EQ(j["hidden_size"], ref["embedding_length"]);
  EXPECT_EQ(j["num_layers"], ref["block_count"]);
  EXPECT_EQ(j["intermediate_size"], ref["feed_forward_length"]);
  EXPECT_EQ(j["num_heads"], ref["attention.head_count"]);
  EXPECT_EQ(j["num_kv_heads"], ref["attention.head_count_kv"]);
  EXPECT_EQ(j["max_position_embeddings"], ref["context_length"]);
  EXPECT_EQ(j["vocab_size"], ref["vocab_size"]);
  EXPECT_NEAR(j["rope"]["theta"].get<double>(), ref["rope.freq_base"].get<double>(), 1e-3);
  EXPECT_EQ(j["tensor_count"], ref["n_tensors"]);
  EXPECT_EQ(j["parameters"], ref["params"]);
  // SmolLM2-135M's published geometry.
  EXPECT_EQ(j["hidden_size"], 576);
  EXPECT_EQ(j["num_layers"], 30);
  EXPECT_EQ(j["head_dim"], 64);
  EXPECT_EQ(j["tie_word_embeddings"], true);
  EXPECT_EQ(j["dtypes"]["q4_1"]["tensors"], 210);
}

TEST(Inspect, MissingAndCorruptModelsFailWithMessage) {
  std::string out;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " inspect /nonexistent/model", &out), 1);
  EXPECT_NE(out.find("does not exist"), std::string::npos) << out;
  const std::string dir = testing::make_temp_dir();
  std::ofstream(dir + "/bad.gguf") << "GGUF\x03garbage";
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " inspect " + dir + "/bad.gguf", &out), 1);
  EXPECT_NE(out.find("bad.gguf"), std::string::npos) << out;
}

TEST(Verify, ManifestRoundTripAndCorruptionDetected) {
  const std::string dir = testing::make_temp_dir() + "/m";
  fs::copy(testing::fixture_dir("tiny-llama32"), dir);
  for (auto& e : fs::directory_iterator(dir)) fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  std::string out;
  ASSERT_EQ(testing::run_command(testing::lancet_binary() + " verify --write-manifest " + dir, &out), 0) << out;
  ASSERT_TRUE(fs::exists(dir + "/SHA256SUMS"));
  ASSERT_EQ(testing::run_command(testing::lancet_binary() + " verify " + dir, &out), 0) << out;
  EXPECT_NE(out.find("matches manifest"), std::string::npos);
  // Flip one byte deep in the weights: the header still parses, the hash does not match.
  {
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(-100, std::ios::end);
    char c = 0;
    f.read(&c, 1);
    f.seekp(-100, std::ios::end);
    c ^= 0x5a;
    f.write(&c, 1);
  }
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " verify " + dir, &out), 1) << out;
  EXPECT_NE(out.find("FAIL  model.safetensors"), std::string::npos) << out;
  // A missing tensor fails the structure check.
  const std::string cfgdir = testing::make_temp_dir() + "/c";
  fs::copy(testing::fixture_dir("tiny-gqa8"), cfgdir);
  for (auto& e : fs::directory_iterator(cfgdir)) fs::permissions(e.path(), fs::perms::owner_write, fs::perm_options::add);
  json cfg = json::parse(std::ifstream(cfgdir + "/config.json"));
  cfg["num_hidden_layers"] = 3;  // the file has 2 layers
  std::ofstream(cfgdir + "/config.json") << cfg.dump();
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " verify " + cfgdir, &out), 1) << out;
  EXPECT_NE(out.find("layers.2"), std::string::npos) << out;
}

TEST(Verify, DefaultModelMatchesTheWheelRecord) {
  const std::string model = testing::default_model();
  ASSERT_FALSE(model.empty());
  ASSERT_TRUE(fs::exists(model + ".sha256"));
  std::string out;
  EXPECT_EQ(testing::run_command(testing::lancet_binary() + " verify " + model, &out), 0) << out;
  EXPECT_NE(out.find("matches manifest"), std::string::npos) << out;
}

}  // namespace
}  // namespace lancet
