// The shared KV tier end to end on the default model (SmolLM2 Q4_1, CPU) with a real
// redis-server: two replicas (two Runtimes, each with its own KV cache) share one Redis.
// A ~2000-token prompt computed on replica A is loaded by replica B, which then computes only
// the last block's tokens and gives A's greedy output; a damaged entry is detected, deleted
// and recomputed with the same output; and with Redis killed mid-run both replicas keep
// serving by computing, then use it again once it is back.
#include <gtest/gtest.h>

#include <thread>

#include "kv_tier/kv_entry_codec.h"
#include "redis_test_server.h"
#include "runtime/runtime.h"

namespace lancet {
namespace {

using namespace std::chrono_literals;

struct Output {
  std::vector<int32_t> tokens;
  FinishReason finish = FinishReason::kNone;
  int32_t cached_prompt_tokens = 0;
};

Output generate(Runtime& rt, const std::vector<int32_t>& prompt, int max_tokens = 12) {
  GenerationRequest req;
  req.prompt = prompt;
  req.params.temperature = 0.0f;
  req.params.max_tokens = max_tokens;
  req.params.ignore_eos = true;
  auto s = rt.async_engine().submit(req);
  EXPECT_TRUE(s.ok()) << s.status().to_string();
  Output out;
  if (!s.ok()) return out;
  TokenEvent ev;
  while ((*s)->next(&ev)) {
    if (ev.token >= 0) out.tokens.push_back(ev.token);
    if (ev.finished) out.finish = ev.finish_reason;
    out.cached_prompt_tokens = ev.cached_prompt_tokens;
  }
  return out;
}

// The block hash a tier key ends with (64 hex digits).
BlockHash hash_in_key(const std::string& key) {
  BlockHash h;
  const std::string hex = key.substr(key.size() - 64);
  for (size_t i = 0; i < 32; ++i) h.bytes[i] = static_cast<uint8_t>(std::stoi(hex.substr(2 * i, 2), nullptr, 16));
  return h;
}

class KvOffloadSmolLM2 : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_FALSE(testing::default_model().empty()) << "default model missing: run tools/fetch_model.sh";
    ASSERT_TRUE(redis_.start()) << "redis-server did not start (tools/install_deps.sh)";
    a_ = make();
    b_ = make();
    ASSERT_TRUE(a_ && b_);
  }
  std::unique_ptr<Runtime> make() {
    RuntimeConfig rc;
    rc.model = testing::default_model();
    rc.max_model_len = 2560;
    rc.kv_cache_memory = int64_t{2560} * 30 * 2 * 3 * 64 * 4 * 2;  // two 2560-token sequences, f32
    rc.kv_offload.url = redis_.url();
    rc.kv_offload.timeout_ms = 2000;
    auto rt = Runtime::create(rc);
    EXPECT_TRUE(rt.ok()) << rt.status().to_string();
    return rt.ok() ? std::move(*rt) : nullptr;
  }
  // `n` tokens of numbered prose that starts with `tag` (different tags: different first blocks).
  std::vector<int32_t> prompt(const std::string& tag, size_t n) {
    std::string text = tag + ".";
    auto ids = a_->encode_prompt(text);
    for (int i = 0; ids.ok() && ids->size() < n; i += 25) {
      for (int j = i; j < i + 25; ++j)
        text += " Crate " + std::to_string(j) + " of the " + tag + " shipment holds " + std::to_string((j * 37) % 101) +
                " brass valves and sits on shelf " + std::to_string(j % 9) + ".";
      ids = a_->encode_prompt(text);
    }
    EXPECT_TRUE(ids.ok());
    ids->resize(n);
    return *ids;
  }
  // The tier's own counters, as they are now (the engine's statistics hold them as of its last
  // step, before a flush has written what that step queued).
  KvTierStats tier(Runtime& rt) { return rt.kv_offload()->stats(); }

  testing::RedisTestServer redis_;
  std::unique_ptr<Runtime> a_, b_;
};

