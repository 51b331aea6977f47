// kv_write and varlen paged attention on the GPU against the CPU backend (itself checked
// against a contiguous per-sequence reference in tests/backend): decode batches (the split-KV
// path), prefill chunks with earlier chunks cached, whole prefills, mixed batches, contexts up
// to 9000, block sizes 1 and 16, head_dim 64 and 128, GQA 1..20, f32, bf16 and fp8 caches, the
// CUDA-core kernel (exact precision) and the tensor-core kernels (fast precision), and mixed
// steps' plans (leading decode rows in the decode kernel, the prompt chunks after them in the
// prompt kernel).
// Both backends read the same cache values and accumulate in f32, so only summation order
// differs: NMSE bound 1e-9 for either cache dtype. kv_write must be bit-exact.
#include <algorithm>
#include <numeric>

#include "backend/cuda/device_info.h"
#include "cuda_test_util.h"

namespace lancet {
namespace {

using namespace lancet::testing;

struct SeqSpec {
  int64_t cached;  // tokens already in the cache
  int64_t q_len;   // new query tokens this step
};

struct Geometry {
  int64_t num_heads, num_kv_heads, head_dim;
};

// kExact runs the CUDA-core kernel for everything (f32 arithmetic: matches the CPU to
// rounding); kFast sends prompt chunks to the tensor-core kernel (BF16 Q, K, V, P).
// fp8_math kE4m3Query (fp8 caches, fast precision): prompt chunks on an sm_90 GPU round each
// query row to E4M3 under its own scale (absmax / 448) before Q K^T; the reference then reads
// the same rounded query, so the bound stays the tensor cores' one. kE4m3x2Query rounds each row
// to two E4M3 terms (hi + the rounding of the rest); its result is also held to the 16-bit
// query's bound against the unrounded query. kE4m3QueryAndP and kE4m3x2QueryAndP also round P
// to E4M3 (the reference's P is unrounded: a looser bound).
// mixed_run, when given, is set when the step's leading decode rows made a mixed-step plan
// (decode kernel, then prompt kernel) and it was checked too.
void run_attention(const Geometry& geo, int64_t block_size, DType kv_dtype, const std::vector<SeqSpec>& seqs,
                   uint32_t seed, ActivationPrecision precision = ActivationPrecision::kExact,
                   Fp8AttentionMath fp8_math = Fp8AttentionMath::kF16, bool* mixed_run = nullptr) {
  if (mixed_run) *mixed_run = false;
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  g->set_activation_precision(precision);
  g->set_fp8_attention_math(fp8_math);
  const int64_t S = static_cast<int64_t>(seqs.size());
  const int64_t D = geo.head_dim, kv_row = geo.num_kv_heads * D, q_row = geo.num_heads * D;
  int64_t max_blocks = 0, total_blocks = 0, T = 0;
  for (const SeqSpec& s : seqs) {
    const int64_t nb = (s.cached + s.q_len + block_size - 1) / block_size;
    max_blocks = std::max(max_blocks, nb);
    total_blocks += nb;
    T += s.q_len;
  }
  const int64_t num_blocks = total_blocks + 5;
  std::vector<int32_t> ids(num_blocks);
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  std::vector<int32_t> tables(S * max_blocks, 0);
  std::vector<int32_t> qstart{0}, ctx;
  int64_t next = 0;
  for (int64_t s = 0; s < S; ++s) {
    const int64_t n = seqs[s].cached + seqs[s].q_len;
    for (int64_t b = 0; b < (n + block_size - 1) / block_size; ++b) tables[s * max_blocks + b] = ids[next++];
    qstart.push_back(qstart.back() + static_cast<int32_t>(seqs[s].q_len));
    ctx.push_back(static_cast<int32_t>(n));
  }
  // The same random cache bytes in both backends (bf16 values are bf16-representable).
  const size_t elems = static_cast<size_t>(num_blocks * block_size * kv_row);
  const auto kf = random_floats(elems, seed + 1), vf = random_floats(elems, seed + 2);
  std::vector<uint8_t> kbytes, vbytes;
  // FP8: the GPU reads e4m3 codes times the scales; the CPU reference reads the same values
  // decoded to f32.
  const float k_scale = 0.0071f, v_scale = 0.0053f;
  std::vector<uint8_t> k8, v8;
  DType ref_dtype = kv_dtype;
  if (kv_dtype == DType::kF8E4M3) {
    ref_dtype = DType::kF32;
    k8.resize(elems);
    v8.resize(elems);
    std::vector<float> kd(elems), vd(elems);
    for (size_t i = 0; i < elems; ++i) {
      k8[i] = f32_to_fp8e4m3(kf[i] / k_scale);
      v8[i] = f32_to_fp8e4m3(vf[i] / v_scale);
      kd[i] = fp8e4m3_to_f32(k8[i]) * k_scale;
      vd[i] = fp8e4m3_to_f32(v8[i]) * v_scale;
    }
    kbytes.assign(reinterpret_cast<const uint8_t*>(kd.data()), reinterpret_cast<const uint8_t*>(kd.data() + elems));
    vbytes.assign(reinterpret_cast<const uint8_t*>(vd.data()), reinterpret_cast<const uint8_t*>(vd.data() + elems));
  } else if (kv_dtype == DType::kF32) {
    kbytes.assign(reinterpret_cast<const uint8_t*>(kf.data()), reinterpret_cast<const uint8_t*>(kf.data() + elems));
    vbytes.assign(reinterpret_cast<const uint8_t*>(vf.data()), reinterpret_cast<const uint8_t*>(vf.data() + elems));
  } else {
    const auto kb = to_bf16(kf), vb = to_bf16(vf);
    kbytes.assign(reinterpret_cast<const uint8_t*>(kb.data()), reinterpret_cast<const uint8_t*>(kb.data() + elems));
    vbytes.assign(reinterpret_cast<const uint8_t*>(vb.data()), reinterpret_cast<const uint8_t*>(vb.data() + elems));
  }
  const auto q = random_floats(T * q_row, seed + 3, 2.0f);
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const bool prompt_route = precision == ActivationPrecision::kFast && T >= 64 && T >= 4 * S;
  const bool e4m3_query = fp8_math != Fp8AttentionMath::kF16 && kv_dtype == DType::kF8E4M3 && prompt_route &&
                          cuda::list_devices().at(0).sm_major == 9;
  const bool e4m3_p = e4m3_query && (fp8_math == Fp8AttentionMath::kE4m3QueryAndP ||
                                     fp8_math == Fp8AttentionMath::kE4m3x2QueryAndP);
  const bool two_terms = e4m3_query && (fp8_math == Fp8AttentionMath::kE4m3x2Query ||
                                        fp8_math == Fp8AttentionMath::kE4m3x2QueryAndP);
  std::vector<float> q_ref = q;
  if (e4m3_query) {
    for (int64_t row = 0; row < T * geo.num_heads; ++row) {
      float* r = q_ref.data() + row * D;
      float amax = 0.0f;
      for (int64_t i = 0; i < D; ++i) amax = std::max(amax, std::fabs(r[i]));
      const float inv = amax > 0.0f ? 448.0f / amax : 0.0f, qs = amax > 0.0f ? amax / 448.0f : 1.0f;
      for (int64_t i = 0; i < D; ++i) {
        const float x = r[i] * inv, hi = fp8e4m3_to_f32(f32_to_fp8e4m3(x));
        r[i] = (two_terms ? hi + fp8e4m3_to_f32(f32_to_fp8e4m3(x - hi)) : hi) * qs;
      }
    }
  }

  KvCacheLayer cc{ref_dtype, num_blocks, block_size, geo.num_kv_heads, D, kbytes.data(), vbytes.data()};
  std::vector<float> ref(T * q_row, -1.0f);
  PagedAttentionArgs ca{T, S, geo.num_heads, max_blocks, scale, q_ref.data(), qstart.data(), ctx.data(),
                        tables.data(), ref.data()};
  ASSERT_TRUE(c->paged_attention(ca, cc).ok());

  const bool fp8 = kv_dtype == DType::kF8E4M3;
  Buffer dk = to_device(*g, fp8 ? k8 : kbytes), dv = to_device(*g, fp8 ? v8 : vbytes), dq = to_device(*g, q);
  Buffer dqs = to_device(*g, qstart), dctx = to_device(*g, ctx), dtab = to_device(*g, tables);
  auto dout = g->alloc(T * q_row * sizeof(float));
  ASSERT_TRUE(dout.ok());
  KvCacheLayer gc{kv_dtype, num_blocks, block_size, geo.num_kv_heads, D, dk.data(), dv.data()};
  if (fp8) {
    gc.k_scale = k_scale;
    gc.v_scale = v_scale;
  }
  PagedAttentionArgs ga{T, S, geo.num_heads, max_blocks, scale, dq.as<float>(), dqs.as<int32_t>(),
                        dctx.as<int32_t>(), dtab.as<int32_t>(), dout->as<float>()};
  Status st = g->paged_attention(ga, gc);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = g->synchronize();
  ASSERT_TRUE(st.ok()) << st.to_string();
  std::string what = "attention H=" + std::to_string(geo.num_heads) + "/" + std::to_string(geo.num_kv_heads) +
                     " D=" + std::to_string(D) + " bs=" + std::to_string(block_size) + " " + dtype_name(kv_dtype) +
                     " seqs:";
  for (const SeqSpec& s : seqs) what += " (" + std::to_string(s.cached) + "+" + std::to_string(s.q_len) + ")";
  if (e4m3_query) what += std::string(two_terms ? " two-term e4m3 query" : " e4m3 query") + (e4m3_p ? " and P" : "");
  // FP8: the scale is applied to q.k and to the output instead of to each element (a few
  // ulps of f32 apart).
  // Tensor cores: Q, K, V and P rounded to BF16 (relative error 2^-9 each) give an NMSE of
  // about 1e-5 on these random inputs; the bound leaves room for longer contexts.
  // In the fast mode every row of a bf16 or fp8 cache runs on tensor cores (prompt chunks in
  // the prefill kernel, the rest in the decode kernel); f32 caches keep the CUDA-core decode.
  const bool flash = precision == ActivationPrecision::kFast && (prompt_route || kv_dtype != DType::kF32);
  // E4M3 P (p * 256 rounded to 3 mantissa bits, relative error up to 2^-4): against the
  // reference's unrounded P, an NMSE of a few 1e-4 on these inputs.
  const double bound = e4m3_p ? 2e-3 : flash ? 1e-4 : fp8 ? 1e-8 : 1e-9;
  expect_nmse(to_host<float>(*g, *dout, ref.size()), ref, bound, what + (flash ? " (tensor cores)" : ""));
  if (two_terms) {
    // Against the unrounded query: within the 16-bit query's bound (one E4M3 term, up to 2^-4
    // of each value, is not held to it), or E4M3 P's when P is rounded too.
    std::vector<float> ref_q(T * q_row, -1.0f);
    PagedAttentionArgs uq = ca;
    uq.q = q.data();
    uq.out = ref_q.data();
    ASSERT_TRUE(c->paged_attention(uq, cc).ok());
    expect_nmse(to_host<float>(*g, *dout, ref.size()), ref_q, e4m3_p ? bound : 1e-4,
                what + " (against the unrounded query)");
  }

  // The step's plan made once from the real lengths (Backend::plan_attention), run eagerly and
  // as a captured graph runs it: read from device memory, over a grid of more splits than the
  // plan holds. The two give the same bits.
  const int64_t max_ctx = *std::max_element(ctx.begin(), ctx.end());
  const AttentionStepPlan plan = g->plan_attention(AttentionPlanQuery{T, S, geo.num_heads, max_ctx}, gc);
  ASSERT_GE(plan.num_splits, 1) << what;
  ASSERT_GE(plan.max_splits, plan.num_splits) << what;
  ga.plan = plan;
  ASSERT_TRUE(g->paged_attention(ga, gc).ok()) << what;
  ASSERT_TRUE(g->synchronize().ok()) << what;
  const std::vector<float> eager = to_host<float>(*g, *dout, ref.size());
  expect_nmse(eager, ref, bound, what + " (step plan)");
  Buffer dplan = to_device(*g, std::vector<int32_t>{plan.num_splits, plan.split_len});
  ASSERT_TRUE(g->zero(dout->data(), ref.size() * sizeof(float)).ok());
  ga.plan.max_splits = plan.max_splits + 3;
  ga.device_plan = dplan.as<int32_t>();
  st = g->paged_attention(ga, gc);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = g->synchronize();
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_bits_equal(to_host<float>(*g, *dout, ref.size()), eager, what + " (device plan, wider grid)");

  // The plan of a mixed step (decodes first, as the scheduler orders them): the leading decode
  // rows in the decode kernel, the prompt chunks after them in the prompt kernel. Its decode
  // rows keep the FP16 query under kE4m3Query, so the reference rounds only the prompt rows.
  int64_t ds = 0, dt = 0, dmax = 0;
  for (; ds < S && attention_decode_seq(seqs[ds].q_len); ++ds) {
    dt += seqs[ds].q_len;
    dmax = std::max<int64_t>(dmax, ctx[ds]);
  }
  const AttentionStepPlan mixed =
      g->plan_attention(AttentionPlanQuery{T, S, geo.num_heads, max_ctx, ds, dt, dmax}, gc);
  if (mixed.decode_seqs == 0) return;
  ASSERT_EQ(mixed.decode_seqs, ds) << what;
  ASSERT_EQ(mixed.decode_tokens, dt) << what;
  std::vector<float> mixed_ref = ref;
  if (e4m3_query) {
    std::vector<float> q_mixed = q_ref;
    std::copy(q.begin(), q.begin() + dt * q_row, q_mixed.begin());
    ca.q = q_mixed.data();
    ca.out = mixed_ref.data();
    ASSERT_TRUE(c->paged_attention(ca, cc).ok());
  }
  ASSERT_TRUE(g->zero(dout->data(), ref.size() * sizeof(float)).ok());
  ga.plan = mixed;
  ga.device_plan = nullptr;
  st = g->paged_attention(ga, gc);
  ASSERT_TRUE(st.ok()) << st.to_string();
  st = g->synchronize();
  ASSERT_TRUE(st.ok()) << st.to_string();
  expect_nmse(to_host<float>(*g, *dout, ref.size()), mixed_ref, bound, what + " (mixed-step plan)");
  if (mixed_run) *mixed_run = true;
}

const Geometry kGeometries[] = {
    {32, 8, 128},  // Llama-3-8B (GQA 4)
    {8, 1, 128},   // Llama-3-70B grouping (GQA 8: two head chunks per KV head at D=128)
    {8, 1, 64},    // tiny-gqa8
    {9, 3, 64},    // SmolLM2 (GQA 3)
    {12, 1, 64},   // GQA 12 (two head chunks at D=64)
    {4, 4, 128},   // no grouping
};

TEST(CudaAttention, DecodeBatches) {
  // Small decode batches take the split-KV path; the 64-sequence batch does not.
  for (const Geometry& geo : kGeometries) {
    for (int64_t bs : {1, 16}) {
      for (DType dt : {DType::kF32, DType::kBF16}) {
        run_attention(geo, bs, dt, {{0, 1}}, 1);
        run_attention(geo, bs, dt, {{8999, 1}}, 2);
        run_attention(geo, bs, dt, {{5, 1}, {700, 1}, {4096, 1}, {96, 1}, {1, 1}, {2999, 1}, {8191, 1}}, 3);
      }
    }
  }
  std::vector<SeqSpec> many;
  for (int i = 0; i < 64; ++i) many.push_back({static_cast<int64_t>(37 * i + 3), 1});
  run_attention({32, 8, 128}, 16, DType::kBF16, many, 4);
}

TEST(CudaAttention, PrefillAndChunks) {
  for (const Geometry& geo : {kGeometries[0], kGeometries[2], kGeometries[3], kGeometries[4]}) {
    for (int64_t bs : {1, 16}) {
      for (DType dt : {DType::kF32, DType::kBF16}) {
        run_attention(geo, bs, dt, {{0, 7}}, 5);
        run_attention(geo, bs, dt, {{0, 769}}, 6);
        run_attention(geo, bs, dt, {{8743, 257}}, 7);  // a late chunk of a 9000-token prompt
      }
    }
  }
}

TEST(CudaAttention, Fp8CacheMatchesDequantizedReference) {
  for (const Geometry& geo : {Geometry{32, 8, 128}, Geometry{8, 1, 128}, Geometry{9, 3, 64}})
    for (int64_t bs : {1, 16}) {
      run_attention(geo, bs, DType::kF8E4M3, {{0, 1}}, 11);
      run_attention(geo, bs, DType::kF8E4M3, {{5, 1}, {700, 1}, {8191, 1}}, 12);
      run_attention(geo, bs, DType::kF8E4M3, {{0, 97}, {300, 64}}, 13);
    }
}

TEST(CudaAttention, TensorCorePrefillMatchesReference) {
  // bf16 and fp8 caches take the GQA-packed kernel (the 257-token chunk at 8743 keys also its
  // split-KV path), f32 caches the per-head kernel.
  std::vector<Geometry> geos(std::begin(kGeometries), std::end(kGeometries));
  geos.push_back({40, 2, 128});  // GQA 20: 6 tokens per CTA, 8 padding rows
  for (const Geometry& geo : geos)
    for (int64_t bs : {1, 16})
      for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
        run_attention(geo, bs, dt, {{0, 64}}, 21, ActivationPrecision::kFast);
        run_attention(geo, bs, dt, {{0, 769}}, 22, ActivationPrecision::kFast);
        run_attention(geo, bs, dt, {{8743, 257}}, 23, ActivationPrecision::kFast);
        // Several sequences, ragged tiles, a decode row riding along.
        run_attention(geo, bs, dt, {{0, 100}, {5, 1}, {300, 64}, {17, 130}}, 24, ActivationPrecision::kFast);
        // A chunk late in a long context with decode rows of other sequences: the split-KV
        // plan counts only the prompt rows, so this batch is split too.
        run_attention(geo, bs, dt, {{8743, 257}, {5, 1}, {4000, 1}, {100, 1}}, 25, ActivationPrecision::kFast);
      }
}

TEST(CudaAttention, MixedStepPlanMatchesReference) {
  // Decodes first (a drafted one too), as the scheduler orders a mixed step: its plan runs them
  // in the decode kernel (split over their 4K-9K keys) and the chunks after them in the prompt
  // kernel (the late one split too).
  bool mixed = false;
  for (const Geometry& geo : {kGeometries[0], kGeometries[1], kGeometries[3]})
    for (int64_t bs : {1, 16})
      for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
        run_attention(geo, bs, dt, {{5, 1}, {8999, 1}, {4000, 3}, {100, 1}, {8743, 257}, {0, 70}}, 26,
                      ActivationPrecision::kFast, Fp8AttentionMath::kF16, &mixed);
        EXPECT_TRUE(mixed) << "no mixed-step plan: H=" << geo.num_heads << " bs=" << bs << " " << dtype_name(dt);
      }
  // Many decode rows ahead of two chunks: in one prompt-kernel launch every decode sequence
  // would take a CTA of its own.
  std::vector<SeqSpec> many;
  for (int i = 0; i < 200; ++i) many.push_back({static_cast<int64_t>(37 * i + 3), 1});
  many.push_back({500, 300});
  many.push_back({0, 129});
  for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
    run_attention({32, 8, 128}, 16, dt, many, 27, ActivationPrecision::kFast, Fp8AttentionMath::kF16, &mixed);
    EXPECT_TRUE(mixed) << "no mixed-step plan: 200 decodes, " << dtype_name(dt);
  }
}

