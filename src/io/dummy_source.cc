// DummySource: owns one buffer per tensor, filled with seeded random bf16 values.
#include "io/dummy_source.h"

#include <filesystem>
#include <random>
#include <vector>

#include "io/hf_source.h"
#include "io/llama_tensors.h"

namespace lancet {
namespace {

class DummySource : public ModelSource {
 public:
  const std::string& path() const override { return path_; }
  const char* format() const override { return "dummy"; }
  const ModelConfig& config() const override { return config_; }
  const TokenizerSource& tokenizer() const override { return tokenizer_; }
  const std::map<std::string, TensorView>& tensors() const override { return tensors_; }

  void add(const std::string& name, std::vector<int64_t> shape, bool ones, std::mt19937_64& rng) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    std::vector<uint16_t> data(static_cast<size_t>(n));
    if (ones) {
      std::fill(data.begin(), data.end(), f32_to_bf16(1.0f));
    } else {
      std::normal_distribution<float> dist(0.0f, 0.02f);
      for (auto& v : data) v = f32_to_bf16(dist(rng));
    }
    TensorView t;
    t.dtype = DType::kBF16;
    t.shape = std::move(shape);
    t.data = data.data();
    t.nbytes = data.size() * 2;
    storage_.push_back(std::move(data));
    t.data = storage_.back().data();
    tensors_[name] = t;
  }

  std::string path_;
  ModelConfig config_;
  TokenizerSource tokenizer_;
  std::map<std::string, TensorView> tensors_;
  std::vector<std::vector<uint16_t>> storage_;
};

}  // namespace

StatusOr<std::unique_ptr<ModelSource>> open_dummy_source(const std::string& config_path, uint64_t seed) {
  std::string cfg_path = config_path;
  if (std::filesystem::is_directory(cfg_path)) cfg_path += "/config.json";
  ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> cfg_src, open_hf_source(cfg_path));
  auto src = std::make_unique<DummySource>();
  src->path_ = config_path;
  src->config_ = cfg_src->config();
  src->config_.dtype = DType::kBF16;
  src->config_.quant = QuantConfig{};
  src->tokenizer_ = cfg_src->tokenizer();
  const ModelConfig& c = src->config_;
  std::mt19937_64 rng(seed);
  src->add("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, false, rng);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (const LlamaLinear& lin : llama_linears(c, l))
      src->add(lin.prefix + ".weight", {lin.rows, lin.cols}, false, rng);
    src->add(layer_tensor(l, "input_layernorm.weight"), {c.hidden_size}, true, rng);
    src->add(layer_tensor(l, "post_attention_layernorm.weight"), {c.hidden_size}, true, rng);
  }
  src->add("model.norm.weight", {c.hidden_size}, true, rng);
  if (!c.tie_word_embeddings) src->add("lm_head.weight", {c.vocab_size, c.hidden_size}, false, rng);
  RETURN_IF_ERROR(check_llama_tensors(src->config_, src->tensors_));
  return std::unique_ptr<ModelSource>(std::move(src));
}

}  // namespace lancet
