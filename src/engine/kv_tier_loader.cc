// Loading tier blocks at admission.
#include "engine/kv_tier_loader.h"

#include <algorithm>
#include <chrono>

#include "core/logging.h"

namespace lancet {

int64_t load_prefix_from_tier(KvTier& tier, ModelExecutor& model, KvCacheManager& kv, SeqId seq,
                              std::span<const int32_t> tokens) {
  const std::vector<BlockHash> keys = kv.missing_block_keys(seq, tokens);
  if (keys.empty()) return 0;
  const int64_t bs = kv.block_size();
  const int64_t held = static_cast<int64_t>(kv.block_table(seq).size());
  const auto deadline = std::chrono::steady_clock::now() + tier.fetch_budget();
  const int64_t batch = std::max<int64_t>(tier.fetch_batch(), 1);
  int64_t loaded = 0;
  for (size_t at = 0; at < keys.size();) {
    if (std::chrono::steady_clock::now() >= deadline) break;
    // Never more blocks than are free: the rest of the prompt is computed instead.
    const int64_t want = std::min<int64_t>({batch, static_cast<int64_t>(keys.size() - at), kv.num_free_blocks()});
    if (want <= 0) break;
    const std::vector<KvTierBlock> got = tier.fetch(std::span<const BlockHash>(keys).subspan(at, want));
    if (got.empty()) break;
    const int64_t n = static_cast<int64_t>(got.size());
    if (!kv.allocate(seq, (held + loaded + n) * bs)) break;
    const std::vector<BlockId>& table = kv.block_table(seq);
    int64_t ok = 0;
    for (; ok < n; ++ok) {
      const Status st = model.write_kv_block(table[held + loaded + ok], got[ok].payload);
      if (!st.ok()) {
        LOG_WARN("kv offload: loading a fetched block failed (computing it instead): " << st.to_string());
        break;
      }
    }
    loaded += ok;
    // Fresh blocks that were not loaded go back to the pool; the loaded ones join the cache.
    kv.truncate(seq, (held + loaded) * bs);
    kv.commit_loaded(seq, tokens, (held + loaded) * bs);
    if (ok < n || n < want) break;
    at += static_cast<size_t>(n);
  }
  return loaded * bs;
}

}  // namespace lancet
