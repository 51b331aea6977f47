// libFuzzer target for the Hugging Face description files: config.json, generation_config.json
// and tokenizer_config.json text. Any input must parse or fail with a Status; an accepted
// config.json must be a config that validates (parse_hf_config promises it), and the other
// two files must apply to it or fail cleanly.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>

#include "io/hf_config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  auto config = lancet::parse_hf_config(text, "fuzz/config.json");
  lancet::ModelConfig c;
  if (config.ok()) {
    if (!config->validate().ok()) std::abort();
    c = *config;
  }
  (void)lancet::apply_generation_config(text, "fuzz/generation_config.json", &c);
  lancet::TokenizerSource tok;
  (void)lancet::parse_tokenizer_config(text, "fuzz/tokenizer_config.json", &tok);
  return 0;
}
