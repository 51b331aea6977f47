// KV write + varlen paged attention vs a contiguous per-sequence reference computed in double:
// several sequences with chunk offsets (earlier chunks already cached), decode rows, GQA,
// block sizes 1 and 16, f32 and bf16 caches, every ISA.
#include <algorithm>
#include <cmath>

#include "cpu_test_util.h"
#include "paged_step_util.h"

namespace lancet {
namespace {

using testing::available_isas;
using testing::cpu_backend;
using testing::PagedTables;
using testing::random_floats;
using testing::reference_attention;
using testing::SeqSpec;
using testing::shuffled_tables;
using testing::write_and_attend;

void run_case(const std::string& isa, int64_t block_size, DType kv_dtype, int64_t num_heads, int64_t num_kv_heads,
              int64_t head_dim, const std::vector<SeqSpec>& seqs, uint32_t seed) {
  auto be = cpu_backend(isa);
  const int64_t S = static_cast<int64_t>(seqs.size());
  const int64_t kv_row = num_kv_heads * head_dim, q_row = num_heads * head_dim;
  // Full per-sequence K/V/Q (contiguous), as the reference sees them.
  std::vector<std::vector<float>> K(S), Vv(S), Q(S);
  for (int64_t s = 0; s < S; ++s) {
    const int64_t ctx = seqs[s].cached + seqs[s].q_len;
    K[s] = random_floats(ctx * kv_row, seed + 10 * s + 1);
    Vv[s] = random_floats(ctx * kv_row, seed + 10 * s + 2);
    Q[s] = random_floats(seqs[s].q_len * q_row, seed + 10 * s + 3);
  }
  const PagedTables t = shuffled_tables(seqs, block_size, 3, seed);
  const size_t elem = kv_dtype == DType::kF32 ? 4 : 2;
  auto kbuf = be->alloc(t.num_blocks * block_size * kv_row * elem).value();
  auto vbuf = be->alloc(t.num_blocks * block_size * kv_row * elem).value();
  KvCacheLayer cache{kv_dtype, t.num_blocks, block_size, num_kv_heads, head_dim, kbuf.data(), vbuf.data()};
  const std::vector<float> out = write_and_attend(*be, cache, t, seqs, K, Vv, Q, num_heads);

  // Reference: K/V rounded to bf16 first when the cache is bf16.
  auto kv_val = [&](float x) { return kv_dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(x)) : x; };
  const std::vector<double> ref = reference_attention(
      seqs, Q, num_heads, num_kv_heads, head_dim, [&](size_t s, int64_t i) { return kv_val(K[s][i]); },
      [&](size_t s, int64_t i) { return kv_val(Vv[s][i]); });
  ASSERT_EQ(ref.size(), out.size());
  double max_err = 0, max_ref = 0;
  for (size_t i = 0; i < ref.size(); ++i) {
    max_err = std::max(max_err, std::fabs(ref[i] - out[i]));
    max_ref = std::max(max_ref, std::fabs(ref[i]));
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
