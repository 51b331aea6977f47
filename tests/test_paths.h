// Where tests find reference data, the default model, the lancet binary and a scratch folder.
#pragma once

#include <string>

namespace lancet::testing {

std::string shared_dir();      // ../shared (fixtures, tokenizer)
std::string fixture_dir(const std::string& name);  // shared_dir()/fixtures/name
std::string default_model();   // models/SmolLM2-135M-Instruct.Q4_1.gguf ("" if absent)
std::string lancet_binary();   // build/lancet
std::string source_dir();
std::string python();          // .venv/bin/python (falls back to python3)
// A fresh empty directory under the system temp dir, removed at process exit.
std::string make_temp_dir();
// Runs a shell command; returns its exit status and fills *output with stdout+stderr.
int run_command(const std::string& cmd, std::string* output);

}  // namespace lancet::testing
