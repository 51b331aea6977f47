// Byte-level BPE tokenizer (Llama 3, SmolLM2, GPT-2 families), exact against Hugging Face
// `tokenizers`. Loaded from tokenizer.json or from a GGUF vocabulary.
//
// Encoding: text -> (added tokens cut out) -> pre-tokenizer regex pieces -> BPE per piece.
//  * EncodeOptions::parse_special (default false): when true, special added tokens written in the
//    text (e.g. "<|eot_id|>") become their ids, which is what HF `tokenizers` does by default;
//    when false they are encoded as plain text, so user text can never inject control tokens.
//  * Non-special added tokens (GGUF "user defined") are always matched, as in HF.
//  * EncodeOptions::add_bos prepends the BOS id (HF's post-processor template); default encode
//    adds nothing. add_bos_by_default() says what the model's files ask for.
//  * Invalid UTF-8 input is first decoded lossily (ill-formed bytes -> U+FFFD).
// Decoding: ids -> bytes (HF ByteLevel decoder rule, added tokens as their text) -> UTF-8 with
// U+FFFD for ill-formed sequences (errors='replace'). Ids outside the vocab are skipped.
//
// Thread safety: a Tokenizer is immutable after loading; every const method may be called from
// many threads at once. Copies are cheap (shared state).
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "tokenizer/gguf_vocab.h"

namespace lancet {

struct EncodeOptions {
  bool parse_special = false;
  bool add_bos = false;
};

struct DecodeOptions {
  bool skip_special = false;
};

struct SpecialTokenIds {
  int32_t bos = -1;
  int32_t eos = -1;
  int32_t eot = -1;  // end of turn (<|eot_id|>, <|im_end|>), -1 when unknown
  int32_t pad = -1;
};

struct TokenizerState;  // internal, tokenizer_state.h
struct TokenizerSpec;   // internal, tokenizer_state.h

class Tokenizer {
 public:
  Tokenizer() = default;  // empty; use the factories

  static StatusOr<Tokenizer> from_json_file(const std::string& path);
  // `source` names the input in error messages.
  static StatusOr<Tokenizer> from_json_string(std::string_view json, const std::string& source);
  static StatusOr<Tokenizer> from_gguf_vocab(const GgufVocab& vocab);

  std::vector<int32_t> encode(std::string_view text, const EncodeOptions& options = {}) const;
  // Appends to *out instead of returning a new vector.
  void encode_into(std::string_view text, const EncodeOptions& options,
                   std::vector<int32_t>* out) const;
  // Encodes many texts on num_threads threads (0 = hardware concurrency); result[i] is
  // encode(texts[i], options).
  std::vector<std::vector<int32_t>> encode_batch(const std::vector<std::string>& texts,
                                                 const EncodeOptions& options = {},
                                                 int num_threads = 0) const;

  std::string decode(std::span<const int32_t> ids, const DecodeOptions& options = {}) const;
  // Raw bytes of one token, as the decoder sees them (may be a partial UTF-8 sequence); empty
  // for ids outside the vocab.
  std::string_view token_bytes(int32_t id) const;
  // True for special added tokens (the ones skip_special drops).
  bool is_special(int32_t id) const;
  // Id of a token given by its text: an added token's content, or a vocab entry in its
  // byte-level spelling ("Ġhello").
  std::optional<int32_t> token_to_id(std::string_view token) const;

  int32_t vocab_size() const;  // 1 + the largest id
  bool loaded() const { return state_ != nullptr; }

  // BOS/EOS/EOT/PAD ids. Loaders fill what the file says (tokenizer.json: BOS from the
  // post-processor, EOS/EOT guessed from conventional token names; GGUF: its ids); callers
  // that read generation_config.json may override them.
  const SpecialTokenIds& special_ids() const { return ids_; }
  void set_special_ids(const SpecialTokenIds& ids) { ids_ = ids; }
  // Whether the model's files ask for BOS at the start of a prompt (HF TemplateProcessing,
  // GGUF add_bos_token). encode() itself adds BOS only when EncodeOptions::add_bos is set.
  bool add_bos_by_default() const { return add_bos_default_; }
  void set_add_bos_by_default(bool v) { add_bos_default_ = v; }

 private:
  friend StatusOr<Tokenizer> build_tokenizer(TokenizerSpec spec);
  void encode_text(std::string_view text, std::vector<int32_t>* out) const;

  std::shared_ptr<const TokenizerState> state_;
  SpecialTokenIds ids_;
  bool add_bos_default_ = false;
};

}  // namespace lancet
