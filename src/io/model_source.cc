// open_model_source: picks the loader from what the path is.
#include "io/model_source.h"

#include <filesystem>

#include "io/gguf_source.h"
#include "io/hf_source.h"

namespace fs = std::filesystem;

namespace lancet {

StatusOr<std::unique_ptr<ModelSource>> open_model_source(const std::string& path) {
  std::error_code ec;
  if (!fs::exists(path, ec)) return NotFound("model path " + path + " does not exist");
  if (fs::is_regular_file(path, ec)) {
    // GGUF by magic, whatever the file is called.
    FILE* f = std::fopen(path.c_str(), "rb");
    if (!f) return IoError("cannot open " + path);
    char magic[4] = {0, 0, 0, 0};
    const size_t n = std::fread(magic, 1, 4, f);
    std::fclose(f);
    if (n == 4 && magic[0] == 'G' && magic[1] == 'G' && magic[2] == 'U' && magic[3] == 'F')
      return open_gguf_source(path);
    const std::string ext = fs::path(path).extension().string();
    if (ext == ".gguf") return InvalidArgument(path + ": not a GGUF file (bad magic)");
  }
  return open_hf_source(path);
}

}  // namespace lancet
