// Internal: the immutable state behind a Tokenizer, and TokenizerSpec, the loader-neutral
// description that both loaders (tokenizer.json, GGUF vocab) fill and build_tokenizer turns
// into a Tokenizer. Not part of the public API.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "core/thread_pool.h"
#include "tokenizer/added_tokens.h"
#include "tokenizer/bpe_model.h"
#include "tokenizer/pre_tokenizer.h"
#include "tokenizer/tokenizer.h"

namespace lancet {

struct TokenizerSpec {
  std::string source;  // file name for messages
  // Vocab entries as spelled in the file (byte-level strings) -> id.
  std::vector<std::pair<std::string, int32_t>> vocab;
  // Entries of `vocab` that BPE must not produce (GGUF control/user-defined/unused tokens).
  std::vector<bool> exclude_from_bpe;  // indexed like `vocab`; empty = none
  std::vector<std::pair<std::string, std::string>> merges;  // byte-level strings, rank = index
  bool ignore_merges = false;
  bool byte_level_pre = false;  // tokenizer.json had a ByteLevel pre-tokenizer step
  std::vector<std::string> split_patterns;  // pre-tokenizer regexes (Oniguruma syntax), in order
  std::vector<AddedToken> added;
  SpecialTokenIds ids;
  bool add_bos_default = false;
};

struct TokenizerState {
  std::string source;
  BpeModel bpe;
  PreTokenizer pre;
  AddedTokenMatcher added;
  // Decoder bytes of each id ("" = no such id), packed: id i's are id_blob[id_offset[i],
  // id_offset[i + 1]). One lookup per generated token while streaming; packed, the table is a
  // fraction of a vector of strings' size and stays in cache.
  std::string id_blob;
  std::vector<uint32_t> id_offset;  // [num_ids() + 1]
  size_t num_ids() const { return id_offset.empty() ? 0 : id_offset.size() - 1; }
  std::string_view id_bytes(size_t id) const {
    return {id_blob.data() + id_offset[id], static_cast<size_t>(id_offset[id + 1] - id_offset[id])};
  }
  std::vector<uint8_t> has_id;        // 1 when the id exists
  std::vector<uint8_t> special;       // 1 for special added tokens
  std::unordered_map<std::string, int32_t> by_text;  // added content and byte-level spellings

  // Worker threads kept between encode_batch calls so their per-thread piece caches stay warm.
  // Only one batch uses it at a time; a concurrent batch makes its own pool.
  mutable std::mutex pool_mu;
  mutable std::unique_ptr<ThreadPool> pool;
};

// Builds the tokenizer; validates the spec (ids, patterns) with messages naming spec.source.
StatusOr<Tokenizer> build_tokenizer(TokenizerSpec spec);

}  // namespace lancet