// The prompt cases of an FP8 cache under an E4M3 attention math m: head_dim 64 and 128, GQA
// 1-20, pages of 1 and 16, partial and masked tiles, split-KV, ragged tiles with a decode row
// riding along, a mixed step's plan (asserted to be mixed), and decode rows (which keep the
// FP16 query); seeds from `seed`.
void run_e4m3_prompt_cases(Fp8AttentionMath m, uint32_t seed) {
  std::vector<Geometry> geos(std::begin(kGeometries), std::end(kGeometries));
  geos.push_back({40, 2, 128});
  const auto fast = ActivationPrecision::kFast;
  for (const Geometry& geo : geos)
    for (int64_t bs : {1, 16}) {
      run_attention(geo, bs, DType::kF8E4M3, {{0, 64}}, seed, fast, m);
      run_attention(geo, bs, DType::kF8E4M3, {{0, 769}}, seed + 1, fast, m);
      run_attention(geo, bs, DType::kF8E4M3, {{8743, 257}}, seed + 2, fast, m);
      run_attention(geo, bs, DType::kF8E4M3, {{0, 100}, {5, 1}, {300, 64}, {17, 130}}, seed + 3, fast, m);
      bool mixed = false;
      run_attention(geo, bs, DType::kF8E4M3, {{5, 1}, {3000, 2}, {300, 64}, {8743, 257}}, seed + 4, fast, m,
                    &mixed);
      EXPECT_TRUE(mixed) << "no mixed-step plan: H=" << geo.num_heads << " bs=" << bs;
    }
  run_attention({32, 8, 128}, 16, DType::kF8E4M3, {{5, 1}, {700, 1}, {8191, 1}}, seed + 5, fast, m);
}

