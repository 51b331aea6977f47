// KvCacheManager::truncate, the block side of speculative rollback: blocks that held only
// rejected drafts go back to the pool, registered (full, computed) blocks never do, and a
// later sequence with the same accepted prefix finds exactly the committed blocks.
#include <gtest/gtest.h>

#include <string>

#include "kv/kv_cache_manager.h"

namespace lancet {
namespace {

TEST(KvCacheManager, TruncateReturnsDraftOnlyBlocksAndKeepsCommittedOnes) {
  BlockManagerConfig c;
  c.num_blocks = 16;
  c.block_size = 4;
  c.salt = kv_cache_salt("m", "f32", "");
  KvCacheManager kv(c);
  std::vector<int32_t> tokens = {1, 2, 3, 4, 5, 6};  // 6 tokens, 5 computed, then 4 drafts
  ASSERT_TRUE(kv.allocate(1, 5 + 1 + 4));                // 10 slots -> 3 blocks
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  EXPECT_EQ(kv.num_free_blocks(), 13);
  // One draft accepted: tokens grow to 8 (7 computed); the third block held only rejected drafts.
  tokens.push_back(7);
  tokens.push_back(8);
  kv.commit(1, tokens, 7);
  kv.truncate(1, static_cast<int64_t>(tokens.size()));
  EXPECT_EQ(kv.block_table(1).size(), 2u);
  EXPECT_EQ(kv.num_free_blocks(), 14);
  // Truncating below a committed block keeps it (its KV is computed and keyed).
  kv.truncate(1, 1);
  EXPECT_EQ(kv.block_table(1).size(), 1u);
  kv.truncate(1, 0);
  EXPECT_EQ(kv.block_table(1).size(), 1u);
  std::string why;
  EXPECT_TRUE(kv.pool().check_invariants(&why)) << why;
  kv.free(1);
  // The committed first block (tokens 1..4) is found by a later sequence; nothing else is.
  std::vector<int32_t> again = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  EXPECT_EQ(kv.match_prefix(2, again), 4);
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 16);
  EXPECT_TRUE(kv.pool().check_invariants(&why)) << why;
}

}  // namespace
}  // namespace lancet
