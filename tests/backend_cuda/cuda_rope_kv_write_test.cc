// rope_kv_write (rope and the KV cache write in one kernel for decode-sized steps) against rope
// followed by kv_write on the same GPU: q, k and both caches equal bit for bit (the same
// arithmetic and conversions), over cache types, head sizes, partial and interleaved rotary
// dims, block sizes, padded tokens (slot -1), and token counts on both sides of the fused
// kernel's limit; bad positions and slots are reported as the unfused ops report them.
#include <algorithm>
#include <numeric>
#include <random>

#include "backend/cuda/cuda_backend.h"
#include "cuda_test_util.h"

namespace lancet {
namespace {

using namespace lancet::testing;

struct Cache {
  Buffer k, v;
  KvCacheLayer layer;
};

Cache make_cache(Backend& g, DType dt, int64_t blocks, int64_t bs, int64_t kh, int64_t d,
                 const std::vector<uint8_t>& fill) {
  Cache c;
  const size_t bytes = static_cast<size_t>(blocks * bs * kh * d) * dtype_info(dt).block_bytes;
  c.k = *g.alloc(bytes);
  c.v = *g.alloc(bytes);
  EXPECT_TRUE(g.copy_to_device(c.k.data(), fill.data(), bytes).ok());
  EXPECT_TRUE(g.copy_to_device(c.v.data(), fill.data() + bytes, bytes).ok());
  c.layer = KvCacheLayer{dt, blocks, bs, kh, d, c.k.data(), c.v.data()};
  if (dt == DType::kF8E4M3) {
    c.layer.k_scale = 0.02f;
    c.layer.v_scale = 0.5f;
  }
  return c;
}

TEST(CudaRopeKvWrite, EqualsRopeThenKvWrite) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const int64_t max_pos = 4096, H = 12, KH = 4;
  std::mt19937 rng(5);
  for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    for (int64_t D : {64, 128}) {
      for (int64_t rot : {D, D / 2}) {
        const auto cs = random_floats(max_pos * rot / 2, 21), sn = random_floats(max_pos * rot / 2, 22);
        Buffer dcs = to_device(*g, cs), dsn = to_device(*g, sn);
        for (bool inter : {false, true}) {
          for (int64_t bs : {1, 16}) {
            for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{97}, cuda::CudaBackend::kRopeKvFusedMaxTokens,
                              cuda::CudaBackend::kRopeKvFusedMaxTokens + 3}) {
              const std::string what = std::string(dtype_name(dt)) + " D=" + std::to_string(D) + " rot=" +
                                       std::to_string(rot) + (inter ? " interleaved" : "") + " bs=" +
                                       std::to_string(bs) + " n=" + std::to_string(n);
              const int64_t blocks = (n + 8 + bs - 1) / bs, row = KH * D;
              const auto q = random_floats(n * H * D, static_cast<uint32_t>(n + 1), 2.0f);
              const auto k = random_floats(n * row, static_cast<uint32_t>(n + 2), 2.0f);
              const auto v = random_floats(n * row, static_cast<uint32_t>(n + 3), 2.0f);
              std::vector<int32_t> pos(n);
              for (auto& p : pos) p = static_cast<int32_t>(rng() % max_pos);
              // Distinct slots in a shuffled order; every fifth token is padding (token 0 never).
              std::vector<int64_t> slots(static_cast<size_t>(blocks * bs));
              std::iota(slots.begin(), slots.end(), 0);
              std::shuffle(slots.begin(), slots.end(), rng);
              slots.resize(n);
              for (int64_t t = 4; t < n; t += 5) slots[t] = -1;
              std::vector<uint8_t> fill(static_cast<size_t>(2 * blocks * bs * row) * dtype_info(dt).block_bytes);
              for (auto& b : fill) b = static_cast<uint8_t>(rng() & 0x77);  // finite values of every type
              Buffer dp = to_device(*g, pos), ds = to_device(*g, slots);
              std::vector<std::vector<float>> qs, ks;
              std::vector<std::vector<uint8_t>> kcs, vcs;
              for (int fused = 0; fused < 2; ++fused) {
                Buffer dq = to_device(*g, q), dk = to_device(*g, k), dv = to_device(*g, v);
                Cache c = make_cache(*g, dt, blocks, bs, KH, D, fill);
                RopeArgs r{n, H, KH, D, rot, inter, dq.as<float>(), dk.as<float>(), dp.as<int32_t>(),
                           dcs.as<float>(), dsn.as<float>(), max_pos};
                KvWriteArgs w{n, dk.as<float>(), dv.as<float>(), ds.as<int64_t>()};
                if (fused) {
                  ASSERT_TRUE(g->rope_kv_write(r, w, c.layer).ok()) << what;
                } else {
                  ASSERT_TRUE(g->rope(r).ok());
                  ASSERT_TRUE(g->kv_write(w, c.layer).ok());
                }
                ASSERT_TRUE(g->synchronize().ok()) << what;
                qs.push_back(to_host<float>(*g, dq, q.size()));
                ks.push_back(to_host<float>(*g, dk, k.size()));
                const size_t bytes = fill.size() / 2;
                kcs.push_back(to_host<uint8_t>(*g, c.k, bytes));
                vcs.push_back(to_host<uint8_t>(*g, c.v, bytes));
              }
              expect_bits_equal(qs[0], qs[1], what + " q");
              expect_bits_equal(ks[0], ks[1], what + " k");
              EXPECT_TRUE(kcs[0] == kcs[1]) << what << " k cache";
              EXPECT_TRUE(vcs[0] == vcs[1]) << what << " v cache";
              EXPECT_FALSE(kcs[1] == std::vector<uint8_t>(fill.begin(), fill.begin() + fill.size() / 2))
                  << what << " nothing written";
            }
          }
        }
      }
    }
  }
}

TEST(CudaRopeKvWrite, BadPositionAndSlotAreReported) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const int64_t H = 2, KH = 1, D = 64, max_pos = 16;
  Buffer cs = to_device(*g, random_floats(max_pos * D / 2, 1)), sn = to_device(*g, random_floats(max_pos * D / 2, 2));
  for (int bad = 0; bad < 2; ++bad) {
    Buffer q = to_device(*g, random_floats(H * D, 3)), k = to_device(*g, random_floats(KH * D, 4));
    Buffer v = to_device(*g, random_floats(KH * D, 5));
    Buffer pos = to_device(*g, std::vector<int32_t>{bad == 0 ? int32_t{16} : int32_t{3}});
    Buffer slot = to_device(*g, std::vector<int64_t>{bad == 1 ? int64_t{64} : int64_t{2}});
    Cache c = make_cache(*g, DType::kF32, 4, 16, KH, D, std::vector<uint8_t>(2 * 4 * 16 * KH * D * 4, 0));
    RopeArgs r{1, H, KH, D, D, false, q.as<float>(), k.as<float>(), pos.as<int32_t>(), cs.as<float>(),
               sn.as<float>(), max_pos};
    ASSERT_TRUE(g->rope_kv_write(r, {1, k.as<float>(), v.as<float>(), slot.as<int64_t>()}, c.layer).ok());
    EXPECT_EQ(g->synchronize().code(), StatusCode::kOutOfRange) << (bad == 0 ? "position" : "slot");
  }
}

}  // namespace
}  // namespace lancet
