// Writing a Hugging Face checkpoint folder, shared by the commands that make one (quantize,
// merge-lora): JSON files, the side files a model folder carries, and shard names.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "core/status.h"

namespace lancet::cli {

Status write_json_file(const std::filesystem::path& path, const nlohmann::ordered_json& j);
// Copies the tokenizer and generation files (tokenizer.json, tokenizer_config.json,
// special_tokens_map.json, tokenizer.model, chat_template.jinja, generation_config.json) that
// out_dir lacks from the first of `dirs` that has each, kept writable.
Status copy_checkpoint_side_files(const std::vector<std::filesystem::path>& dirs, const std::filesystem::path& out_dir);
// "model.safetensors" for one shard, else "model-00002-of-00005.safetensors".
std::string shard_file_name(size_t index, size_t count);

}  // namespace lancet::cli