TEST(CudaAttention, TensorCorePrefillE4m3QueryMatchesReference) {
  // Q K^T on E4M3 wgmma from the cache's bytes (Fp8AttentionMath::kE4m3Query).
  run_e4m3_prompt_cases(Fp8AttentionMath::kE4m3Query, 41);
}

TEST(CudaAttention, TensorCorePrefillTwoTermE4m3QueryMatchesReference) {
  // Q K^T as two E4M3 wgmma chains, the query's two terms (Fp8AttentionMath::kE4m3x2Query).
  run_e4m3_prompt_cases(Fp8AttentionMath::kE4m3x2Query, 61);
}

TEST(CudaAttention, TensorCorePrefillE4m3QueryAndPMatchesReference) {
  // And P V on E4M3 wgmma over V transposed by the producer (Fp8AttentionMath::kE4m3QueryAndP).
  run_e4m3_prompt_cases(Fp8AttentionMath::kE4m3QueryAndP, 51);
}

TEST(CudaAttention, TensorCorePrefillTwoTermE4m3QueryAndPMatchesReference) {
  // The two-term query with P V on E4M3 wgmma (Fp8AttentionMath::kE4m3x2QueryAndP).
  run_e4m3_prompt_cases(Fp8AttentionMath::kE4m3x2QueryAndP, 71);
}

