// RedisKvTier against a real redis-server, over a small fake KV cache: blocks stored in the
// background read back intact; a miss or a damaged entry ends the run (damaged entries are
// counted and deleted); a full queue drops blocks; a dead server costs nothing but
// recomputation and is reconnected after it comes back; and the engine's admission loader
// puts fetched blocks into the prefix cache.
#include <gtest/gtest.h>

#include <cstring>
#include <thread>

#include "engine/kv_tier_loader.h"
#include "kv_tier/kv_entry_codec.h"
#include "kv_tier/redis_kv_tier.h"
#include "redis_test_server.h"

namespace lancet {
namespace {

using namespace std::chrono_literals;

// A KV cache of `num_blocks` blocks held as plain bytes.
class FakeBlockExecutor : public ModelExecutor {
 public:
  explicit FakeBlockExecutor(int64_t num_blocks) {
    layout_.num_layers = 2;
    layout_.num_kv_heads = 1;
    layout_.head_dim = 8;
    layout_.block_size = 4;
    layout_.dtype_code = 1;
    layout_.element_bytes = 4;
    blocks_.assign(num_blocks, std::vector<uint8_t>(static_cast<size_t>(layout_.payload_bytes())));
  }
  int64_t vocab_size() const override { return 100; }
  int32_t block_size() const override { return 4; }
  int64_t num_blocks() const override { return static_cast<int64_t>(blocks_.size()); }
  Status execute(std::span<const SeqStepInput>, std::vector<float>*) override { return Unimplemented("fake"); }
  KvBlockLayout kv_block_layout() const override { return layout_; }
  Status read_kv_block(BlockId b, std::span<uint8_t> out) override {
    std::memcpy(out.data(), blocks_.at(b).data(), out.size());
    return OkStatus();
  }
  Status write_kv_block(BlockId b, std::span<const uint8_t> in) override {
    std::memcpy(blocks_.at(b).data(), in.data(), in.size());
    return OkStatus();
  }
  void fill(BlockId b, uint8_t seed) {
    for (size_t i = 0; i < blocks_[b].size(); ++i) blocks_[b][i] = static_cast<uint8_t>(seed + i);
  }
  std::vector<std::vector<uint8_t>> blocks_;
  KvBlockLayout layout_;
};

BlockHash key_of(int i) {
  const int32_t t[1] = {i};
  return chain_block_hash(kv_cache_salt("fake", "f32", ""), t);
}

class RedisKvTierTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_TRUE(server_.start()) << "redis-server did not start (tools/install_deps.sh)"; }
  std::unique_ptr<RedisKvTier> make(FakeBlockExecutor* exec, int64_t queue_bytes = 1 << 20) {
    KvOffloadConfig c;
    c.url = server_.url();
    c.timeout_ms = 500;
    c.queue_bytes = queue_bytes;
    auto t = RedisKvTier::create(c, exec);
    EXPECT_TRUE(t.ok()) << t.status().to_string();
    return std::move(*t);
  }
  // Stores blocks 0..n-1 (contents seeded by index) under key_of(0..n-1).
  void store_blocks(RedisKvTier& tier, FakeBlockExecutor& exec, int n) {
    for (int i = 0; i < n; ++i) {
      exec.fill(i, static_cast<uint8_t>(10 * i));
      tier.store(i, key_of(i));
    }
    ASSERT_TRUE(tier.flush(10s));
  }
  testing::RedisTestServer server_;
};

TEST_F(RedisKvTierTest, StoredBlocksReadBackIntact) {
  FakeBlockExecutor exec(8);
  auto tier = make(&exec);
  store_blocks(*tier, exec, 3);
  EXPECT_EQ(tier->stats().stored_blocks, 3);
  EXPECT_EQ(tier->stats().stored_bytes, 3 * static_cast<int64_t>(kv_entry_bytes(exec.layout_)));
  EXPECT_EQ(server_.dbsize(), 3);
  const BlockHash keys[4] = {key_of(0), key_of(1), key_of(2), key_of(3)};
  const auto got = tier->fetch(keys);
  ASSERT_EQ(got.size(), 3u);  // key 3 was never stored
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(std::vector<uint8_t>(got[i].payload.begin(), got[i].payload.end()), exec.blocks_[i]) << i;
  const KvTierStats s = tier->stats();
  EXPECT_EQ(s.queried_blocks, 4);
  EXPECT_EQ(s.hit_blocks, 3);
  EXPECT_EQ(s.fetched_bytes, 3 * static_cast<int64_t>(kv_entry_bytes(exec.layout_)));
  EXPECT_EQ(s.corrupt_entries, 0);
  EXPECT_EQ(s.errors, 0);
  EXPECT_TRUE(s.connected);
}

TEST_F(RedisKvTierTest, AMissEndsTheRun) {
  FakeBlockExecutor exec(8);
  auto tier = make(&exec);
  store_blocks(*tier, exec, 3);
  const BlockHash keys[3] = {key_of(0), key_of(7), key_of(2)};
  EXPECT_EQ(tier->fetch(keys).size(), 1u);
  const BlockHash first_missing[2] = {key_of(7), key_of(0)};
  EXPECT_TRUE(tier->fetch(first_missing).empty());
}

