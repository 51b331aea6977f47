// FP8 E4M3 KV cache on the CPU backend: the codes kv_write stores match core's reference
// encoder (x / scale, nearest even, saturating), and paged attention over an FP8 cache
// matches a double-precision reference computed from the dequantized K/V (tight) and stays
// close to the reference over the unquantized K/V (bounded by E4M3's 3 mantissa bits).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <random>

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

// Writes `vals` as one token of num_kv_heads = 1, head_dim = n into an FP8 cache and returns
// the stored K and V codes.
void write_codes(Backend& be, const std::vector<float>& vals, float k_scale, float v_scale, std::vector<uint8_t>* kc,
                 std::vector<uint8_t>* vc) {
  const int64_t n = static_cast<int64_t>(vals.size());
  auto kb = be.alloc(n).value();
  auto vb = be.alloc(n).value();
  KvCacheLayer c;
  c.dtype = DType::kF8E4M3;
  c.k_scale = k_scale;
  c.v_scale = v_scale;
  c.num_blocks = 1;
  c.block_size = 1;
  c.num_kv_heads = 1;
  c.head_dim = n;
  c.k = kb.data();
  c.v = vb.data();
  std::vector<int64_t> slot{0};
  KvWriteArgs w{1, vals.data(), vals.data(), slot.data()};
  Status st = be.kv_write(w, c);
  ASSERT_TRUE(st.ok()) << st.to_string();
  kc->assign(kb.as<uint8_t>(), kb.as<uint8_t>() + n);
  vc->assign(vb.as<uint8_t>(), vb.as<uint8_t>() + n);
}

float bits_to_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// An FP8 cache layer over freshly allocated K and V buffers of the tables' blocks.
struct Fp8Cache {
  Buffer k, v;
  KvCacheLayer layer;
};
Fp8Cache fp8_cache(Backend& be, const PagedTables& t, int64_t block_size, int64_t num_kv_heads, int64_t head_dim,
                   float k_scale, float v_scale) {
  Fp8Cache c;
  const int64_t elems = t.num_blocks * block_size * num_kv_heads * head_dim;
  c.k = be.alloc(elems).value();
  c.v = be.alloc(elems).value();
  c.layer.dtype = DType::kF8E4M3;
  c.layer.k_scale = k_scale;
  c.layer.v_scale = v_scale;
  c.layer.num_blocks = t.num_blocks;
  c.layer.block_size = block_size;
  c.layer.num_kv_heads = num_kv_heads;
  c.layer.head_dim = head_dim;
  c.layer.k = c.k.data();
  c.layer.v = c.v.data();
  return c;
}

// sum |a[i] - b[i]| over the elements of two outputs of the same size.
template <typename A, typename B>
double sum_abs_diff(const std::vector<A>& a, const std::vector<B>& b) {
  double e = 0;
  for (size_t i = 0; i < a.size() && i < b.size(); ++i) e += std::fabs(static_cast<double>(a[i]) - b[i]);
  return e;
}

// x as the cache holds it: rounded to E4M3 under `scale`, dequantized.
double dequantized(float x, float scale) {
  return fp8e4m3_to_f32(f32_to_fp8e4m3(x / scale, true)) * static_cast<double>(scale);
}

// Each row of d values rounded to E4M3 under its own scale (absmax / 448); two_terms: to the
// sum of that rounding and the rounding of what it left (Fp8AttentionMath::kE4m3x2Query).
void round_rows_e4m3(std::vector<float>* q, int64_t d, bool two_terms = false) {
  for (size_t r = 0; r < q->size(); r += d) {
    float amax = 0.f;
    for (int64_t i = 0; i < d; ++i) amax = std::max(amax, std::fabs((*q)[r + i]));
    for (int64_t i = 0; i < d; ++i) {
      const float x = (*q)[r + i] * (448.f / amax), hi = fp8e4m3_to_f32(f32_to_fp8e4m3(x, true));
      (*q)[r + i] = (two_terms ? hi + fp8e4m3_to_f32(f32_to_fp8e4m3(x - hi, true)) : hi) * (amax / 448.f);
    }
  }
}

// The attention tests below: 8 query and 2 KV heads of head_dim 64, pages of 16 tokens, an FP8
// cache with K scale 2 / 448 and V scale 0.5 / 448 on the scalar CPU backend.
constexpr int64_t kH = 8, kKvh = 2, kD = 64, kPage = 16;
constexpr float kKScale = 2.f / 448.f, kVScale = 0.5f / 448.f;