TEST(CudaAttention, TensorCoreDecodeMatchesReference) {
  std::vector<Geometry> geos(std::begin(kGeometries), std::end(kGeometries));
  geos.push_back({40, 2, 128});  // GQA 20: two CTAs of 16 and 4 heads per KV head
  for (const Geometry& geo : geos)
    for (int64_t bs : {1, 16})
      for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
        run_attention(geo, bs, dt, {{0, 1}}, 31, ActivationPrecision::kFast);
        run_attention(geo, bs, dt, {{8999, 1}}, 32, ActivationPrecision::kFast);  // split-KV
        run_attention(geo, bs, dt, {{5, 1}, {700, 1}, {4096, 1}, {96, 1}, {1, 1}, {2999, 1}, {8191, 1}}, 33,
                      ActivationPrecision::kFast);
        // Verification-style rows (k + 1 tokens per sequence) and a short chunk.
        run_attention(geo, bs, dt, {{300, 5}, {17, 3}, {0, 2}, {1000, 12}}, 34, ActivationPrecision::kFast);
      }
  std::vector<SeqSpec> many;
  for (int i = 0; i < 64; ++i) many.push_back({static_cast<int64_t>(37 * i + 3), 1});
  for (DType dt : {DType::kBF16, DType::kF8E4M3})
    run_attention({32, 8, 128}, 16, dt, many, 35, ActivationPrecision::kFast);
}

