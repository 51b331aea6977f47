// KV write + varlen paged attention vs a contiguous per-sequence reference computed in double:
// several sequences with chunk offsets (earlier chunks already cached), decode rows, GQA,
// block sizes 1 and 16, f32 and bf16 caches, every ISA.
#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>

#include "cpu_test_util.h"

namespace lancet {
namespace {

using testing::available_isas;
using testing::cpu_backend;
using testing::random_floats;

struct SeqSpec {
  int64_t cached;  // tokens already in the cache from earlier steps
  int64_t q_len;   // new tokens this step
};

void run_case(const std::string& isa, int64_t block_size, DType kv_dtype, int64_t num_heads, int64_t num_kv_heads,
              int64_t head_dim, const std::vector<SeqSpec>& seqs, uint32_t seed) {
  auto be = cpu_backend(isa);
  const int64_t S = static_cast<int64_t>(seqs.size());
  const int64_t kv_row = num_kv_heads * head_dim, q_row = num_heads * head_dim;
  // Full per-sequence K/V/Q (contiguous), as the reference sees them.
  std::vector<std::vector<float>> K(S), Vv(S), Q(S);
  int64_t max_blocks = 0, total_blocks = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t ctx = seqs[s].cached + seqs[s].q_len;
    K[s] = random_floats(ctx * kv_row, seed + 10 * s + 1);
    Vv[s] = random_floats(ctx * kv_row, seed + 10 * s + 2);
    Q[s] = random_floats(seqs[s].q_len * q_row, seed + 10 * s + 3);
    const int64_t nb = (ctx + block_size - 1) / block_size;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
  }
  // Shuffled block ids so the tables are not the identity.
  const int64_t num_blocks = total_blocks + 3;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  std::vector<int32_t> tables(S * max_blocks, -1);
  int64_t next = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t nb = (seqs[s].cached + seqs[s].q_len + block_size - 1) / block_size;
    for (int64_t b = 0; b < nb; ++b) tables[s * max_blocks + b] = ids[next++];
  }
  const size_t elem = kv_dtype == DType::kF32 ? 4 : 2;
  auto kbuf = be->alloc(num_blocks * block_size * kv_row * elem).value();
  auto vbuf = be->alloc(num_blocks * block_size * kv_row * elem).value();
  KvCacheLayer cache{kv_dtype, num_blocks, block_size, num_kv_heads, head_dim, kbuf.data(), vbuf.data()};
  auto slot = [&](int64_t s, int64_t pos) {
    return static_cast<int64_t>(tables[s * max_blocks + pos / block_size]) * block_size + pos % block_size;
  };
  // Earlier chunks: written by a first kv_write call per sequence.
  for (int64_t s = 0; s < S; ++s) {
    if (seqs[s].cached == 0) continue;
    std::vector<int64_t> slots;
    for (int64_t p = 0; p < seqs[s].cached; ++p) slots.push_back(slot(s, p));
    KvWriteArgs w{seqs[s].cached, K[s].data(), Vv[s].data(), slots.data()};
    ASSERT_TRUE(be->kv_write(w, cache).ok());
  }
  // This step: all sequences' new tokens in one batch.
  std::vector<float> q, knew, vnew;
  std::vector<int64_t> slots;
  std::vector<int32_t> qstart{0}, ctx_lens;
  for (int64_t s = 0; s < S; ++s) {
    q.insert(q.end(), Q[s].begin(), Q[s].end());
    knew.insert(knew.end(), K[s].begin() + seqs[s].cached * kv_row, K[s].end());
    vnew.insert(vnew.end(), Vv[s].begin() + seqs[s].cached * kv_row, Vv[s].end());
    for (int64_t p = seqs[s].cached; p < seqs[s].cached + seqs[s].q_len; ++p) slots.push_back(slot(s, p));
    qstart.push_back(qstart.back() + static_cast<int32_t>(seqs[s].q_len));
    ctx_lens.push_back(static_cast<int32_t>(seqs[s].cached + seqs[s].q_len));
  }
  const int64_t T = qstart.back();
  KvWriteArgs w{T, knew.data(), vnew.data(), slots.data()};
  ASSERT_TRUE(be->kv_write(w, cache).ok());
  std::vector<float> out(T * q_row, -7.f);
  PagedAttentionArgs a;
  a.num_tokens = T;
  a.num_seqs = S;
  a.num_heads = num_heads;
  a.max_blocks_per_seq = max_blocks;
  a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
  a.q = q.data();
  a.query_start = qstart.data();
  a.context_lens = ctx_lens.data();
  a.block_tables = tables.data();
  a.out = out.data();
  Status st = be->paged_attention(a, cache);
  ASSERT_TRUE(st.ok()) << st.to_string();

