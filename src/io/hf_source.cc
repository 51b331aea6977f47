// HfSource: resolves the checkpoint layout, parses the JSON side files, maps the safetensors
// and checks the tensor table against the config.
#include "io/hf_source.h"

#include <filesystem>

#include "core/logging.h"
#include "io/hf_config.h"
#include "io/llama_tensors.h"
#include "io/safetensors.h"
#include "io/text_file.h"

namespace lancet {
namespace {

namespace fs = std::filesystem;

class HfSource final : public ModelSource {
 public:
  const std::string& path() const override { return path_; }
  const char* format() const override { return "safetensors"; }
  const ModelConfig& config() const override { return config_; }
  const TokenizerSource& tokenizer() const override { return tokenizer_; }
  const std::map<std::string, TensorView>& tensors() const override { return tensors_; }

  std::string path_;
  ModelConfig config_;
  TokenizerSource tokenizer_;
  std::unique_ptr<SafetensorsCheckpoint> checkpoint_;  // null for a config-only source
  std::map<std::string, TensorView> tensors_;          // views into checkpoint_'s maps
};

bool exists_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// Reads an optional side file; absence is fine, any other failure is not.
StatusOr<std::optional<std::string>> read_optional(const fs::path& p) {
  if (!exists_file(p)) return std::optional<std::string>();
  ASSIGN_OR_RETURN(std::string text, read_text_file(p.string()));
  return std::optional<std::string>(std::move(text));
}

Status load_side_files(const fs::path& dir, HfSource* src) {
  ASSIGN_OR_RETURN(auto gen, read_optional(dir / "generation_config.json"));
  if (gen) {
    RETURN_IF_ERROR(
        apply_generation_config(*gen, (dir / "generation_config.json").string(), &src->config_));
  }
  ASSIGN_OR_RETURN(auto tok_cfg, read_optional(dir / "tokenizer_config.json"));
  if (tok_cfg) {
    RETURN_IF_ERROR(
        parse_tokenizer_config(*tok_cfg, (dir / "tokenizer_config.json").string(), &src->tokenizer_));
  }
  // Newer transformers save the template as its own file, which then takes precedence.
  ASSIGN_OR_RETURN(auto jinja, read_optional(dir / "chat_template.jinja"));
  if (jinja) src->tokenizer_.chat_template = *jinja;
  if (exists_file(dir / "tokenizer.json")) {
    src->tokenizer_.tokenizer_json_path = (dir / "tokenizer.json").string();
  }
  return OkStatus();
}

// Older FP8 checkpoints store KV scales on the projections; expose them under one name.
Status add_tensors(const SafetensorsCheckpoint& ck, std::map<std::string, TensorView>* out) {
  static const std::pair<const char*, const char*> kAliases[] = {
      {".self_attn.k_proj.k_scale", ".self_attn.k_scale"},
      {".self_attn.v_proj.v_scale", ".self_attn.v_scale"},
      {".self_attn.k_proj.output_scale", ".self_attn.k_scale"},
      {".self_attn.v_proj.output_scale", ".self_attn.v_scale"},
  };
  for (const auto& [name, view] : ck.tensors()) {
    std::string key = name;
    for (const auto& [from, to] : kAliases) {
      const std::string f = from;
      if (key.size() > f.size() && key.compare(key.size() - f.size(), f.size(), f) == 0) {
        key = key.substr(0, key.size() - f.size()) + to;
        break;
      }
    }
    if (!out->emplace(key, view).second) {
      return InvalidArgument(ck.file_of(name) + ": tensor '" + name + "' duplicates '" + key +
                             "'");
    }
  }
  return OkStatus();
}

bool ends_with(const std::string& s, const std::string& suffix) {
  return s.size() >= suffix.size() && s.compare(s.size() - suffix.size(), suffix.size(), suffix) == 0;
}

}  // namespace

StatusOr<std::unique_ptr<ModelSource>> open_hf_source(const std::string& path) {
  std::error_code ec;
  const fs::path p(path);
  fs::path dir, config_path, weights;  // weights: a .safetensors or an index.json ("" = none)
  if (fs::is_directory(p, ec)) {
    dir = p;
    config_path = dir / "config.json";
    if (exists_file(dir / "model.safetensors.index.json")) {
      weights = dir / "model.safetensors.index.json";
    } else if (exists_file(dir / "model.safetensors")) {
      weights = dir / "model.safetensors";
    } else {
      return NotFound(path + ": no model.safetensors or model.safetensors.index.json (pass "
                      "config.json itself to load the configuration without weights)");
    }
  } else if (exists_file(p)) {
    dir = p.parent_path();
    if (dir.empty()) dir = ".";
    if (ends_with(path, ".safetensors")) {
      weights = p;
      config_path = dir / "config.json";
    } else if (ends_with(path, ".index.json")) {
      weights = p;
      config_path = dir / "config.json";
    } else if (ends_with(path, ".json")) {
      config_path = p;
    } else {
      return InvalidArgument(path + ": expected a model directory, config.json or .safetensors");
    }
  } else {
    return NotFound(path + ": no such file or directory");
  }
  if (!exists_file(config_path)) {
    return NotFound(config_path.string() + ": no config.json next to the weights");
  }

  auto src = std::make_unique<HfSource>();
  src->path_ = path;
  ASSIGN_OR_RETURN(src->config_, load_hf_config(config_path.string()));
  RETURN_IF_ERROR(load_side_files(dir, src.get()));

  if (!weights.empty()) {
    if (ends_with(weights.string(), ".json")) {
      ASSIGN_OR_RETURN(src->checkpoint_, SafetensorsCheckpoint::open_index(weights.string()));
    } else {
      ASSIGN_OR_RETURN(src->checkpoint_, SafetensorsCheckpoint::open_file(weights.string()));
    }
    RETURN_IF_ERROR(add_tensors(*src->checkpoint_, &src->tensors_));
    for (const auto& [name, view] : src->tensors_) {
      if (ends_with(name, ".self_attn.k_scale") || ends_with(name, ".self_attn.v_scale")) {
        src->config_.quant.kv_cache_fp8 = true;
        break;
      }
    }
  }
  Status st = src->config_.validate();
  if (!st.ok()) return st.with_context(path);
  if (!src->tensors_.empty()) {
    st = check_llama_tensors(src->config_, src->tensors_);
    if (!st.ok()) return st.with_context(weights.string());
  }
  LOG_DEBUG("opened " << path << ": " << src->tensors_.size() << " tensors");
  return std::unique_ptr<ModelSource>(std::move(src));
}

}  // namespace lancet
