// Byte-level BPE model: turns one pre-token (raw bytes) into token ids by applying merges in rank
// order (lowest rank first, leftmost first among equal ranks), exactly like the Hugging Face
// `tokenizers` BPE model. Holds the vocab (raw bytes -> id) and the merge table
// ((left id, right id) -> (rank, merged id)).
//
// Thread safety: all methods are const and may be called concurrently. Results of recent pieces
// are kept in a per-thread cache (keyed by model instance), so no locks are taken.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/status.h"
#include "tokenizer/flat_hash.h"

namespace lancet {

struct BpeModelConfig {
  std::vector<std::pair<std::string, int32_t>> vocab;            // raw bytes -> id
  std::vector<std::pair<std::string, std::string>> merges;       // raw bytes; rank = index
  // When true, a pre-token that is itself in the vocab is emitted whole without merging
  // (HF `ignore_merges`, set by Llama 3).
  bool ignore_merges = false;
  std::string source;  // file name for error messages
};

class BpeModel {
 public:
  BpeModel() = default;
  static StatusOr<BpeModel> build(const BpeModelConfig& config);

  // Appends the ids of one pre-token to *out.
  void encode(std::string_view piece, std::vector<int32_t>* out) const;
  // The same without the cache (used by tests and for long pieces).
  void encode_uncached(std::string_view piece, std::vector<int32_t>* out) const;

  // Id of a vocab entry given as raw bytes, or -1.
  int32_t find(std::string_view bytes) const { return vocab_.find(bytes); }
  bool ignore_merges() const { return ignore_merges_; }
  // Merges dropped at load time because a part or the result is not in the vocab.
  size_t num_skipped_merges() const { return skipped_merges_; }

 private:
  void merge_linear(std::vector<int32_t>* ids) const;
  void merge_heap(std::vector<int32_t>* ids) const;

  BytesIdMap vocab_;
  PairMergeMap merges_;
  std::array<int32_t, 256> byte_ids_{};  // id of each single-byte token, -1 when absent
  bool ignore_merges_ = false;
  size_t skipped_merges_ = 0;
  uint64_t instance_id_ = 0;  // keys the per-thread cache
};

}  // namespace lancet