// Per sequence: random K and V (context rows) and Q (query rows), drawn from seeds
// seed + 10 s, seed + 1 + 10 s and seed + 2 + 10 s.
struct AttentionInputs {
  std::vector<std::vector<float>> k, v, q;
};
AttentionInputs draw_inputs(const std::vector<SeqSpec>& seqs, uint32_t seed) {
  AttentionInputs in;
  for (size_t s = 0; s < seqs.size(); ++s) {
    const int64_t ctx = seqs[s].cached + seqs[s].q_len;
    const uint32_t sd = seed + 10 * static_cast<uint32_t>(s);
    in.k.push_back(random_floats(ctx * kKvh * kD, sd, 2.f));
    in.v.push_back(random_floats(ctx * kKvh * kD, sd + 1, 0.5f));
    in.q.push_back(random_floats(seqs[s].q_len * kH * kD, sd + 2, 3.f));
  }
  return in;
}

// The query as drawn, or rounded here (each row under its own scale) to one or two E4M3 terms.
enum class QueryRounding { kNone, kOneTerm, kTwoTerms };

// Writes the inputs into an FP8 cache (pages shuffled by table_seed) and attends under `math`,
// the query first rounded as `rounding` says.
std::vector<float> fp8_attention(const std::vector<SeqSpec>& seqs, AttentionInputs in, Fp8AttentionMath math,
                                 QueryRounding rounding, uint32_t table_seed) {
  auto be = cpu_backend("scalar");
  be->set_fp8_attention_math(math);
  if (rounding != QueryRounding::kNone)
    for (auto& q : in.q) round_rows_e4m3(&q, kD, rounding == QueryRounding::kTwoTerms);
  const PagedTables t = shuffled_tables(seqs, kPage, 2, table_seed);
  const Fp8Cache cache = fp8_cache(*be, t, kPage, kKvh, kD, kKScale, kVScale);
  return write_and_attend(*be, cache.layer, t, seqs, in.k, in.v, in.q, kH);
}

TEST(KvFp8, WriteMatchesReferenceEncoder) {
  auto be = cpu_backend("scalar");
  // A sweep over float bit patterns (both signs, every exponent, zeros, subnormals, inf, NaN)
  // plus the rounding ties and the edges of the format.
  std::vector<float> vals;
  for (uint64_t u = 0; u <= 0xffffffffull; u += 65521) vals.push_back(bits_to_float(static_cast<uint32_t>(u)));
  for (float x : {0.f, -0.f, 448.f, -448.f, 449.f, 463.99f, 464.f, 465.f, 480.f, 1e30f, 0.001953125f,
                  0.0009765625f, 0.0029296875f, 0.015625f, 0.0146484375f, 1.0625f, 1.1875f, 17.f, 240.f, -232.f,
                  std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                  std::numeric_limits<float>::denorm_min()})
    vals.push_back(x);
  std::mt19937 g(5);
  std::uniform_real_distribution<float> logmag(-14.f, 10.f);
  for (int i = 0; i < 20000; ++i) vals.push_back((i & 1 ? -1.f : 1.f) * std::exp2(logmag(g)));
  for (float ks : {1.0f, 0.37f}) {
    std::vector<uint8_t> kc, vc;
    write_codes(*be, vals, ks, 2.5f, &kc, &vc);
    int bad = 0;
    for (size_t i = 0; i < vals.size(); ++i) {
      const uint8_t want_k = f32_to_fp8e4m3(vals[i] / ks, true), want_v = f32_to_fp8e4m3(vals[i] / 2.5f, true);
      if (kc[i] != want_k || vc[i] != want_v) {
        if (++bad < 5)
          ADD_FAILURE() << "x " << vals[i] << " scale " << ks << ": k " << int(kc[i]) << " want " << int(want_k)
                        << ", v " << int(vc[i]) << " want " << int(want_v);
      }
    }
    EXPECT_EQ(bad, 0);
  }
}

