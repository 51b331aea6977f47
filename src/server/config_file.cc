// Config file -> flags (see config_file.h), parsed with yaml-cpp.
#include "server/config_file.h"

#include <fstream>
#include <sstream>

#include <yaml-cpp/yaml.h>

namespace lancet::server {

StatusOr<std::vector<std::string>> config_text_flags(const std::string& text, const std::string& source) {
  YAML::Node root;
  try {
    root = YAML::Load(text);
  } catch (const YAML::Exception& e) {
    return InvalidArgument(source + ": not valid YAML/JSON: " + e.what());
  }
  std::vector<std::string> flags;
  if (root.IsNull()) return flags;
  if (!root.IsMap()) return InvalidArgument(source + ": must be a mapping of flag names to values");
  for (const auto& kv : root) {
    if (!kv.first.IsScalar()) return InvalidArgument(source + ": keys must be flag names");
    std::string key = kv.first.Scalar();
    for (char& c : key)
      if (c == '_') c = '-';
    if (key.empty() || key[0] == '-') return InvalidArgument(source + ": bad key '" + key + "'");
    if (key == "config") return InvalidArgument(source + ": a config file cannot name another config file");
    if (!kv.second.IsScalar())
      return InvalidArgument(source + ": the value of '" + key + "' must be a single value");
    flags.push_back("--" + key + "=" + kv.second.Scalar());
  }
  return flags;
}

StatusOr<std::vector<std::string>> config_file_flags(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return IoError("cannot read config file " + path);
  std::ostringstream ss;
  ss << in.rdbuf();
  return config_text_flags(ss.str(), path);
}

}  // namespace lancet::server
