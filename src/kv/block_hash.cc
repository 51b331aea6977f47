// Chained SHA-256 block keys.
#include "kv/block_hash.h"

#include "core/sha256.h"

namespace lancet {

BlockHash kv_cache_salt(const std::string& model_id, const std::string& kv_dtype,
                        const std::string& adapter) {
  Sha256 h;
  const std::string tag = "lancet-kv-v1";
  for (const std::string* s : {&tag, &model_id, &kv_dtype, &adapter}) {
    const uint64_t n = s->size();
    h.update(&n, sizeof n);  // length-prefixed: no ambiguity between fields
    h.update(s->data(), s->size());
  }
  BlockHash out;
  out.bytes = h.finish();
  return out;
}

BlockHash chain_block_hash(const BlockHash& parent, std::span<const int32_t> tokens) {
  Sha256 h;
  h.update(parent.bytes.data(), parent.bytes.size());
  const uint64_t n = tokens.size();
  h.update(&n, sizeof n);
  h.update(tokens.data(), tokens.size_bytes());
  BlockHash out;
  out.bytes = h.finish();
  return out;
}

}  // namespace lancet