TEST(KvFp8, SaturatesAtTheFormatMaximum) {
  auto be = cpu_backend("scalar");
  const float scale = 0.5f;  // representable range +-224
  std::vector<float> vals = {300.f, -1e6f, std::numeric_limits<float>::infinity(), 224.f, 223.f, 1e-9f};
  std::vector<uint8_t> kc, vc;
  write_codes(*be, vals, scale, scale, &kc, &vc);
  EXPECT_EQ(fp8e4m3_to_f32(kc[0]) * scale, 224.f);
  EXPECT_EQ(fp8e4m3_to_f32(kc[1]) * scale, -224.f);
  EXPECT_EQ(fp8e4m3_to_f32(kc[2]) * scale, 224.f);  // never NaN from an overflow
  EXPECT_EQ(fp8e4m3_to_f32(kc[3]) * scale, 224.f);
  EXPECT_EQ(fp8e4m3_to_f32(kc[4]) * scale, 224.f);  // 446 rounds up to 448
  EXPECT_EQ(fp8e4m3_to_f32(kc[5]), 0.f);            // below half the smallest subnormal
}

TEST(KvFp8, RejectsBadScales) {
  auto be = cpu_backend("scalar");
  auto kb = be->alloc(64).value();
  auto vb = be->alloc(64).value();
  KvCacheLayer c;
  c.dtype = DType::kF8E4M3;
  c.num_blocks = 4;
  c.block_size = 16;
  c.num_kv_heads = 1;
  c.head_dim = 1;
  c.k = kb.data();
  c.v = vb.data();
  std::vector<float> x(1, 1.f);
  std::vector<int64_t> slot{0};
  KvWriteArgs w{1, x.data(), x.data(), slot.data()};
  for (float bad : {0.f, -1.f, std::numeric_limits<float>::quiet_NaN(), std::numeric_limits<float>::infinity()}) {
    c.k_scale = bad;
    c.v_scale = 1.f;
    EXPECT_EQ(be->kv_write(w, c).code(), StatusCode::kInvalidArgument) << bad;
    c.k_scale = 1.f;
    c.v_scale = bad;
    EXPECT_EQ(be->kv_write(w, c).code(), StatusCode::kInvalidArgument) << bad;
  }
}

struct AttentionErrors {
  double vs_dequantized = 0;  // max |out - ref(dequantized K/V)| / max |ref|
  double vs_exact = 0;        // max |out - ref(unquantized K/V)| / max |ref|
};

// K has a few large channels (as real keys after rope do) so the per-layer scale is set by
// outliers and most values sit far below 448 * scale.
AttentionErrors run_case(const std::string& isa, int64_t block_size, int64_t num_heads, int64_t num_kv_heads,
                         int64_t head_dim, const std::vector<SeqSpec>& seqs, uint32_t seed) {
  auto be = cpu_backend(isa);
  const int64_t S = static_cast<int64_t>(seqs.size());
  const int64_t kv_row = num_kv_heads * head_dim, q_row = num_heads * head_dim;
  std::vector<std::vector<float>> K(S), V(S), Q(S);
  float kmax = 0, vmax = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t ctx = seqs[s].cached + seqs[s].q_len;
    K[s] = random_floats(ctx * kv_row, seed + 10 * s + 1, 2.f);
    for (int64_t i = 0; i < ctx * kv_row; i += 7) K[s][i] *= 6.f;
    V[s] = random_floats(ctx * kv_row, seed + 10 * s + 2, 0.5f);
    Q[s] = random_floats(seqs[s].q_len * q_row, seed + 10 * s + 3);
    for (float x : K[s]) kmax = std::max(kmax, std::fabs(x));
    for (float x : V[s]) vmax = std::max(vmax, std::fabs(x));
  }
  const float k_scale = kmax / 448.f, v_scale = vmax / 448.f;
  const PagedTables t = shuffled_tables(seqs, block_size, 2, seed);
  const Fp8Cache cache = fp8_cache(*be, t, block_size, num_kv_heads, head_dim, k_scale, v_scale);
  const std::vector<float> out = write_and_attend(*be, cache.layer, t, seqs, K, V, Q, num_heads);

  const std::vector<double> ref_deq = reference_attention(
      seqs, Q, num_heads, num_kv_heads, head_dim, [&](size_t s, int64_t i) { return dequantized(K[s][i], k_scale); },
      [&](size_t s, int64_t i) { return dequantized(V[s][i], v_scale); });
  const std::vector<double> ref_exact = reference_attention(
      seqs, Q, num_heads, num_kv_heads, head_dim, [&](size_t s, int64_t i) { return static_cast<double>(K[s][i]); },
      [&](size_t s, int64_t i) { return static_cast<double>(V[s][i]); });
  EXPECT_EQ(ref_deq.size(), out.size());
  EXPECT_EQ(ref_exact.size(), out.size());
  double e_deq = 0, e_exact = 0, max_ref = 0;
  for (size_t i = 0; i < out.size() && i < ref_deq.size() && i < ref_exact.size(); ++i) {
    e_deq = std::max(e_deq, std::fabs(ref_deq[i] - out[i]));
    e_exact = std::max(e_exact, std::fabs(ref_exact[i] - out[i]));
    max_ref = std::max({max_ref, std::fabs(ref_deq[i]), std::fabs(ref_exact[i])});
  }
  AttentionErrors err;
  err.vs_dequantized = e_deq / max_ref;
  err.vs_exact = e_exact / max_ref;
  return err;
}

