// Test path helpers (compiled into every test binary).
#include "test_paths.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <mutex>
#include <vector>

namespace fs = std::filesystem;

namespace lancet::testing {

std::string shared_dir() {
  if (const char* e = std::getenv("LANCET_SHARED_DIR")) return e;
  return LANCET_SHARED_DIR;
}
std::string fixture_dir(const std::string& name) { return shared_dir() + "/fixtures/" + name; }

std::string default_model() {
  std::string p = std::string(LANCET_MODELS_DIR) + "/SmolLM2-135M-Instruct.Q4_1.gguf";
  return fs::exists(p) ? p : "";
}
std::string lancet_binary() { return LANCET_BINARY; }
std::string source_dir() { return LANCET_SOURCE_DIR; }
std::string python() {
  std::string venv = std::string(LANCET_SOURCE_DIR) + "/.venv/bin/python";
  return fs::exists(venv) ? venv : "python3";
}

namespace {
// Never destroyed: the atexit cleanup may run after static destructors.
std::vector<std::string>& temp_dirs() {
  static auto* dirs = new std::vector<std::string>();
  return *dirs;
}
void cleanup_temp_dirs() {
  for (const auto& d : temp_dirs()) {
    std::error_code ec;
    fs::remove_all(d, ec);
  }
}
}  // namespace

std::string make_temp_dir() {
  static std::once_flag once;
  std::call_once(once, [] { std::atexit(cleanup_temp_dirs); });
  std::string tmpl = (fs::temp_directory_path() / "lancet-test-XXXXXX").string();
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  char* d = mkdtemp(buf.data());
  if (!d) return "";
  temp_dirs().push_back(d);
  return d;
}

int run_command(const std::string& cmd, std::string* output) {
  std::string full = cmd + " 2>&1";
  FILE* p = popen(full.c_str(), "r");
  if (!p) return -1;
  std::array<char, 4096> buf;
  size_t n;
  if (output) output->clear();
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) {
    if (output) output->append(buf.data(), n);
  }
  int st = pclose(p);
  return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

}  // namespace lancet::testing
