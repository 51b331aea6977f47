// `lancet verify PATH`: file integrity and completeness. Hashes every model file with SHA-256
// and compares with a manifest when one exists (SHA256SUMS in the model directory, in
// `sha256sum` format, or PATH.sha256 next to a single file); checks that every tensor the
// architecture needs is present with the right shape; for sharded safetensors, the loader has
// already checked every tensor of the index against its shard. `--write-manifest` records the
// hashes for later runs.
#include <CLI/CLI.hpp>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include "cli/commands.h"
#include "cli/parse_args.h"
#include "core/sha256.h"
#include "io/llama_tensors.h"
#include "io/model_source.h"

namespace fs = std::filesystem;

namespace lancet::cli {
namespace {

// Files that make up the model at `path`.
std::vector<fs::path> model_files(const fs::path& path) {
  std::vector<fs::path> files;
  if (fs::is_directory(path)) {
    for (const auto& e : fs::directory_iterator(path)) {
      if (!e.is_regular_file()) continue;
      const std::string n = e.path().filename().string();
      const std::string ext = e.path().extension().string();
      if (ext == ".safetensors" || ext == ".gguf" || ext == ".json" || n == "tokenizer.model")
        files.push_back(e.path());
    }
    std::sort(files.begin(), files.end());
  } else {
    files.push_back(path);
  }
  return files;
}

// Parses `sha256sum` output: "<64 hex>  <name>" per line.
std::map<std::string, std::string> read_manifest(const fs::path& manifest) {
  std::map<std::string, std::string> m;
  std::ifstream in(manifest);
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() < 66) continue;
    std::string hash = line.substr(0, 64);
    std::string name = line.substr(64);
    while (!name.empty() && (name[0] == ' ' || name[0] == '*')) name.erase(0, 1);
    m[fs::path(name).filename().string()] = hash;
  }
  return m;
}

}  // namespace

int cmd_verify(int argc, char** argv) {
  CLI::App app{"Check a model's files (SHA-256) and tensors", "lancet verify"};
  std::string path_arg;
  bool write_manifest = false;
  app.add_option("path", path_arg, "HF model directory, .safetensors or .gguf")->required();
  app.add_flag("--write-manifest", write_manifest,
               "write SHA256SUMS (directory) or PATH.sha256 (file) with the hashes");
  if (const int parsed = parse_args(app, argc, argv); parsed >= 0) return parsed;
  const fs::path path(path_arg);
  if (!fs::exists(path)) {
    std::fprintf(stderr, "lancet verify: %s does not exist\n", path_arg.c_str());
    return 1;
  }
  int failures = 0;

  // 1. Structure: the loader validates headers, offsets and the shard index; then the
  //    architecture's tensor list.
  auto src = open_model_source(path_arg);
  if (!src.ok()) {
    std::printf("FAIL  load: %s\n", src.status().to_string().c_str());
    ++failures;
  } else {
    std::printf("ok    load: %s, %zu tensors\n", (*src)->format(), (*src)->tensors().size());
    Status st = check_llama_tensors((*src)->config(), (*src)->tensors());
    if (st.ok()) {
      std::printf("ok    tensors: every tensor of the architecture present with its shape\n");
    } else {
      std::printf("FAIL  tensors: %s\n", st.message().c_str());
      ++failures;
    }
  }

  // 2. Integrity: hashes against the manifest, if any.
  const bool is_dir = fs::is_directory(path);
  const fs::path manifest = is_dir ? path / "SHA256SUMS" : fs::path(path_arg + ".sha256");
  std::map<std::string, std::string> expected;
  if (fs::exists(manifest)) expected = read_manifest(manifest);
  std::ostringstream out_manifest;
  for (const fs::path& f : model_files(path)) {
    auto digest = sha256_file(f.string());
    if (!digest.ok()) {
      std::printf("FAIL  %s: %s\n", f.filename().c_str(), digest.status().message().c_str());
      ++failures;
      continue;
    }
    const std::string hex = to_hex(*digest);
    out_manifest << hex << "  " << f.filename().string() << "\n";
    auto it = expected.find(f.filename().string());
    if (it == expected.end()) {
      std::printf("hash  %s  %s\n", hex.c_str(), f.filename().c_str());
    } else if (it->second == hex) {
      std::printf("ok    %s  %s (matches manifest)\n", hex.c_str(), f.filename().c_str());
    } else {
      std::printf("FAIL  %s: sha256 %s, manifest says %s\n", f.filename().c_str(), hex.c_str(),
                  it->second.c_str());
      ++failures;
    }
  }
  for (const auto& [name, hash] : expected) {
    if (!fs::exists(is_dir ? path / name : path.parent_path() / name)) {
      std::printf("FAIL  %s: listed in the manifest but missing\n", name.c_str());
      ++failures;
    }
  }
  if (expected.empty()) std::printf("note  no manifest (%s): hashes printed, not compared\n", manifest.c_str());
  if (write_manifest && failures == 0) {
    std::ofstream m(manifest);
    m << out_manifest.str();
    std::printf("wrote %s\n", manifest.c_str());
  }
  std::printf("%s\n", failures ? "verify: FAILED" : "verify: ok");
  return failures ? 1 : 0;
}

}  // namespace lancet::cli
