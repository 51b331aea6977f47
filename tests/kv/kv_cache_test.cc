// Block pool and KV cache manager: unit behaviour and randomized schedules (arrivals, growth,
// aborts, shared prefixes) checking that no block leaks or is freed twice, reference counts
// stay consistent, and the pool returns to all-free when idle.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <random>
#include <set>

#include "kv/block_pool.h"
#include "kv/kv_cache_manager.h"

namespace lancet {
namespace {

TEST(BlockPool, AllocateReleaseAndLruEviction) {
  BlockPool pool(4, true);
  std::vector<BlockId> a;
  ASSERT_TRUE(pool.allocate(3, &a));
  EXPECT_EQ(pool.num_free(), 1);
  std::vector<BlockId> b;
  EXPECT_FALSE(pool.allocate(2, &b));  // out of capacity is a return value
  EXPECT_TRUE(b.empty());
  BlockHash k0 = chain_block_hash(kv_cache_salt("m", "bf16", ""), std::vector<int32_t>{1, 2});
  pool.set_hash(a[0], k0);
  pool.release_all(a);  // releases a[2], a[1], a[0]: a[0] most recently freed
  EXPECT_EQ(pool.num_free(), 4);
  // A lookup revives the cached block.
  auto hit = pool.lookup(k0);
  ASSERT_TRUE(hit.has_value());
  EXPECT_EQ(*hit, a[0]);
  EXPECT_EQ(pool.ref_count(a[0]), 1);
  pool.release(a[0]);
  // Allocating all four evicts the cached block last (it was freed most recently).
  std::vector<BlockId> c;
  ASSERT_TRUE(pool.allocate(3, &c));
  EXPECT_TRUE(pool.has_hash(a[0]));
  ASSERT_TRUE(pool.allocate(1, &c));
  EXPECT_FALSE(pool.has_hash(a[0]));
  EXPECT_EQ(pool.stats().evictions, 1);
  EXPECT_FALSE(pool.lookup(k0).has_value());
  std::string why;
  EXPECT_TRUE(pool.check_invariants(&why)) << why;
}

TEST(KvCacheManager, SharedPrefixIsReusedAndLastTokenAlwaysComputed) {
  BlockManagerConfig cfg{{64, 4}, /*enable_prefix_caching=*/true, /*salt=*/kv_cache_salt("m", "bf16", "")};
  KvCacheManager kv(cfg);
  std::vector<int32_t> p1 = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  EXPECT_EQ(kv.match_prefix(1, p1), 0);
  ASSERT_TRUE(kv.allocate(1, 10));
  EXPECT_EQ(kv.block_table(1).size(), 3u);
  kv.commit(1, p1, 10);  // two full blocks registered
  // Same first 8 tokens, different tail: 8 cached tokens.
  std::vector<int32_t> p2 = {1, 2, 3, 4, 5, 6, 7, 8, 99};
  EXPECT_EQ(kv.match_prefix(2, p2), 8);
  EXPECT_EQ(kv.block_table(2)[0], kv.block_table(1)[0]);
  EXPECT_EQ(kv.block_table(2)[1], kv.block_table(1)[1]);
  EXPECT_EQ(kv.pool().ref_count(kv.block_table(1)[0]), 2);
  // Exactly 8 tokens: only one block may be reused (the last token must be computed).
  std::vector<int32_t> p3 = {1, 2, 3, 4, 5, 6, 7, 8};
  EXPECT_EQ(kv.match_prefix(3, p3), 4);
  // Different first block: nothing shared, even if later blocks match.
  std::vector<int32_t> p4 = {0, 2, 3, 4, 5, 6, 7, 8, 1};
  EXPECT_EQ(kv.match_prefix(4, p4), 0);
  for (SeqId s : {1, 2, 3, 4}) kv.free(s);
  EXPECT_EQ(kv.num_free_blocks(), 64);
  EXPECT_EQ(kv.usage(), 0.0);
  // Cached blocks survive the free and serve a new sequence.
  EXPECT_EQ(kv.match_prefix(5, p2), 8);
  kv.free(5);
}

TEST(KvCacheManager, SaltSeparatesModelsAndKvDtypes) {
  std::vector<int32_t> toks = {5, 6, 7, 8};
  BlockHash a = chain_block_hash(kv_cache_salt("m", "bf16", ""), toks);
  BlockHash b = chain_block_hash(kv_cache_salt("m", "fp8_e4m3", ""), toks);
  BlockHash c = chain_block_hash(kv_cache_salt("m2", "bf16", ""), toks);
  EXPECT_FALSE(a == b);
  EXPECT_FALSE(a == c);
  EXPECT_TRUE(a == chain_block_hash(kv_cache_salt("m", "bf16", ""), toks));
}

// Sequences with a LoRA adapter key their blocks from their own salt (set_salt_source): the
// same prompt under the base model, adapter A and adapter B shares nothing across them, and
// everything within each; the keys that missing_block_keys (the KV tier) asks for follow the
// same salt, also for a sequence with no table yet.
TEST(KvCacheManager, SaltSourceSeparatesAdapters) {
  const BlockHash base = kv_cache_salt("m", "bf16", "");
  BlockManagerConfig cfg{{64, 4}, /*enable_prefix_caching=*/true, /*salt=*/base};
  KvCacheManager kv(cfg);
  std::map<SeqId, BlockHash> salts = {{10, kv_cache_salt("m", "bf16", "A#1")},
                                      {11, kv_cache_salt("m", "bf16", "A#1")},
                                      {20, kv_cache_salt("m", "bf16", "B#2")}};
  kv.set_salt_source([&](SeqId s, BlockHash* salt) {
    auto it = salts.find(s);
    if (it == salts.end()) return false;
    *salt = it->second;
    return true;
  });
  std::vector<int32_t> p = {1, 2, 3, 4, 5, 6, 7, 8, 9};
  // Adapter A computes the prompt (its table started by allocate, as with prompt logprobs).
  ASSERT_TRUE(kv.allocate(10, 9));
  kv.commit(10, p, 9);
  EXPECT_EQ(kv.match_prefix(1, p), 0) << "the base model must not read adapter A's KV";
  EXPECT_EQ(kv.match_prefix(20, p), 0) << "adapter B must not read adapter A's KV";
  EXPECT_EQ(kv.match_prefix(11, p), 8) << "a second request with adapter A shares its blocks";
  EXPECT_EQ(kv.block_table(11)[0], kv.block_table(10)[0]);
  EXPECT_EQ(kv.missing_block_keys(12, p).front(), chain_block_hash(base, std::span<const int32_t>(p).first(4)));
  EXPECT_EQ(kv.missing_block_keys(30, p).size(), 2u);
  salts[30] = salts[20];
  EXPECT_EQ(kv.missing_block_keys(30, p).front(),
            chain_block_hash(salts[20], std::span<const int32_t>(p).first(4)));
  for (SeqId s : {1, 10, 11, 20}) kv.free(s);
  EXPECT_EQ(kv.num_free_blocks(), 64);
}

TEST(KvCacheManager, PrefixCachingOffSharesNothing) {
  BlockManagerConfig cfg{{16, 2}, /*enable_prefix_caching=*/false, /*salt=*/kv_cache_salt("m", "bf16", "")};
  KvCacheManager kv(cfg);
  std::vector<int32_t> p = {1, 2, 3, 4, 5};
  ASSERT_TRUE(kv.allocate(1, 5));
  kv.commit(1, p, 5);
  EXPECT_EQ(kv.match_prefix(2, p), 0);
  kv.free(1);
  kv.free(2);
  EXPECT_EQ(kv.num_free_blocks(), 16);
}

// Thousands of seeded schedules: sequences arrive with prompts drawn from a few shared
// prefixes, grow token by token, get aborted or finish at random; the pool is checked after
// every operation and must be entirely free at the end.
TEST(KvCacheManager, RandomizedSchedulesNeverLeakOrDoubleFree) {
  for (int seed = 0; seed < 2000; ++seed) {
    std::mt19937 rng(seed);
    const int32_t bs = 1 + rng() % 8;
    const int64_t nblocks = 8 + rng() % 40;
    BlockManagerConfig cfg{{nblocks, bs}, /*enable_prefix_caching=*/(rng() % 4) != 0, /*salt=*/kv_cache_salt("m", "bf16", "")};
    KvCacheManager kv(cfg);
    std::vector<std::vector<int32_t>> prefixes(3);
    for (auto& p : prefixes) {
      p.resize(rng() % 40);
      for (auto& t : p) t = rng() % 5;
    }
    struct Seq {
      std::vector<int32_t> tokens;
      int64_t computed = 0;
    };
    std::map<SeqId, Seq> live;
    SeqId next = 0;
    for (int op = 0; op < 60; ++op) {
      const int kind = rng() % 3;
      if (kind == 0 || live.empty()) {
        Seq s;
        s.tokens = prefixes[rng() % 3];
        int extra = 1 + rng() % 12;
        for (int i = 0; i < extra; ++i) s.tokens.push_back(rng() % 5);
        const SeqId id = next++;
        s.computed = kv.match_prefix(id, s.tokens);
        ASSERT_LT(s.computed, static_cast<int64_t>(s.tokens.size()));
        ASSERT_EQ(s.computed % bs, 0);
        if (!kv.allocate(id, s.tokens.size())) {
          kv.free(id);  // admission failed: give back the prefix hits
        } else {
          s.computed = s.tokens.size();
          kv.commit(id, s.tokens, s.computed);
          live[id] = s;
        }
      } else if (kind == 1) {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        it->second.tokens.push_back(rng() % 5);
        if (kv.allocate(it->first, it->second.tokens.size())) {
          it->second.computed = it->second.tokens.size();
          kv.commit(it->first, it->second.tokens, it->second.computed);
        } else {
          kv.free(it->first);  // preempted
          live.erase(it);
        }
      } else {
        auto it = live.begin();
        std::advance(it, rng() % live.size());
        kv.free(it->first);
        live.erase(it);
      }
      // Reference counts equal the number of live tables holding each block.
      std::map<BlockId, int> holders;
      for (const auto& [id, s] : live) {
        const auto& t = kv.block_table(id);
        ASSERT_EQ(static_cast<int64_t>(t.size()), KvCacheManager::blocks_for(s.tokens.size(), bs));
        std::set<BlockId> uniq(t.begin(), t.end());
        ASSERT_EQ(uniq.size(), t.size()) << "a table holds a block twice";
        for (BlockId b : t) holders[b]++;
      }
      for (BlockId b = 0; b < nblocks; ++b) ASSERT_EQ(kv.pool().ref_count(b), holders[b]) << seed;
      std::string why;
      ASSERT_TRUE(kv.pool().check_invariants(&why)) << "seed " << seed << ": " << why;
    }
    for (const auto& [id, s] : live) kv.free(id);
    ASSERT_EQ(kv.num_free_blocks(), nblocks) << seed;
    ASSERT_EQ(kv.usage(), 0.0);
  }
}

}  // namespace
}  // namespace lancet