TEST(CudaAttention, MixedBatch) {
  const std::vector<SeqSpec> mixed = {{4999, 1}, {0, 97}, {8993, 7}, {0, 1}, {731, 769}, {15, 0}, {16, 16}};
  for (const Geometry& geo : kGeometries)
    for (int64_t bs : {1, 16})
      for (DType dt : {DType::kF32, DType::kBF16}) run_attention(geo, bs, dt, mixed, 8);
}

// Small enough for compute-sanitizer: every geometry, both block sizes and dtypes, the
// split-KV path (the 600-token decode) and the plain path in one batch.
TEST(CudaAttention, SanitizerSized) {
  const std::vector<SeqSpec> small = {{599, 1}, {0, 33}, {40, 9}, {0, 1}};
  for (const Geometry& geo : kGeometries)
    for (int64_t bs : {1, 16})
      for (DType dt : {DType::kF32, DType::kBF16}) run_attention(geo, bs, dt, small, 10);
  run_attention({32, 8, 128}, 16, DType::kBF16, {{599, 1}}, 11);
  // The tensor-core kernels: decode rows (split and not) and a prompt chunk.
  for (DType dt : {DType::kBF16, DType::kF8E4M3}) {
    run_attention({32, 8, 128}, 16, dt, small, 12, ActivationPrecision::kFast);
    run_attention({9, 3, 64}, 1, dt, small, 13, ActivationPrecision::kFast);
    run_attention({32, 8, 128}, 16, dt, {{40, 70}}, 14, ActivationPrecision::kFast);
    if (dt == DType::kF8E4M3) {
      // The FP8 query modes of the prompt kernel (sm_90a): two-term query, E4M3 query and P, both.
      for (Fp8AttentionMath m : {Fp8AttentionMath::kE4m3x2Query, Fp8AttentionMath::kE4m3QueryAndP,
                                 Fp8AttentionMath::kE4m3x2QueryAndP}) {
        run_attention({32, 8, 128}, 16, dt, {{40, 70}}, 16, ActivationPrecision::kFast, m);
        run_attention({9, 3, 64}, 1, dt, {{0, 100}, {17, 130}}, 17, ActivationPrecision::kFast, m);
      }
    }
    // A mixed step's plan: decode rows (split) apart from the chunk after them.
    bool mixed = false;
    run_attention({32, 8, 128}, 16, dt, {{599, 1}, {40, 3}, {0, 70}}, 15, ActivationPrecision::kFast,
                  Fp8AttentionMath::kF16, &mixed);
    EXPECT_TRUE(mixed) << dtype_name(dt);
  }
}

