// ModelSource: one interface over HF safetensors directories and GGUF files, so the model
// code never knows the file format. Tensors are exposed under HF names
// ("model.layers.3.self_attn.q_proj.weight"), row-major, viewing the mapped file.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "core/tensor.h"
#include "io/model_config.h"

namespace lancet {

// Tokenizer data as stored in the model files; the tokenizer library parses it.
struct TokenizerSource {
  std::string tokenizer_json_path;  // HF tokenizer.json (empty if none)
  std::string chat_template;        // from tokenizer_config.json or GGUF
  std::string bos_token;            // text of bos/eos from tokenizer_config.json
  std::string eos_token;
  bool from_gguf = false;           // GGUF tokenizer.ggml.* keys: read them through gguf()
};

class GgufFile;

class ModelSource {
 public:
  virtual ~ModelSource() = default;
  virtual const std::string& path() const = 0;
  virtual const char* format() const = 0;  // "safetensors" or "gguf"
  virtual const ModelConfig& config() const = 0;
  virtual const TokenizerSource& tokenizer() const = 0;
  // All tensors, sorted by HF name.
  virtual const std::map<std::string, TensorView>& tensors() const = 0;
  const TensorView* find(const std::string& name) const {
    auto it = tensors().find(name);
    return it == tensors().end() ? nullptr : &it->second;
  }
  // The underlying GGUF file when format() == "gguf", else null.
  virtual const GgufFile* gguf() const { return nullptr; }
};

// Opens a model: a directory with config.json (+ safetensors), a config.json alone (no
// weights: tensors() is empty), a .safetensors file next to a config.json, or a .gguf file.
StatusOr<std::unique_ptr<ModelSource>> open_model_source(const std::string& path);

}  // namespace lancet
