// Split-KV decode attention (backend/cpu/decode_attention.h) through CpuBackend::paged_attention:
// long-context decode rows, alone and next to prefill chunks and short decodes, against a
// double-precision reference (for BF16 and FP8 caches, over the values the cache holds: the
// reference encoders of core/dtype.h, FP8 times its scale); and the same bits whatever the
// batch and the thread count.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "backend/cpu/decode_attention.h"
#include "cpu_test_util.h"

namespace lancet {
namespace {

using testing::available_isas;
using testing::cpu_backend;
using testing::random_floats;

struct Seq {
  int64_t cached;  // tokens already in the cache
  int64_t q_len;   // new tokens this step
};

struct Case {
  int64_t block_size = 16;
  DType dtype = DType::kF32;
  int64_t num_heads = 8, num_kv_heads = 2, head_dim = 64;
  std::vector<Seq> seqs;
  uint32_t seed = 1;
  float q_scale = 1.f;  // larger queries sharpen the softmax (exercises the running max)
  float k_scale = 1.f, v_scale = 1.f;  // FP8 caches only
};

// Runs one paged_attention call and returns its output; *ref gets the double reference.
std::vector<float> run(Backend& be, const Case& cs, std::vector<double>* ref) {
  const int64_t S = static_cast<int64_t>(cs.seqs.size()), bs = cs.block_size;
  const int64_t kv_row = cs.num_kv_heads * cs.head_dim, q_row = cs.num_heads * cs.head_dim;
  std::vector<std::vector<float>> K(S), V(S), Q(S);
  int64_t max_blocks = 0, total_blocks = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t ctx = cs.seqs[s].cached + cs.seqs[s].q_len;
    K[s] = random_floats(ctx * kv_row, cs.seed + 10 * s + 1);
    V[s] = random_floats(ctx * kv_row, cs.seed + 10 * s + 2);
    Q[s] = random_floats(cs.seqs[s].q_len * q_row, cs.seed + 10 * s + 3, cs.q_scale);
    const int64_t nb = (ctx + bs - 1) / bs;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
  }
  const int64_t num_blocks = total_blocks + 2;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(cs.seed));
  std::vector<int32_t> tables(S * max_blocks, -1);
  for (int64_t s = 0, next = 0; s < S; ++s)
    for (int64_t b = 0; b < (cs.seqs[s].cached + cs.seqs[s].q_len + bs - 1) / bs; ++b)
      tables[s * max_blocks + b] = ids[next++];
  const size_t elem = cs.dtype == DType::kF32 ? 4 : cs.dtype == DType::kF8E4M3 ? 1 : 2;
  auto kbuf = be.alloc(num_blocks * bs * kv_row * elem).value();
  auto vbuf = be.alloc(num_blocks * bs * kv_row * elem).value();
  KvCacheLayer cache;
  cache.dtype = cs.dtype;
  cache.k_scale = cs.k_scale;
  cache.v_scale = cs.v_scale;
  cache.num_blocks = num_blocks;
  cache.block_size = bs;
  cache.num_kv_heads = cs.num_kv_heads;
  cache.head_dim = cs.head_dim;
  cache.k = kbuf.data();
  cache.v = vbuf.data();
  // Every token's K/V written up front (the step's own keys included, as kv_write does
  // before attention).
  for (int64_t s = 0; s < S; ++s) {
    const int64_t ctx = cs.seqs[s].cached + cs.seqs[s].q_len;
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < ctx; ++p) slots.push_back(int64_t{tables[s * max_blocks + p / bs]} * bs + p % bs);
    KvWriteArgs w{ctx, K[s].data(), V[s].data(), slots.data()};
    EXPECT_TRUE(be.kv_write(w, cache).ok());
  }
  std::vector<float> q;
  std::vector<int32_t> qstart{0}, ctx_lens;
  for (int64_t s = 0; s < S; ++s) {
    q.insert(q.end(), Q[s].begin(), Q[s].end());
    qstart.push_back(qstart.back() + static_cast<int32_t>(cs.seqs[s].q_len));
    ctx_lens.push_back(static_cast<int32_t>(cs.seqs[s].cached + cs.seqs[s].q_len));
  }
  const int64_t T = qstart.back();
  std::vector<float> out(T * q_row, -7.f);
  PagedAttentionArgs a;
  a.num_tokens = T;
  a.num_seqs = S;
  a.num_heads = cs.num_heads;
  a.max_blocks_per_seq = max_blocks;
  a.scale = 1.0f / std::sqrt(static_cast<float>(cs.head_dim));
  a.q = q.data();
  a.query_start = qstart.data();
  a.context_lens = ctx_lens.data();
  a.block_tables = tables.data();
  a.out = out.data();
  Status st = be.paged_attention(a, cache);
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!ref) return out;

  // What the cache holds for x, as a double: FP8 stores e4m3(x / scale) and reads code * scale.
  auto kv_val = [&](float x, float scale) -> double {
    if (cs.dtype == DType::kBF16) return bf16_to_f32(f32_to_bf16(x));
    if (cs.dtype == DType::kF8E4M3) return double{fp8e4m3_to_f32(f32_to_fp8e4m3(x / scale, true))} * scale;
    return x;
  };
  const int64_t G = cs.num_heads / cs.num_kv_heads, hd = cs.head_dim;
  ref->assign(out.size(), 0.0);
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t t = 0; t < cs.seqs[s].q_len; ++t) {
      const int64_t pos = cs.seqs[s].cached + t;
      for (int64_t h = 0; h < cs.num_heads; ++h) {
        const int64_t kh = h / G;
        std::vector<double> sc(pos + 1);
        double m = -1e300;
        for (int64_t j = 0; j <= pos; ++j) {
          double d = 0;
          for (int64_t k = 0; k < hd; ++k)
            d += double{Q[s][(t * cs.num_heads + h) * hd + k]} * kv_val(K[s][(j * cs.num_kv_heads + kh) * hd + k], cs.k_scale);
          sc[j] = d * a.scale;
          m = std::max(m, sc[j]);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - m));
        for (int64_t k = 0; k < hd; ++k) {
          double o = 0;
          for (int64_t j = 0; j <= pos; ++j) o += sc[j] * kv_val(V[s][(j * cs.num_kv_heads + kh) * hd + k], cs.v_scale);
          (*ref)[((qstart[s] + t) * cs.num_heads + h) * hd + k] = o / sum;
        }
      }
    }
  }
  return out;
}