TEST(CudaAttention, LongPrefill) {
  // A 5125-token prompt in one step (query-parallel path only).
  run_attention({8, 2, 128}, 16, DType::kBF16, {{0, 5125}}, 9);
}

void run_kv_write(DType dt, int64_t block_size, int64_t n, uint32_t seed) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  const int64_t KH = 8, D = 128, row = KH * D;
  const int64_t num_blocks = (n + block_size - 1) / block_size + 3;
  const int64_t slots_total = num_blocks * block_size;
  std::vector<int64_t> all(slots_total);
  std::iota(all.begin(), all.end(), 0);
  std::shuffle(all.begin(), all.end(), std::mt19937(seed));
  std::vector<int64_t> slots(all.begin(), all.begin() + n);
  if (n > 3) slots[n / 2] = -1;  // padding token: skipped
  const auto k = random_floats(n * row, seed + 1), v = random_floats(n * row, seed + 2);
  const size_t bytes = slots_total * row * (dt == DType::kF32 ? 4 : 2);
  std::vector<uint8_t> kc(bytes, 0), vc(bytes, 0);
  KvCacheLayer cl{dt, num_blocks, block_size, KH, D, kc.data(), vc.data()};
  KvWriteArgs ca{n, k.data(), v.data(), slots.data()};
  ASSERT_TRUE(c->kv_write(ca, cl).ok());
  auto dk = g->alloc(bytes), dv = g->alloc(bytes);
  ASSERT_TRUE(dk.ok() && dv.ok());
  ASSERT_TRUE(g->zero(dk->data(), bytes).ok());
  ASSERT_TRUE(g->zero(dv->data(), bytes).ok());
  Buffer dkin = to_device(*g, k), dvin = to_device(*g, v), dslots = to_device(*g, slots);
  KvCacheLayer gl{dt, num_blocks, block_size, KH, D, dk->data(), dv->data()};
  KvWriteArgs ga{n, dkin.as<float>(), dvin.as<float>(), dslots.as<int64_t>()};
  ASSERT_TRUE(g->kv_write(ga, gl).ok());
  ASSERT_TRUE(g->synchronize().ok());
  EXPECT_TRUE(to_host<uint8_t>(*g, *dk, bytes) == kc) << "k cache differs, n=" << n << " " << dtype_name(dt);
  EXPECT_TRUE(to_host<uint8_t>(*g, *dv, bytes) == vc) << "v cache differs, n=" << n << " " << dtype_name(dt);
}

