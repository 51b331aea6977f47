// Checkpoint folder helpers (checkpoint_files.h).
#include "cli/checkpoint_files.h"

#include <cstdio>
#include <fstream>

namespace lancet::cli {

namespace fs = std::filesystem;

Status write_json_file(const fs::path& path, const nlohmann::ordered_json& j) {
  std::ofstream out(path);
  out << j.dump(2) << "\n";
  out.close();
  if (!out) return IoError("cannot write " + path.string());
  return OkStatus();
}

Status copy_checkpoint_side_files(const std::vector<fs::path>& dirs, const fs::path& out_dir) {
  static const char* kFiles[] = {"tokenizer.json", "tokenizer_config.json", "special_tokens_map.json",
                                 "tokenizer.model", "chat_template.jinja", "generation_config.json"};
  for (const char* name : kFiles) {
    if (fs::exists(out_dir / name)) continue;  // written by the command, or already copied
    for (const fs::path& d : dirs) {
      std::error_code ec;
      if (!fs::is_regular_file(d / name, ec)) continue;
      fs::copy_file(d / name, out_dir / name, fs::copy_options::overwrite_existing, ec);
      if (ec) return IoError("cannot copy " + (d / name).string() + ": " + ec.message());
      // Keep the copy writable even when the input is a read-only folder.
      fs::permissions(out_dir / name, fs::perms::owner_write, fs::perm_options::add, ec);
      break;
    }
  }
  return OkStatus();
}

std::string shard_file_name(size_t index, size_t count) {
  if (count == 1) return "model.safetensors";
  char buf[64];
  std::snprintf(buf, sizeof(buf), "model-%05zu-of-%05zu.safetensors", index + 1, count);
  return buf;
}

}  // namespace lancet::cli