  // Reference: per sequence, per head, causal softmax over the contiguous keys (in double;
  // K/V rounded to bf16 first when the cache is bf16).
  auto kv_val = [&](float x) { return kv_dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(x)) : x; };
  const int64_t G = num_heads / num_kv_heads;
  double max_err = 0, max_ref = 0;
  for (int64_t s = 0; s < S; ++s) {
    for (int64_t t = 0; t < seqs[s].q_len; ++t) {
      const int64_t pos = seqs[s].cached + t;
      for (int64_t h = 0; h < num_heads; ++h) {
        const int64_t kh = h / G;
        std::vector<double> sc(pos + 1);
        double m = -1e300;
        for (int64_t j = 0; j <= pos; ++j) {
          double d = 0;
          for (int64_t k = 0; k < head_dim; ++k)
            d += static_cast<double>(Q[s][(t * num_heads + h) * head_dim + k]) *
                 kv_val(K[s][(j * num_kv_heads + kh) * head_dim + k]);
          sc[j] = d * a.scale;
          m = std::max(m, sc[j]);
        }
        double sum = 0;
        for (double& x : sc) sum += (x = std::exp(x - m));
        for (int64_t k = 0; k < head_dim; ++k) {
          double o = 0;
          for (int64_t j = 0; j <= pos; ++j) o += sc[j] * kv_val(Vv[s][(j * num_kv_heads + kh) * head_dim + k]);
          o /= sum;
          const float got = out[((qstart[s] + t) * num_heads + h) * head_dim + k];
          max_err = std::max(max_err, std::fabs(o - got));
          max_ref = std::max(max_ref, std::fabs(o));
        }
      }
    }
  }
  EXPECT_LT(max_err / max_ref, 2e-6) << "isa " << isa << " block " << block_size << " max_err " << max_err;
}

TEST(PagedAttention, MixedBatchMatchesContiguousReference) {
  // prefill from 0, a chunk after 37 cached tokens, decodes, a long-ish chunk, and a chunk of
  // several work items (the CPU cuts a sequence's queries into runs of up to 128 tokens)
  const std::vector<SeqSpec> seqs = {{0, 7}, {37, 20}, {96, 1}, {1, 1}, {0, 1}, {15, 97}, {10, 300}};
  for (const std::string& isa : available_isas()) {
    for (int64_t bs : {1, 16}) {
      run_case(isa, bs, DType::kF32, 8, 2, 64, seqs, 11);
      run_case(isa, bs, DType::kF32, 4, 4, 72, seqs, 12);   // MHA, head_dim not a SIMD multiple
      run_case(isa, bs, DType::kF32, 16, 2, 40, seqs, 13);  // group 8, head_dim below one AVX-512 tile
    }
  }
}

TEST(PagedAttention, Bf16CacheAndWideGroups) {
  const std::vector<SeqSpec> seqs = {{5, 33}, {0, 1}, {130, 1}};
  for (const std::string& isa : available_isas()) {
    run_case(isa, 16, DType::kBF16, 8, 1, 128, seqs, 21);
    run_case(isa, 1, DType::kBF16, 6, 3, 64, seqs, 22);
  }
}

TEST(PagedAttention, RejectsBadTables) {
  auto be = cpu_backend("scalar");
  auto kbuf = be->alloc(4 * 16 * 64 * 4).value();
  auto vbuf = be->alloc(4 * 16 * 64 * 4).value();
  KvCacheLayer cache{DType::kF32, 4, 16, 1, 64, kbuf.data(), vbuf.data()};
  std::vector<float> q(64), out(64);
  std::vector<int32_t> qs{0, 1}, ctx{20}, table{0, 9};  // block 9 is outside the cache
  PagedAttentionArgs a;
  a.num_tokens = 1;
  a.num_seqs = 1;
  a.num_heads = 1;
  a.max_blocks_per_seq = 2;
  a.q = q.data();
  a.query_start = qs.data();
  a.context_lens = ctx.data();
  a.block_tables = table.data();
  a.out = out.data();
  EXPECT_EQ(be->paged_attention(a, cache).code(), StatusCode::kOutOfRange);
  ctx[0] = 40;  // needs 3 blocks, table holds 2
  EXPECT_EQ(be->paged_attention(a, cache).code(), StatusCode::kOutOfRange);
  std::vector<int64_t> slots{64};
  KvWriteArgs w{1, q.data(), q.data(), slots.data()};
  EXPECT_EQ(be->kv_write(w, cache).code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace lancet