TEST(KvFp8, AttentionMatchesDequantizedReference) {
  // prefill from 0, a chunk after cached tokens, decodes (one past 256 keys, where long-context
  // decode may take a split-KV path), a longer chunk; GQA and MHA; head_dim not a multiple of
  // the SIMD width (72) so the scalar tails run too.
  const std::vector<SeqSpec> seqs = {{0, 7}, {37, 20}, {96, 1}, {1, 1}, {15, 61}, {300, 1}};
  for (const std::string& isa : available_isas()) {
    for (int64_t bs : {1, 16}) {
      for (auto [h, kvh, d] : {std::tuple<int64_t, int64_t, int64_t>{8, 2, 64}, {4, 4, 72}, {8, 1, 128}}) {
        AttentionErrors e = run_case(isa, bs, h, kvh, d, seqs, 31 + static_cast<uint32_t>(d));
        // Same codes and scales as the reference: only f32 vs double arithmetic differs.
        EXPECT_LT(e.vs_dequantized, 2e-6) << isa << " bs " << bs << " heads " << h << "/" << kvh << " d " << d;
        // E4M3 keeps 3 mantissa bits: each V element is off by <= 2^-4 of itself, and K's
        // rounding moves the scores (up to ~0.3 here, with keys up to 12), so rows that see only
        // a few keys (a sequence's first tokens) are off by several percent of max |out|;
        // measured 0.055-0.066 on these cases.
        EXPECT_LT(e.vs_exact, 0.1) << isa << " bs " << bs << " heads " << h << "/" << kvh << " d " << d;
        // ... and the quantization is really there (a kernel reading f32 would be ~1e-7).
        EXPECT_GT(e.vs_exact, 1e-4) << isa;
      }
    }
  }
}

// Fp8AttentionMath::kE4m3Query emulates the GPU's E4M3 query: on a prompt-chunk step over an
// fp8 cache each query row is rounded to E4M3 under its own scale (absmax / 448) before
// attention, so the output is the kF16 output on that rounded query, bit for bit; decode-shaped
// steps are untouched.
TEST(KvFp8, E4m3QueryRoundsThePromptStepsQueryRows) {
  auto run = [](const std::vector<SeqSpec>& seqs, Fp8AttentionMath math, QueryRounding q) {
    return fp8_attention(seqs, draw_inputs(seqs, 70), math, q, 9);
  };
  const std::vector<SeqSpec> prompt = {{0, 70}, {30, 40}};  // 110 rows for 2 sequences
  const std::vector<float> e4m3 = run(prompt, Fp8AttentionMath::kE4m3Query, QueryRounding::kNone);
  EXPECT_EQ(e4m3, run(prompt, Fp8AttentionMath::kF16, QueryRounding::kOneTerm));
  EXPECT_NE(e4m3, run(prompt, Fp8AttentionMath::kF16, QueryRounding::kNone));  // the rounding is really there
  const std::vector<SeqSpec> decode = {{5, 1}, {96, 1}, {300, 2}};
  EXPECT_EQ(run(decode, Fp8AttentionMath::kE4m3Query, QueryRounding::kNone),
            run(decode, Fp8AttentionMath::kF16, QueryRounding::kNone));
}