TEST(CudaKvWrite, MatchesCpuBitExact) {
  for (DType dt : {DType::kF32, DType::kBF16})
    for (int64_t bs : {1, 16})
      for (int64_t n : {1, 7, 97, 769, 5125}) run_kv_write(dt, bs, n, static_cast<uint32_t>(n + bs));
}

TEST(CudaKvWrite, Fp8StoresScaledE4M3Codes) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const int64_t KH = 8, D = 128, row = KH * D, n = 37, num_blocks = 4, bs = 16;
  const float ks = 0.004f, vs = 0.25f;  // k values reach 3 / 0.004 = 750: saturates at 448
  std::vector<float> k = random_floats(n * row, 5, 3.0f), v = random_floats(n * row, 6, 3.0f);
  k[0] = std::numeric_limits<float>::infinity();
  std::vector<int64_t> slots(n);
  std::iota(slots.begin(), slots.end(), 5);
  const size_t bytes = num_blocks * bs * row;
  auto dk = g->alloc(bytes), dv = g->alloc(bytes);
  ASSERT_TRUE(dk.ok() && dv.ok());
  ASSERT_TRUE(g->zero(dk->data(), bytes).ok() && g->zero(dv->data(), bytes).ok());
  Buffer dkin = to_device(*g, k), dvin = to_device(*g, v), dslots = to_device(*g, slots);
  KvCacheLayer l{DType::kF8E4M3, num_blocks, bs, KH, D, dk->data(), dv->data()};
  l.k_scale = ks;
  l.v_scale = vs;
  ASSERT_TRUE(g->kv_write({n, dkin.as<float>(), dvin.as<float>(), dslots.as<int64_t>()}, l).ok());
  ASSERT_TRUE(g->synchronize().ok());
  const auto hk = to_host<uint8_t>(*g, *dk, bytes), hv = to_host<uint8_t>(*g, *dv, bytes);
  size_t saturated = 0;
  for (int64_t t = 0; t < n; ++t)
    for (int64_t i = 0; i < row; ++i) {
      const size_t at = static_cast<size_t>((slots[t] * row) + i);
      const uint8_t ek = f32_to_fp8e4m3(k[t * row + i] * (1.0f / ks)), ev = f32_to_fp8e4m3(v[t * row + i] * (1.0f / vs));
      ASSERT_EQ(hk[at], ek) << "k token " << t << " dim " << i;
      ASSERT_EQ(hv[at], ev) << "v token " << t << " dim " << i;
      saturated += std::fabs(fp8e4m3_to_f32(hk[at])) == 448.0f;
    }
  EXPECT_GT(saturated, 1000u);  // |k| / ks > 448 for about 40% of the values
  EXPECT_EQ(fp8e4m3_to_f32(hk[slots[0] * row]), 448.0f);  // +inf saturates too
}

TEST(CudaKvWrite, SlotPastTheCacheIsReported) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  auto kc = g->alloc(4 * 16 * 128 * 4), vc = g->alloc(4 * 16 * 128 * 4);
  ASSERT_TRUE(kc.ok() && vc.ok());
  Buffer k = to_device(*g, random_floats(128, 1)), v = to_device(*g, random_floats(128, 2));
  Buffer slots = to_device(*g, std::vector<int64_t>{64});
  KvCacheLayer l{DType::kF32, 4, 16, 1, 128, kc->data(), vc->data()};
  ASSERT_TRUE(g->kv_write({1, k.as<float>(), v.as<float>(), slots.as<int64_t>()}, l).ok());
  EXPECT_EQ(g->synchronize().code(), StatusCode::kOutOfRange);
}

}  // namespace
}  // namespace lancet
