// `lancet serve --config FILE`: a YAML (or JSON, which YAML reads too) mapping whose keys are
// the flag names (with dashes or underscores, as vLLM's config files allow) and whose values
// are scalars. It becomes "--key=value" arguments placed before the command line's, so flags
// given on the command line win; unknown keys are then rejected by the flag parser.
#pragma once

#include <string>
#include <vector>

#include "core/status.h"

namespace lancet::server {

StatusOr<std::vector<std::string>> config_file_flags(const std::string& path);
// The same from the file's text; `source` names it in errors.
StatusOr<std::vector<std::string>> config_text_flags(const std::string& text, const std::string& source);

}  // namespace lancet::server
