// The tokenizer fields of a GGUF file (`tokenizer.ggml.*`), as plain data. The GGUF reader fills
// this; Tokenizer::from_gguf_vocab builds a tokenizer from it. Kept free of any GGUF parsing so
// the tokenizer does not depend on the reader.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace lancet {

// GGUF token types (tokenizer.ggml.token_type).
enum GgufTokenType : int32_t {
  kGgufTokenNormal = 1,
  kGgufTokenUnknown = 2,
  kGgufTokenControl = 3,      // special token (HF added token with special=true)
  kGgufTokenUserDefined = 4,  // non-special added token: always matched in text
  kGgufTokenUnused = 5,
  kGgufTokenByte = 6,
};

struct GgufVocab {
  std::string model;                 // tokenizer.ggml.model: "gpt2" (byte-level BPE)
  std::string pre;                   // tokenizer.ggml.pre: "llama-bpe", "smollm", "gpt2", ...
  std::vector<std::string> tokens;   // tokenizer.ggml.tokens, byte-level strings, index = id
  std::vector<int32_t> token_types;  // tokenizer.ggml.token_type (empty = all normal)
  std::vector<std::string> merges;   // tokenizer.ggml.merges, "left right", rank = index
  int64_t bos_id = -1, eos_id = -1, eot_id = -1, pad_id = -1;
  bool add_bos = false;              // tokenizer.ggml.add_bos_token
};

}  // namespace lancet