double rel_err(const std::vector<float>& got, const std::vector<double>& ref) {
  double e = 0, m = 1e-30;
  for (size_t i = 0; i < got.size(); ++i) {
    e = std::max(e, std::fabs(got[i] - ref[i]));
    m = std::max(m, std::fabs(ref[i]));
  }
  return e / m;
}

TEST(DecodeAttention, LongContextsMatchDoubleReference) {
  // The split path's threshold and partition edges (255/256/257 keys, one past a partition,
  // a last partition of one key), next to a prefill chunk and a short decode that stay on
  // the general kernel.
  const std::vector<Seq> seqs = {{254, 1}, {255, 1}, {256, 1}, {512, 1}, {1300, 1}, {40, 9}, {3, 1}};
  for (const std::string& isa : available_isas()) {
    auto be = cpu_backend(isa);
    for (int64_t bs : {1, 16}) {
      for (DType dt : {DType::kF32, DType::kBF16}) {
        Case cs;
        cs.block_size = bs;
        cs.dtype = dt;
        cs.seqs = seqs;
        cs.seed = 7 + static_cast<uint32_t>(bs);
        std::vector<double> ref;
        const auto out = run(*be, cs, &ref);
        EXPECT_LT(rel_err(out, ref), 2e-6) << isa << " block " << bs << " " << dtype_name(dt);
      }
    }
  }
}

TEST(DecodeAttention, GroupSizesAndOddHeadDims) {
  // Group sizes 1..8 take the register-blocked kernels, 12 the generic one; head_dim 72 and 40
  // leave a tail after the last full vector. Sharp softmax (q x 8) moves the running max.
  struct Geo {
    int64_t heads, kv_heads, head_dim;
  };
  for (const Geo& g : {Geo{4, 4, 72}, Geo{6, 2, 128}, Geo{8, 1, 64}, Geo{12, 1, 40}, Geo{10, 2, 64}}) {
    for (const std::string& isa : available_isas()) {
      auto be = cpu_backend(isa);
      Case cs;
      cs.num_heads = g.heads;
      cs.num_kv_heads = g.kv_heads;
      cs.head_dim = g.head_dim;
      cs.seqs = {{700, 1}, {300, 1}};
      cs.q_scale = 8.f;
      cs.seed = 31;
      std::vector<double> ref;
      const auto out = run(*be, cs, &ref);
      EXPECT_LT(rel_err(out, ref), 2e-6) << isa << " heads " << g.heads << "/" << g.kv_heads << " dim " << g.head_dim;
    }
  }
}