// Fp8AttentionMath::kE4m3x2Query holds each query row of a prompt-chunk step as two E4M3 terms:
// the output is the kF16 output on the two-term query, bit for bit, and far closer to the
// unrounded query's than one E4M3 term gets; decode-shaped steps are untouched.
TEST(KvFp8, TwoTermE4m3QueryRoundsThePromptStepsQueryRows) {
  auto run = [](const std::vector<SeqSpec>& seqs, Fp8AttentionMath math, QueryRounding q) {
    return fp8_attention(seqs, draw_inputs(seqs, 90), math, q, 9);
  };
  const std::vector<SeqSpec> prompt = {{0, 70}, {30, 40}};
  const std::vector<float> two = run(prompt, Fp8AttentionMath::kE4m3x2Query, QueryRounding::kNone);
  EXPECT_EQ(two, run(prompt, Fp8AttentionMath::kF16, QueryRounding::kTwoTerms));
  const std::vector<float> exact = run(prompt, Fp8AttentionMath::kF16, QueryRounding::kNone);
  const std::vector<float> one = run(prompt, Fp8AttentionMath::kE4m3Query, QueryRounding::kNone);
  ASSERT_EQ(two.size(), exact.size());
  ASSERT_EQ(one.size(), exact.size());
  const double e_two = sum_abs_diff(two, exact), e_one = sum_abs_diff(one, exact);
  EXPECT_GT(e_two, 0.0);           // the second term's rounding is there ...
  EXPECT_LT(e_two, e_one / 8.0);   // ... and a small part of the first term's error
  const std::vector<SeqSpec> decode = {{5, 1}, {96, 1}, {300, 2}};
  EXPECT_EQ(run(decode, Fp8AttentionMath::kE4m3x2Query, QueryRounding::kNone),
            run(decode, Fp8AttentionMath::kF16, QueryRounding::kNone));
}

// Fp8AttentionMath::kE4m3QueryAndP also rounds P to E4M3 on prompt-chunk steps (an estimate of
// an FP8 P V path): over one 64-key chunk, where the running maximum is the row's maximum, the
// output follows a double reference with the rounded query, the cache's dequantized K/V and P
// rounded to E4M3 far closer than the query-only path does; decode steps are untouched. The same
// for kE4m3x2QueryAndP against kE4m3x2Query (the query rounded to two terms).
TEST(KvFp8, E4m3QueryAndPRoundsTheProbabilities) {
  auto run = [](const std::vector<SeqSpec>& seqs, Fp8AttentionMath math) {
    return fp8_attention(seqs, draw_inputs(seqs, 80), math, QueryRounding::kNone, 5);
  };
  for (const bool two_terms : {false, true}) {
    SCOPED_TRACE(two_terms ? "two-term query" : "one-term query");
    const Fp8AttentionMath with_p_math =
        two_terms ? Fp8AttentionMath::kE4m3x2QueryAndP : Fp8AttentionMath::kE4m3QueryAndP;
    const Fp8AttentionMath query_math = two_terms ? Fp8AttentionMath::kE4m3x2Query : Fp8AttentionMath::kE4m3Query;
    const std::vector<SeqSpec> prompt = {{0, 64}};  // 64 rows, 64 keys: one chunk
    AttentionInputs in = draw_inputs(prompt, 80);
    round_rows_e4m3(&in.q[0], kD, two_terms);
    const std::vector<double> ref = reference_attention(
        prompt, in.q, kH, kKvh, kD, [&](size_t s, int64_t i) { return dequantized(in.k[s][i], kKScale); },
        [&](size_t s, int64_t i) { return dequantized(in.v[s][i], kVScale); },
        [](double p) {  // p * 256 in E4M3, as the GPU's FP8 P V
          return static_cast<double>(fp8e4m3_to_f32(f32_to_fp8e4m3(static_cast<float>(p * 256.0), true))) / 256.0;
        });
    const std::vector<float> with_p = run(prompt, with_p_math);
    const std::vector<float> query_only = run(prompt, query_math);
    ASSERT_EQ(with_p.size(), ref.size());
    ASSERT_EQ(query_only.size(), ref.size());
    const double e_p = sum_abs_diff(with_p, ref) / static_cast<double>(ref.size());
    const double e_q = sum_abs_diff(query_only, ref) / static_cast<double>(ref.size());
    EXPECT_GT(e_q, 1e-4);      // P's rounding moves the output ...
    EXPECT_LT(e_p, e_q / 20);  // ... and the E4M3-P path follows it
    const std::vector<SeqSpec> decode = {{5, 1}, {96, 1}, {300, 2}};
    EXPECT_EQ(run(decode, with_p_math), run(decode, Fp8AttentionMath::kF16));
  }
}

}  // namespace
}  // namespace lancet
