// Tokenizer and chat-prompt encoding for a loaded model: builds the Tokenizer from whatever
// the model files carry (HF tokenizer.json, or GGUF tokenizer.ggml.* keys), and encodes
// rendered chat prompts so that special tokens written by the template are parsed while the
// same strings typed inside a message stay plain text (a user cannot inject <|eot_id|>).
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "io/model_source.h"
#include "tokenizer/tokenizer.h"

namespace lancet {

// Null (and OK) when the model ships no tokenizer, as the test fixtures do.
StatusOr<std::unique_ptr<Tokenizer>> load_model_tokenizer(const ModelSource& source);

struct ChatEncodeOptions {
  // true: parse special-token strings everywhere, contents included (what HF's
  // apply_chat_template(tokenize=True) does).
  bool hf_identical = false;
};

// `rendered` is the template's output; `contents` the message contents in order (as passed to
// the template). Each content is located in the rendered text (verbatim, or trimmed as
// templates commonly do); special tokens inside those spans are encoded as text. Outside them
// the result is exactly encode(rendered, parse_special = true).
std::vector<int32_t> encode_chat_prompt(const Tokenizer& tokenizer, std::string_view rendered,
                                        const std::vector<std::string>& contents,
                                        const ChatEncodeOptions& options = {});

}  // namespace lancet

namespace lancet {

// A tokenizer with its chat template and BOS/EOS text, from any of: a tokenizer.json file
// (tokenizer_config.json beside it supplies the template), a directory holding tokenizer.json
// (with or without model weights), an HF model directory, or a GGUF file.
struct TokenizerBundle {
  std::unique_ptr<Tokenizer> tokenizer;
  std::string chat_template;  // "" when the files have none
  std::string bos_token;
  std::string eos_token;
};
StatusOr<TokenizerBundle> load_tokenizer_bundle(const std::string& path);

}  // namespace lancet
