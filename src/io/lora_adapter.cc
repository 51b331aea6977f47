// LoraAdapter: adapter_config.json checked for what changes the math, the factor pairs matched to
// the base model's weight names, and W + scale * B . A in f32.
#include "io/lora_adapter.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <filesystem>
#include <vector>

#include "io/text_file.h"

namespace lancet {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kPrefix = "base_model.model.";
constexpr const char* kModules[] = {"self_attn.q_proj", "self_attn.k_proj", "self_attn.v_proj", "self_attn.o_proj",
                                    "mlp.gate_proj",    "mlp.up_proj",      "mlp.down_proj"};

bool ends_with(const std::string& s, const std::string& tail) {
  return s.size() >= tail.size() && s.compare(s.size() - tail.size(), tail.size(), tail) == 0;
}

// "model.layers.N.<module>.weight" for one of the decoder's linear layers.
bool is_linear_weight(const std::string& name) {
  if (name.rfind("model.layers.", 0) != 0) return false;
  for (const char* m : kModules)
    if (ends_with(name, std::string(".") + m + ".weight")) return true;
  return false;
}

// A config key that changes the adapted weights in a way this reader does not implement: set to
// anything but its default is an error naming it.
Status refuse_if_set(const json& cfg, const char* key, const std::string& why) {
  const auto it = cfg.find(key);
  if (it == cfg.end() || it->is_null()) return OkStatus();
  const bool unset = (it->is_boolean() && !it->get<bool>()) || (it->is_object() && it->empty()) ||
                     (it->is_array() && it->empty()) || (it->is_string() && it->get<std::string>() == "none");
  if (unset) return OkStatus();
  return Unimplemented(std::string("LoRA adapter: '") + key + "' is set (" + it->dump() + "): " + why);
}

StatusOr<std::vector<float>> as_f32(const TensorView& t, const std::string& name) {
  std::vector<float> v(static_cast<size_t>(t.numel()));
  if (!convert_to_f32(t.dtype, t.data, v.data(), v.size()))
    return InvalidArgument("LoRA adapter: tensor " + name + " is " + dtype_name(t.dtype) + "; F32, F16 or BF16 expected");
  return v;
}

}  // namespace