TEST_F(KvOffloadSmolLM2, ReplicaBLoadsAPrefixComputedOnReplicaA) {
  const int64_t bs = a_->config().block_size;
  const auto p1 = prompt("harbour", 2000);
  const Output ra = generate(*a_, p1);
  ASSERT_EQ(ra.finish, FinishReason::kLength);
  ASSERT_TRUE(a_->kv_offload()->flush(60s));
  const int64_t full = static_cast<int64_t>(p1.size()) / bs;  // 125 blocks
  EXPECT_GE(tier(*a_).stored_blocks, full);
  EXPECT_EQ(tier(*a_).store_drops, 0);
  EXPECT_EQ(a_->async_engine().stats().prompt_tokens_computed, 2000);

  // B: the prompt's full blocks but the one holding the last token come from Redis.
  const int64_t loadable = (static_cast<int64_t>(p1.size()) - 1) / bs;  // 124
  const Output rb = generate(*b_, p1);
  EXPECT_EQ(rb.tokens, ra.tokens);
  const EngineStats sb = b_->async_engine().stats();
  EXPECT_EQ(sb.kv_offload.hit_blocks, loadable);
  EXPECT_EQ(sb.kv_offload.corrupt_entries, 0);
  EXPECT_EQ(sb.kv_offload.errors, 0);
  EXPECT_EQ(sb.prompt_tokens_computed, 2000 - loadable * bs);
  EXPECT_EQ(rb.cached_prompt_tokens, loadable * bs);
  EXPECT_EQ(sb.prefix_hits, 0);  // none of it was in B's own prefix cache

  // A damaged entry (one byte of block 5's payload) on a second prompt: B loads blocks 0-4,
  // refuses and deletes 5, computes the rest, and answers as A did.
  const auto p2 = prompt("orchard", 600);
  const Output ra2 = generate(*a_, p2);
  ASSERT_TRUE(a_->kv_offload()->flush(60s));
  const auto keys = a_->kv_offload_keys(p2);
  ASSERT_EQ(keys.size(), 600u / bs);
  std::string v;
  ASSERT_TRUE(redis_.get(keys[5], &v));
  v[kKvEntryHeaderBytes + v.size() / 2] ^= 0x40;
  ASSERT_TRUE(redis_.set(keys[5], v));
  const int64_t computed_before = b_->async_engine().stats().prompt_tokens_computed;
  const Output rb2 = generate(*b_, p2);
  EXPECT_EQ(rb2.tokens, ra2.tokens);
  const EngineStats sb2 = b_->async_engine().stats();
  EXPECT_EQ(sb2.kv_offload.corrupt_entries, 1);
  EXPECT_EQ(sb2.kv_offload.hit_blocks - sb.kv_offload.hit_blocks, 5);
  EXPECT_EQ(sb2.prompt_tokens_computed - computed_before, 600 - 5 * bs);
  // B recomputed block 5 and stored it again, intact.
  ASSERT_TRUE(b_->kv_offload()->flush(60s));
  ASSERT_TRUE(redis_.get(keys[5], &v));
  const std::span<const uint8_t> entry(reinterpret_cast<const uint8_t*>(v.data()), v.size());
  EXPECT_TRUE(decode_kv_entry(b_->kv_offload()->layout(), hash_in_key(keys[5]), entry).ok());
}

TEST_F(KvOffloadSmolLM2, RedisStoppedMidRunMeansRecomputationNotErrors) {
  const int64_t bs = a_->config().block_size;
  const auto p1 = prompt("quarry", 400);
  const Output ra = generate(*a_, p1);
  ASSERT_TRUE(a_->kv_offload()->flush(60s));
  redis_.stop();

  // Both replicas serve with the tier gone: B computes the whole prompt, same output.
  const Output rb = generate(*b_, p1);
  EXPECT_EQ(rb.finish, FinishReason::kLength);
  EXPECT_EQ(rb.tokens, ra.tokens);
  const auto p2 = prompt("meadow", 300);
  const Output ra2 = generate(*a_, p2);
  const Output rb2 = generate(*b_, p2);
  EXPECT_EQ(ra2.finish, FinishReason::kLength);
  EXPECT_EQ(rb2.tokens, ra2.tokens);
  const EngineStats sb = b_->async_engine().stats();
  EXPECT_EQ(sb.kv_offload.hit_blocks, 0);
  EXPECT_EQ(sb.prompt_tokens_computed, 400 + 300);
  EXPECT_GT(sb.kv_offload.errors, 0);
  EXPECT_FALSE(sb.kv_offload.connected);

  // Back, empty: after the backoff the replicas store and load through it again.
  ASSERT_TRUE(redis_.start());
  const auto deadline = std::chrono::steady_clock::now() + 30s;
  bool stored = false;
  int round = 0;
  while (!stored && std::chrono::steady_clock::now() < deadline) {
    // A fresh prompt each round (A's own cache would otherwise hold it and store nothing).
    const auto p = prompt("lagoon " + std::to_string(round++), 200);
    generate(*a_, p, 1);
    ASSERT_TRUE(a_->kv_offload()->flush(60s));
    stored = redis_.dbsize() > 0;
    if (stored) {
      const int64_t hits = tier(*b_).hit_blocks;
      generate(*b_, p, 1);
      // B's fetch connection may still be in its backoff: then it computes; either way no error.
      if (tier(*b_).hit_blocks == hits) stored = false;
      else EXPECT_EQ(tier(*b_).hit_blocks - hits, (200 - 1) / bs);
    }
    if (!stored) std::this_thread::sleep_for(200ms);
  }
  EXPECT_TRUE(stored) << "the tier was not used again after Redis came back";
  EXPECT_TRUE(tier(*a_).connected);
}

}  // namespace
}  // namespace lancet
