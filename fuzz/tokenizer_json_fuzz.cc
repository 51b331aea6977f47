// libFuzzer target for tokenizer.json loading: any input must load or fail with a Status. A
// loaded tokenizer must encode text (fixed samples and a slice of the input) into ids inside
// its vocabulary, and decode them back without error.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>

#include "tokenizer/tokenizer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string_view input(reinterpret_cast<const char*>(data), size);
  auto tok = lancet::Tokenizer::from_json_string(input, "fuzz/tokenizer.json");
  if (!tok.ok()) return 0;
  const std::string_view samples[] = {"Hello, world! It's 2024.", "  \t\nnaïve café 日本語 🙂",
                                      "<|begin_of_text|>hi<|eot_id|>", input.substr(0, 256)};
  for (const std::string_view text : samples) {
    lancet::EncodeOptions enc;
    enc.add_bos = true;
    enc.parse_special = text.size() % 2 == 0;
    const std::vector<int32_t> ids = tok->encode(text, enc);
    for (int32_t id : ids)
      if (id < 0 || id >= tok->vocab_size()) std::abort();
    (void)tok->decode(ids);
    lancet::DecodeOptions dec;
    dec.skip_special = true;
    (void)tok->decode(ids, dec);
  }
  return 0;
}