TEST(DecodeAttention, SameBitsAloneInABatchAndWithAnyThreadCount) {
  Case alone;
  alone.seqs = {{999, 1}};
  alone.seed = 5;
  Case batch = alone;  // sequence 0 has the same data (seeds are per sequence index)
  batch.seqs = {{999, 1}, {2000, 1}, {17, 30}, {600, 1}};
  for (const std::string& isa : available_isas()) {
    auto be1 = cpu_backend(isa, 1);
    auto be2 = cpu_backend(isa, 2);
    const auto a = run(*be1, alone, nullptr);
    const auto b = run(*be2, alone, nullptr);
    const auto c = run(*be2, batch, nullptr);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << isa << ": 1 vs 2 threads";
    EXPECT_TRUE(std::equal(a.begin(), a.end(), c.begin())) << isa << ": alone vs in a batch";
  }
}

TEST(DecodeAttention, Fp8LongContextsMatchReferenceOverDequantizedValues) {
  // FP8 caches with scales away from 1 (K/V of +-1 land on codes up to ~100 and down into
  // E4M3's subnormals): k_scale must reach the scores and v_scale the output. Partition
  // edges, block sizes 1 and 16, GQA groups of 4 and 3 and a head_dim with a tail, next to
  // rows that stay on the general kernel.
  struct Geo {
    int64_t heads, kv_heads, head_dim;
  };
  const std::vector<Seq> seqs = {{300, 1}, {511, 1}, {1025, 1}, {40, 9}, {3, 1}};
  for (const std::string& isa : available_isas()) {
    auto be = cpu_backend(isa);
    for (int64_t bs : {1, 16}) {
      for (const Geo& g : {Geo{8, 2, 64}, Geo{6, 2, 72}}) {
        Case cs;
        cs.block_size = bs;
        cs.dtype = DType::kF8E4M3;
        cs.num_heads = g.heads;
        cs.num_kv_heads = g.kv_heads;
        cs.head_dim = g.head_dim;
        cs.seqs = seqs;
        cs.q_scale = 4.f;
        cs.k_scale = 0.0173f;
        cs.v_scale = 0.0091f;
        cs.seed = 11 + static_cast<uint32_t>(bs);
        std::vector<double> ref;
        const auto out = run(*be, cs, &ref);
        EXPECT_LT(rel_err(out, ref), 2e-6) << isa << " block " << bs << " heads " << g.heads << " dim " << g.head_dim;
      }
    }
  }
}

TEST(DecodeAttention, Fp8SameBitsAloneInABatchAndWithAnyThreadCount) {
  Case alone;
  alone.dtype = DType::kF8E4M3;
  alone.k_scale = 0.02f;
  alone.v_scale = 0.5f;
  alone.seqs = {{999, 1}};
  alone.seed = 9;
  Case batch = alone;
  batch.seqs = {{999, 1}, {1500, 1}, {17, 30}, {400, 1}};
  for (const std::string& isa : available_isas()) {
    auto be1 = cpu_backend(isa, 1);
    auto be2 = cpu_backend(isa, 2);
    const auto a = run(*be1, alone, nullptr);
    const auto b = run(*be2, alone, nullptr);
    const auto c = run(*be2, batch, nullptr);
    ASSERT_EQ(a.size(), b.size());
    EXPECT_TRUE(std::equal(a.begin(), a.end(), b.begin())) << isa << ": 1 vs 2 threads";
    EXPECT_TRUE(std::equal(a.begin(), a.end(), c.begin())) << isa << ": alone vs in a batch";
  }
}

TEST(DecodeAttention, OnlyLongDecodeRowsTakeTheSplitPath) {
  KvCacheLayer c;
  c.dtype = DType::kF32;
  EXPECT_TRUE(cpu::decode_attention_handles(1, cpu::kDecodeMinKeys, c));
  EXPECT_FALSE(cpu::decode_attention_handles(1, cpu::kDecodeMinKeys - 1, c));
  EXPECT_FALSE(cpu::decode_attention_handles(2, 5000, c));
  c.dtype = DType::kBF16;
  EXPECT_TRUE(cpu::decode_attention_handles(1, 5000, c));
  c.dtype = DType::kF8E4M3;
  EXPECT_TRUE(cpu::decode_attention_handles(1, 5000, c));
  EXPECT_FALSE(cpu::decode_attention_handles(1, cpu::kDecodeMinKeys - 1, c));
  c.dtype = DType::kF16;  // not a CPU cache type
  EXPECT_FALSE(cpu::decode_attention_handles(1, 5000, c));
}

}  // namespace
}  // namespace lancet
