// Loading a Tokenizer from GGUF tokenizer fields (GgufVocab). Only byte-level BPE ("gpt2")
// vocabularies are supported. The pre-tokenizer is chosen by `pre`, mirroring the HF
// tokenizer.json of each family:
//   llama-bpe / llama3 / llama-v3: the Llama 3 regex, ignore_merges = true
//   smollm / starcoder / refact / codeshell: Digits(individual) then the GPT-2 regex
//   gpt2 / default / (empty): the GPT-2 regex
// Token types: control (3) = special added token, user defined (4) = non-special added token
// (matched in text always); both, and unused (5) / unknown (2), are never produced by BPE.
#include <string>

#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"
#include "tokenizer/tokenizer_state.h"

namespace lancet {

StatusOr<Tokenizer> Tokenizer::from_gguf_vocab(const GgufVocab& v) {
  const std::string src = "GGUF tokenizer";
  if (v.model != "gpt2") {
    return Unimplemented(src + ": tokenizer.ggml.model '" + v.model +
                         "' is not supported (only byte-level BPE 'gpt2')");
  }
  if (v.tokens.empty()) return InvalidArgument(src + ": tokenizer.ggml.tokens is empty");
  if (!v.token_types.empty() && v.token_types.size() != v.tokens.size()) {
    return InvalidArgument(src + ": tokenizer.ggml.token_type has " +
                           std::to_string(v.token_types.size()) + " entries for " +
                           std::to_string(v.tokens.size()) + " tokens");
  }
  if (v.tokens.size() >= (1u << 30)) return InvalidArgument(src + ": too many tokens");

  TokenizerSpec spec;
  spec.source = src;
  const std::string& pre = v.pre;
  if (pre == "llama-bpe" || pre == "llama3" || pre == "llama-v3") {
    spec.split_patterns.emplace_back(kLlama3Pattern);
    spec.ignore_merges = true;
  } else if (pre == "smollm" || pre == "starcoder" || pre == "refact" || pre == "codeshell") {
    spec.split_patterns.emplace_back(kDigitsIndividualPattern);
    spec.split_patterns.emplace_back(kGpt2Pattern);
  } else if (pre == "gpt2" || pre == "default" || pre.empty()) {
    spec.split_patterns.emplace_back(kGpt2Pattern);
  } else {
    return Unimplemented(src + ": tokenizer.ggml.pre '" + pre + "' is not supported");
  }

  spec.vocab.reserve(v.tokens.size());
  spec.exclude_from_bpe.assign(v.tokens.size(), false);
  for (size_t i = 0; i < v.tokens.size(); ++i) {
    const int32_t id = static_cast<int32_t>(i);
    const int32_t type = v.token_types.empty() ? kGgufTokenNormal : v.token_types[i];
    if (v.tokens[i].empty()) continue;  // an empty slot: the id decodes to nothing
    spec.vocab.emplace_back(v.tokens[i], id);
    if (type == kGgufTokenControl || type == kGgufTokenUserDefined) {
      AddedToken t;
      t.id = id;
      t.content = v.tokens[i];  // added tokens are stored as their text, not byte-level
      t.special = type == kGgufTokenControl;
      spec.added.push_back(std::move(t));
    }
    spec.exclude_from_bpe[spec.vocab.size() - 1] =
        type == kGgufTokenControl || type == kGgufTokenUserDefined ||
        type == kGgufTokenUnused || type == kGgufTokenUnknown;
  }
  spec.exclude_from_bpe.resize(spec.vocab.size());

  spec.merges.reserve(v.merges.size());
  for (size_t i = 0; i < v.merges.size(); ++i) {
    const std::string& m = v.merges[i];
    const size_t sp = m.find(' ', 1);  // the left part is never empty
    if (sp == std::string::npos) {
      return InvalidArgument(src + ": tokenizer.ggml.merges[" + std::to_string(i) +
                             "] is not 'left right': '" + m + "'");
    }
    spec.merges.emplace_back(m.substr(0, sp), m.substr(sp + 1));
  }

  auto to_id = [&](int64_t id) -> int32_t {
    return id >= 0 && static_cast<size_t>(id) < v.tokens.size() ? static_cast<int32_t>(id) : -1;
  };
  spec.ids.bos = to_id(v.bos_id);
  spec.ids.eos = to_id(v.eos_id);
  spec.ids.eot = to_id(v.eot_id);
  spec.ids.pad = to_id(v.pad_id);
  if (spec.ids.eot < 0) {
    // As llama.cpp does when the file names no EOT: look for the conventional end-of-turn text.
    for (const AddedToken& t : spec.added) {
      if (t.content == "<|eot_id|>" || t.content == "<|im_end|>" || t.content == "<|end|>" ||
          t.content == "<end_of_turn>") {
        spec.ids.eot = t.id;
        break;
      }
    }
  }
  spec.add_bos_default = v.add_bos;
  return build_tokenizer(std::move(spec));
}

}  // namespace lancet
