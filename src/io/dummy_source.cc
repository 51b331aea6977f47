// DummySource: owns one buffer per tensor, filled with seeded random bf16 values (or FP8 codes
// with per-channel scales for the layers' linear weights). Values come from a counter-based
// generator (a hash of seed, tensor and index), so filling is parallel and the same seed gives
// the same weights on any thread count: an 8B model fills in seconds.
#include "io/dummy_source.h"

#include <cmath>
#include <cstring>
#include <filesystem>
#include <vector>

#include "core/dtype.h"
#include "core/thread_pool.h"

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

  // Uniform on [-a, a] with a = 0.02 * sqrt(3): standard deviation 0.02, like the usual
  // initialisation scale, without the cost of a normal sampler.
  void add(const std::string& name, std::vector<int64_t> shape, bool ones, uint64_t seed) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    // Left uninitialised (no zero pass): the parallel fill below is the first touch, so a
    // 70B-shape model's 141 GB are faulted in by every core instead of one.
    std::unique_ptr<uint16_t[]> data(new uint16_t[static_cast<size_t>(n)]);
    uint16_t* out = data.get();
    if (ones) {
      std::fill(out, out + n, f32_to_bf16(1.0f));
    } else {
      const uint64_t key = mix(seed ^ mix(tensors_.size() + 1));
      const float a = 0.02f * std::sqrt(3.0f);
      default_thread_pool().parallel_for(n, [&](int64_t b, int64_t e, int) {
        for (int64_t i = b; i < e; ++i) {
          const double u = static_cast<double>(mix(key + static_cast<uint64_t>(i)) >> 11) * 0x1.0p-53;
          out[i] = f32_to_bf16(static_cast<float>((2.0 * u - 1.0) * a));
        }
      }, 1 << 16);
    }
    TensorView t;
    t.dtype = DType::kBF16;
    t.shape = std::move(shape);
    t.data = out;
    t.nbytes = static_cast<size_t>(n) * 2;
    storage_.push_back(std::move(data));
    tensors_[name] = t;
  }

  // An FP8 E4M3 weight of the same distribution (uniform on [-a, a]) with one scale per row,
  // a / 448, so the codes span E4M3's whole range; plus "<module>.weight_scale" [rows, 1].
  void add_fp8(const std::string& name, int64_t rows, int64_t cols, uint64_t seed) {
    const int64_t n = rows * cols;
    std::unique_ptr<uint8_t[]> codes(new uint8_t[static_cast<size_t>(n)]);
    uint8_t* out = codes.get();
    const uint64_t key = mix(seed ^ mix(tensors_.size() + 1));
    default_thread_pool().parallel_for(n, [&](int64_t b, int64_t e, int) {
      for (int64_t i = b; i < e; ++i) {
        const double u = static_cast<double>(mix(key + static_cast<uint64_t>(i)) >> 11) * 0x1.0p-53;
        out[i] = f32_to_fp8e4m3(static_cast<float>((2.0 * u - 1.0) * 448.0));
      }
    }, 1 << 16);
    TensorView t;
    t.dtype = DType::kF8E4M3;
    t.shape = {rows, cols};
    t.data = out;
    t.nbytes = static_cast<size_t>(n);
    bytes_.push_back(std::move(codes));
    tensors_[name] = t;
    std::unique_ptr<uint8_t[]> scale(new uint8_t[static_cast<size_t>(rows) * sizeof(float)]);
    const float s = 0.02f * std::sqrt(3.0f) / 448.0f;
    for (int64_t r = 0; r < rows; ++r) std::memcpy(scale.get() + r * sizeof(float), &s, sizeof(float));
    TensorView st;
    st.dtype = DType::kF32;
    st.shape = {rows, 1};
    st.data = scale.get();
    st.nbytes = static_cast<size_t>(rows) * sizeof(float);
    bytes_.push_back(std::move(scale));
    const std::string base = name.substr(0, name.size() - std::string("weight").size());
    tensors_[base + "weight_scale"] = st;
  }

  static uint64_t mix(uint64_t z) {
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }

  std::string path_;
  ModelConfig config_;
  TokenizerSource tokenizer_;
  std::map<std::string, TensorView> tensors_;
  std::vector<std::unique_ptr<uint16_t[]>> storage_;
  std::vector<std::unique_ptr<uint8_t[]>> bytes_;  // FP8 codes and scales
};

}  // namespace

StatusOr<std::unique_ptr<ModelSource>> open_dummy_source(const std::string& config_path,
                                                        const DummySourceOptions& opts) {
  const uint64_t seed = opts.seed;
  std::string cfg_path = config_path;
  if (std::filesystem::is_directory(cfg_path)) cfg_path += "/config.json";
  ASSIGN_OR_RETURN(std::unique_ptr<ModelSource> cfg_src, open_hf_source(cfg_path));
  auto src = std::make_unique<DummySource>();
  src->path_ = config_path;
  src->config_ = cfg_src->config();
  src->config_.dtype = DType::kBF16;
  src->config_.quant = QuantConfig{};
  if (opts.fp8_linear) {
    src->config_.quant.method = QuantMethod::kCompressedTensors;
    src->config_.quant.weight_granularity = ScaleGranularity::kPerChannel;
  }
  src->tokenizer_ = cfg_src->tokenizer();
  const ModelConfig& c = src->config_;
  src->add("model.embed_tokens.weight", {c.vocab_size, c.hidden_size}, false, seed);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    for (const LlamaLinear& lin : llama_linears(c, l)) {
      if (opts.fp8_linear) src->add_fp8(lin.prefix + ".weight", lin.rows, lin.cols, seed);
      else src->add(lin.prefix + ".weight", {lin.rows, lin.cols}, false, seed);
    }
    src->add(layer_tensor(l, "input_layernorm.weight"), {c.hidden_size}, true, seed);
    src->add(layer_tensor(l, "post_attention_layernorm.weight"), {c.hidden_size}, true, seed);
  }
  src->add("model.norm.weight", {c.hidden_size}, true, seed);
  if (!c.tie_word_embeddings) src->add("lm_head.weight", {c.vocab_size, c.hidden_size}, false, seed);
  RETURN_IF_ERROR(check_llama_tensors(src->config_, src->tensors_));
  return std::unique_ptr<ModelSource>(std::move(src));
}

}  // namespace lancet