StatusOr<std::unique_ptr<LoraAdapter>> LoraAdapter::open(const std::string& path) {
  std::error_code ec;
  const fs::path dir = fs::is_directory(path, ec) ? fs::path(path) : fs::path(path).parent_path();
  ASSIGN_OR_RETURN(std::string text, read_text_file((dir / "adapter_config.json").string()));
  json cfg = json::parse(text, nullptr, false);
  if (!cfg.is_object()) return InvalidArgument((dir / "adapter_config.json").string() + ": not a JSON object");
  const std::string type = cfg.value("peft_type", std::string("LORA"));
  if (type != "LORA") return Unimplemented("adapter " + dir.string() + ": peft_type " + type + "; only LORA is read");
  RETURN_IF_ERROR(refuse_if_set(cfg, "use_dora", "DoRA rescales the weight's columns"));
  RETURN_IF_ERROR(refuse_if_set(cfg, "fan_in_fan_out", "Llama's linear layers are stored [out, in]"));
  RETURN_IF_ERROR(refuse_if_set(cfg, "bias", "trained biases have nowhere to go in a Llama checkpoint"));
  RETURN_IF_ERROR(refuse_if_set(cfg, "modules_to_save", "fully trained modules are not merged"));
  RETURN_IF_ERROR(refuse_if_set(cfg, "rank_pattern", "per-module ranks"));
  RETURN_IF_ERROR(refuse_if_set(cfg, "alpha_pattern", "per-module alphas"));
  RETURN_IF_ERROR(refuse_if_set(cfg, "layers_to_transform", "a layer subset given in the config"));

  auto a = std::unique_ptr<LoraAdapter>(new LoraAdapter());
  const auto r = cfg.find("r");
  const auto alpha = cfg.find("lora_alpha");
  if (r == cfg.end() || !r->is_number_integer() || r->get<int64_t>() < 1)
    return InvalidArgument("adapter_config.json: 'r' must be a positive integer");
  if (alpha == cfg.end() || !alpha->is_number() || !(alpha->get<double>() > 0))
    return InvalidArgument("adapter_config.json: 'lora_alpha' must be a positive number");
  a->rank_ = r->get<int64_t>();
  a->alpha_ = alpha->get<double>();
  const bool rslora = cfg.value("use_rslora", false);
  a->scale_ = rslora ? a->alpha_ / std::sqrt(static_cast<double>(a->rank_)) : a->alpha_ / static_cast<double>(a->rank_);

  const fs::path weights = dir / "adapter_model.safetensors";
  if (!fs::exists(weights, ec)) {
    if (fs::exists(dir / "adapter_model.bin", ec))
      return Unimplemented(dir.string() + ": adapter_model.bin (pickle) is not read; save the adapter with "
                           "safe_serialization=True");
    return NotFound(weights.string() + " does not exist");
  }
  ASSIGN_OR_RETURN(a->file_, SafetensorsFile::open(weights.string()));
  for (const auto& [key, t] : a->file_->tensors()) {
    const bool is_a = ends_with(key, ".lora_A.weight"), is_b = ends_with(key, ".lora_B.weight");
    if (!is_a && !is_b)
      return Unimplemented("LoRA adapter: tensor " + key + " is not a lora_A/lora_B weight of a linear layer");
    if (key.rfind(kPrefix, 0) != 0) return InvalidArgument("LoRA adapter: tensor " + key + " lacks the base_model.model. prefix");
    const std::string module = key.substr(std::string(kPrefix).size(),
                                          key.size() - std::string(kPrefix).size() - std::string(".lora_A.weight").size());
    const std::string target = module + ".weight";
    if (!is_linear_weight(target))
      return Unimplemented("LoRA adapter: tensor " + key + " adapts " + module +
                           ", not one of the decoder's q/k/v/o/gate/up/down projections");
    if (t.shape.size() != 2) return InvalidArgument("LoRA adapter: tensor " + key + " is not 2-D");
    const int64_t rank_dim = is_a ? t.shape[0] : t.shape[1];
    if (rank_dim != a->rank_)
      return InvalidArgument("LoRA adapter: tensor " + key + " " + shape_to_string(t.shape) + " has rank " +
                             std::to_string(rank_dim) + ", adapter_config.json says r = " + std::to_string(a->rank_));
    LoraFactors& f = a->factors_[target];
    (is_a ? f.a : f.b) = &t;
  }
  for (const auto& [target, f] : a->factors_)
    if (!f.a || !f.b) return InvalidArgument("LoRA adapter: " + target + " has lora_" + (f.a ? "A" : "B") + " only");
  if (a->factors_.empty()) return InvalidArgument(weights.string() + ": no LoRA factors");
  return a;
}

StatusOr<bool> LoraAdapter::factors_f32(const std::string& name, int64_t out, int64_t in, std::vector<float>* a,
                                        std::vector<float>* b) const {
  const auto it = factors_.find(name);
  if (it == factors_.end()) return false;
  const TensorView& ta = *it->second.a;
  const TensorView& tb = *it->second.b;
  if (ta.shape[1] != in || tb.shape[0] != out)
    return InvalidArgument("LoRA adapter: factors of " + name + " are A " + shape_to_string(ta.shape) + " and B " +
                           shape_to_string(tb.shape) + "; the weight is [" + std::to_string(out) + ", " +
                           std::to_string(in) + "]");
  ASSIGN_OR_RETURN(*a, as_f32(ta, name + " lora_A"));
  ASSIGN_OR_RETURN(*b, as_f32(tb, name + " lora_B"));
  return true;
}

Status LoraAdapter::apply(const std::string& name, float* w, int64_t out, int64_t in, ThreadPool* pool) const {
  std::vector<float> av, bv;
  ASSIGN_OR_RETURN(const bool adapted, factors_f32(name, out, in, &av, &bv));
  if (!adapted) return OkStatus();
  const int64_t r = rank_;
  // Row o of the delta: sum_j B[o, j] A[j, :], accumulated in f64, then scaled once.
  auto rows = [&](int64_t begin, int64_t end, int) {
    std::vector<double> row(static_cast<size_t>(in));
    for (int64_t o = begin; o < end; ++o) {
      std::fill(row.begin(), row.end(), 0.0);
      for (int64_t j = 0; j < r; ++j) {
        const double bj = bv[static_cast<size_t>(o * r + j)];
        const float* aj = av.data() + j * in;
        for (int64_t i = 0; i < in; ++i) row[static_cast<size_t>(i)] += bj * aj[i];
      }
      float* wo = w + o * in;
      for (int64_t i = 0; i < in; ++i) wo[i] = static_cast<float>(wo[i] + scale_ * row[static_cast<size_t>(i)]);
    }
  };
  if (pool) pool->parallel_for(out, rows, 16);
  else rows(0, out, 0);
  return OkStatus();
}

}  // namespace lancet