TEST_F(RedisKvTierTest, DamagedEntriesAreCountedDeletedAndIgnored) {
  FakeBlockExecutor exec(8);
  auto tier = make(&exec);
  store_blocks(*tier, exec, 4);
  const KvBlockLayout& l = exec.layout_;
  // Block 1: a flipped payload byte; block 2: truncated; block 3: another layout's entry.
  std::string v;
  ASSERT_TRUE(server_.get(kv_entry_key(l, key_of(1)), &v));
  v[kKvEntryHeaderBytes + 3] ^= 1;
  ASSERT_TRUE(server_.set(kv_entry_key(l, key_of(1)), v));
  ASSERT_TRUE(server_.get(kv_entry_key(l, key_of(2)), &v));
  ASSERT_TRUE(server_.set(kv_entry_key(l, key_of(2)), v.substr(0, v.size() / 2)));
  KvBlockLayout other = l;
  other.head_dim = 4;
  const auto foreign = encode_kv_entry(other, key_of(3), std::vector<uint8_t>(other.payload_bytes(), 1));
  ASSERT_TRUE(server_.set(kv_entry_key(l, key_of(3)), std::string(foreign.begin(), foreign.end())));

  const BlockHash from0[2] = {key_of(0), key_of(1)};
  EXPECT_EQ(tier->fetch(from0).size(), 1u);
  EXPECT_EQ(tier->stats().corrupt_entries, 1);
  EXPECT_FALSE(server_.get(kv_entry_key(l, key_of(1)), &v)) << "the damaged entry is deleted";
  for (int k : {2, 3}) {
    const BlockHash one[1] = {key_of(k)};
    EXPECT_TRUE(tier->fetch(one).empty()) << k;
    EXPECT_FALSE(server_.get(kv_entry_key(l, key_of(k)), &v)) << k;
  }
  EXPECT_EQ(tier->stats().corrupt_entries, 3);
  EXPECT_EQ(tier->stats().hit_blocks, 1);
}

TEST_F(RedisKvTierTest, AFullQueueDropsBlocks) {
  FakeBlockExecutor exec(8);
  auto tier = make(&exec, /*queue_bytes=*/1);  // not even one entry fits
  store_blocks(*tier, exec, 5);
  EXPECT_EQ(tier->stats().store_drops, 5);
  EXPECT_EQ(tier->stats().stored_blocks, 0);
  EXPECT_EQ(server_.dbsize(), 0);
}

TEST_F(RedisKvTierTest, ADeadServerMeansMissesUntilItIsBack) {
  FakeBlockExecutor exec(8);
  auto tier = make(&exec);
  store_blocks(*tier, exec, 2);
  server_.stop();
  const BlockHash keys[2] = {key_of(0), key_of(1)};
  EXPECT_TRUE(tier->fetch(keys).empty());
  tier->store(0, key_of(5));
  ASSERT_TRUE(tier->flush(10s));
  KvTierStats s = tier->stats();
  EXPECT_FALSE(s.connected);
  EXPECT_GT(s.errors, 0);
  EXPECT_EQ(s.store_drops, 1);
  EXPECT_EQ(s.stored_blocks, 2);

  // Back (empty: the data died with it): stores and fetches resume after the backoff.
  ASSERT_TRUE(server_.start());
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  bool resumed = false;
  while (!resumed && std::chrono::steady_clock::now() < deadline) {
    tier->store(0, key_of(0));
    ASSERT_TRUE(tier->flush(10s));
    const BlockHash k0[1] = {key_of(0)};
    resumed = tier->fetch(k0).size() == 1;
    if (!resumed) std::this_thread::sleep_for(100ms);
  }
  EXPECT_TRUE(resumed);
  EXPECT_TRUE(tier->stats().connected);
}

TEST_F(RedisKvTierTest, AdmissionLoadsFetchedBlocksIntoThePrefixCache) {
  FakeBlockExecutor producer(16), consumer(16);
  auto tier_a = make(&producer);
  auto tier_b = make(&consumer);
  BlockManagerConfig bc;
  bc.num_blocks = 16;
  bc.block_size = 4;
  bc.salt = kv_cache_salt("fake", "f32", "");
  // Replica A computes a 23-token prompt: its 5 full blocks go to the tier.
  std::vector<int32_t> prompt(23);
  for (int i = 0; i < 23; ++i) prompt[i] = 3 * i + 1;
  KvCacheManager kv_a(bc);
  kv_a.set_block_listener([&](BlockId b, const BlockHash& k) { tier_a->store(b, k); });
  ASSERT_TRUE(kv_a.allocate(1, 23));
  for (BlockId b : kv_a.block_table(1)) producer.fill(b, static_cast<uint8_t>(b * 17));
  kv_a.commit(1, prompt, 23);
  ASSERT_TRUE(tier_a->flush(10s));
  EXPECT_EQ(tier_a->stats().stored_blocks, 5);

  // Replica B: nothing local; the loader takes all 5 (22 tokens may be cached: 5 blocks).
  KvCacheManager kv_b(bc);
  EXPECT_EQ(kv_b.match_prefix(7, prompt), 0);
  EXPECT_EQ(load_prefix_from_tier(*tier_b, consumer, kv_b, 7, prompt), 20);
  ASSERT_EQ(kv_b.block_table(7).size(), 5u);
  for (int i = 0; i < 5; ++i)
    EXPECT_EQ(consumer.blocks_[kv_b.block_table(7)[i]], producer.blocks_[kv_a.block_table(1)[i]]) << i;
  // They are in B's prefix cache now: another sequence finds them locally.
  EXPECT_EQ(kv_b.match_prefix(8, prompt), 20);
  EXPECT_EQ(tier_b->stats().hit_blocks, 5);
  kv_b.free(7);
  kv_b.free(8);
  std::string why;
  EXPECT_TRUE(kv_b.pool().check_invariants(&why)) << why;
  EXPECT_EQ(kv_b.num_free_blocks(), 16);
}

}  // namespace
}  // namespace lancet
