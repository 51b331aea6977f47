// Paged attention at 128K tokens on the GPU against a chunked CPU reference.
//
// One sequence of 131,072 tokens fills a paged cache (block size 16, physical blocks in a
// shuffled order; the spare blocks no table entry names hold NaN bytes, so a read outside the
// block table poisons the output) through kv_write in chunks. Checks: (a) decode at position
// 131071 (the split-KV path); (b) the last 512-token prompt chunk, causal; (c) a 256-token
// chunk at 65536 whose context ends at 65792 while later keys sit in the cache. f32, BF16 and
// FP8 E4M3 caches; kExact (CUDA-core kernel) and kFast (tensor-core prefill and decode, the
// default); head_dim 128 with GQA 4 (8 / 2 heads) and GQA 8 (16 / 2).
//
// Data: K and V uniform in [-1, 1) rounded to E4M3 codes times power-of-two scales (K 2^-8,
// V 2^-6), values that f32, BF16 and the FP8 cache all hold exactly, so one reference serves
// the three cache dtypes. Each query is noise plus beta * (its own key + the next
// position's key): the first is the strongest key it may see, the second one it must not, so a
// causal mask or context length off by one moves a large share of the softmax mass. On purely
// uniform data it would move about 1/131072 of it and hide under any useful bound; the test
// asserts that an off-by-one context fails the bound by orders of magnitude.
//
// Reference: f32 dot products, online softmax over 64-key tiles with f64 running max, sum and
// output, over (kv head, 4 query rows) items on the default thread pool.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <limits>
#include <iterator>
#include <numeric>

#include "core/thread_pool.h"
#include "cuda_test_util.h"

namespace lancet {
namespace {

using namespace lancet::testing;

constexpr int64_t kD = 128;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kContext = 131072;
constexpr int64_t kBlock = 16;
constexpr int64_t kSpareBlocks = 7;  // physical blocks no table entry names (NaN bytes)
constexpr int64_t kRefRows = 4;      // query rows per reference work item
constexpr int64_t kRefTile = 64;     // keys per reference tile
constexpr float kKScale = 1.0f / 256, kVScale = 1.0f / 64;  // FP8 cache scales (|k| / 2^-8 < 448)

// x on the grid an FP8 cache with this scale stores exactly (and so do BF16 and f32).
float on_fp8_grid(float x, float scale) { return fp8e4m3_to_f32(f32_to_fp8e4m3(x / scale)) * scale; }

// The keys and values of the sequence in the reference's layout, and the block table that
// places them in the paged cache.
struct HostKv {
  int64_t num_kv_heads = 0, context = 0;
  std::vector<float> k, v;      // [num_kv_heads, context, kD], on the FP8 grids of kKScale / kVScale
  std::vector<int32_t> table;   // [context / kBlock] physical block of each logical block
  int64_t num_blocks = 0;       // physical blocks in the cache (table entries + spares)
  const float* key(int64_t h, int64_t p) const { return k.data() + (h * context + p) * kD; }
  const float* value(int64_t h, int64_t p) const { return v.data() + (h * context + p) * kD; }
};

HostKv make_host_kv(int64_t num_kv_heads, int64_t context, uint32_t seed) {
  HostKv kv;
  kv.num_kv_heads = num_kv_heads;
  kv.context = context;
  const int64_t n = num_kv_heads * context * kD;
  kv.k.resize(static_cast<size_t>(n));
  kv.v.resize(static_cast<size_t>(n));
  // Chunks with their own seeds, so the values do not depend on the thread count.
  constexpr int64_t kChunk = 1 << 16;
  default_thread_pool().parallel_for((n + kChunk - 1) / kChunk, [&](int64_t b, int64_t e, int) {
    for (int64_t c = b; c < e; ++c) {
      std::mt19937 g(seed * 7919u + static_cast<uint32_t>(c));
      std::uniform_real_distribution<float> d(-1.0f, 1.0f);
      for (int64_t i = c * kChunk; i < std::min(n, (c + 1) * kChunk); ++i) {
        kv.k[i] = on_fp8_grid(d(g), kKScale);
        kv.v[i] = on_fp8_grid(d(g), kVScale);
      }
    }
  });
  const int64_t logical = (context + kBlock - 1) / kBlock;
  kv.num_blocks = logical + kSpareBlocks;
  std::vector<int32_t> ids(static_cast<size_t>(kv.num_blocks));
  std::iota(ids.begin(), ids.end(), 0);
  std::shuffle(ids.begin(), ids.end(), std::mt19937(seed));
  kv.table.assign(ids.begin(), ids.begin() + logical);
  return kv;
}

// Queries for positions [context - T, context): q[t, h] = noise + beta_h * (k[p] + k[p + 1])
// with p + 1 wrapping to 0 past the sequence's last key (then both keys are visible).
std::vector<float> make_queries(const HostKv& kv, int64_t T, int64_t H, int64_t context, uint32_t seed) {
  std::vector<float> q = random_floats(static_cast<size_t>(T * H * kD), seed, 2.0f);
  const int64_t group = H / kv.num_kv_heads;
  for (int64_t t = 0; t < T; ++t) {
    const int64_t p = context - T + t, next = (p + 1) % kv.context;
    for (int64_t h = 0; h < H; ++h) {
      // beta 2.5 .. 4: the own key takes from a few percent to most of the softmax mass.
      const float beta = 2.5f + 0.5f * static_cast<float>(h % 4);
      const float* a = kv.key(h / group, p);
      const float* b = kv.key(h / group, next);
      float* row = q.data() + (t * H + h) * kD;
      for (int64_t d = 0; d < kD; ++d) row[d] += beta * (a[d] + b[d]);
    }
  }
  return q;
}

// ---- the CPU reference ----

struct RefJob {
  const float* q = nullptr;  // [T, H, kD]; row t is at position context - T + t
  int64_t T = 0, H = 0, context = 0;
  float scale = 1.0f;
  float* out = nullptr;      // [T, H, kD]
};

// 16 partial sums so the compiler vectorizes the reduction without reassociating it.
[[gnu::always_inline]] inline float dot128(const float* a, const float* b) {
  float s[16] = {};
  for (int64_t d = 0; d < kD; d += 16)
    for (int l = 0; l < 16; ++l) s[l] += a[d + l] * b[d + l];
  float t = 0;
  for (float x : s) t += x;
  return t;
}

// a against four keys at once: independent accumulator chains keep the FMA units busy.
[[gnu::always_inline]] inline void dot128x4(const float* a, const float* b0, const float* b1, const float* b2,
                                            const float* b3, float* out /*[4]*/) {
  float s0[16] = {}, s1[16] = {}, s2[16] = {}, s3[16] = {};
  for (int64_t d = 0; d < kD; d += 16)
    for (int l = 0; l < 16; ++l) {
      s0[l] += a[d + l] * b0[d + l];
      s1[l] += a[d + l] * b1[d + l];
      s2[l] += a[d + l] * b2[d + l];
      s3[l] += a[d + l] * b3[d + l];
    }
  float t[4] = {};
  for (int l = 0; l < 16; ++l) {
    t[0] += s0[l];
    t[1] += s1[l];
    t[2] += s2[l];
    t[3] += s3[l];
  }
  for (int c = 0; c < 4; ++c) out[c] = t[c];
}

// Rows [r0, r1) of every query head of kv head `kvh`: online softmax over key tiles.
[[gnu::always_inline]] inline void reference_rows_body(const HostKv& kv, const RefJob& j, int64_t kvh, int64_t r0,
                                                       int64_t r1) {
  const int64_t group = j.H / kv.num_kv_heads, nq = (r1 - r0) * group;
  constexpr float kNegInf = -std::numeric_limits<float>::infinity();
  std::vector<float> qs(static_cast<size_t>(nq * kD)), s(static_cast<size_t>(nq * kRefTile)), tile(kD);
  std::vector<int64_t> last(static_cast<size_t>(nq));  // the last key each query vector sees
  std::vector<double> m(static_cast<size_t>(nq), -std::numeric_limits<double>::infinity());
  std::vector<double> l(static_cast<size_t>(nq), 0.0), acc(static_cast<size_t>(nq * kD), 0.0);
  for (int64_t t = r0; t < r1; ++t)
    for (int64_t g = 0; g < group; ++g) {
      const int64_t i = (t - r0) * group + g;
      const float* src = j.q + (t * j.H + kvh * group + g) * kD;
      for (int64_t d = 0; d < kD; ++d) qs[i * kD + d] = src[d] * j.scale;
      last[i] = j.context - j.T + t;
    }
  const int64_t end = j.context - j.T + r1;  // keys [0, end) cover every row of the item
  for (int64_t k0 = 0; k0 < end; k0 += kRefTile) {
    const int64_t n = std::min(kRefTile, end - k0);
    int64_t jj = 0;
    for (; jj + 4 <= n; jj += 4) {
      const float *k0r = kv.key(kvh, k0 + jj), *k1r = k0r + kD, *k2r = k1r + kD, *k3r = k2r + kD;
      for (int64_t i = 0; i < nq; ++i) dot128x4(&qs[i * kD], k0r, k1r, k2r, k3r, &s[i * kRefTile + jj]);
    }
    for (; jj < n; ++jj) {
      const float* kr = kv.key(kvh, k0 + jj);
      for (int64_t i = 0; i < nq; ++i) s[i * kRefTile + jj] = dot128(&qs[i * kD], kr);
    }
    for (int64_t i = 0; i < nq; ++i)  // causal mask
      for (jj = std::max<int64_t>(0, last[i] + 1 - k0); jj < n; ++jj) s[i * kRefTile + jj] = kNegInf;
    for (int64_t i = 0; i < nq; ++i) {
      float* si = &s[i * kRefTile];
      float tmax = kNegInf;
      for (int64_t jj = 0; jj < n; ++jj) tmax = std::max(tmax, si[jj]);
      if (tmax == kNegInf) continue;  // the whole tile lies past this row
      const double nm = std::max(m[i], static_cast<double>(tmax));
      const double corr = std::exp(m[i] - nm);
      m[i] = nm;
      l[i] *= corr;
      for (int64_t d = 0; d < kD; ++d) acc[i * kD + d] *= corr;
      const float mf = static_cast<float>(nm);  // a max of floats: exact
      std::fill(tile.begin(), tile.end(), 0.0f);
      float tl = 0;
      for (int64_t jj = 0; jj < n; ++jj) {
        if (si[jj] == kNegInf) continue;
        const float p = std::exp(si[jj] - mf);
        tl += p;
        const float* vr = kv.value(kvh, k0 + jj);
        for (int64_t d = 0; d < kD; ++d) tile[d] += p * vr[d];
      }
      l[i] += tl;
      for (int64_t d = 0; d < kD; ++d) acc[i * kD + d] += tile[d];
    }
  }
  for (int64_t t = r0; t < r1; ++t)
    for (int64_t g = 0; g < group; ++g) {
      const int64_t i = (t - r0) * group + g;
      float* dst = j.out + (t * j.H + kvh * group + g) * kD;
      for (int64_t d = 0; d < kD; ++d) dst[d] = static_cast<float>(acc[i * kD + d] / l[i]);
    }
}

#if defined(__x86_64__) && defined(__GNUC__)
__attribute__((target("avx2,fma"))) void reference_rows_avx2(const HostKv& kv, const RefJob& j, int64_t kvh,
                                                              int64_t r0, int64_t r1) {
  reference_rows_body(kv, j, kvh, r0, r1);
}
#endif

void reference_rows_generic(const HostKv& kv, const RefJob& j, int64_t kvh, int64_t r0, int64_t r1) {
  reference_rows_body(kv, j, kvh, r0, r1);
}

// out [T, H, kD]: softmax(scale * q k^T) v over keys [0, position] of each row.
std::vector<float> reference_attention(const HostKv& kv, const std::vector<float>& q, int64_t T, int64_t H,
                                       int64_t context) {
  std::vector<float> out(static_cast<size_t>(T * H * kD), std::numeric_limits<float>::quiet_NaN());
  const RefJob job{q.data(), T, H, context, 1.0f / std::sqrt(static_cast<float>(kD)), out.data()};
  auto fn = &reference_rows_generic;
#if defined(__x86_64__) && defined(__GNUC__)
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) fn = &reference_rows_avx2;
#endif
  const int64_t row_blocks = (T + kRefRows - 1) / kRefRows;
  default_thread_pool().parallel_for(kv.num_kv_heads * row_blocks, [&](int64_t b, int64_t e, int) {
    for (int64_t item = b; item < e; ++item) {
      const int64_t kvh = item % kv.num_kv_heads, r0 = (item / kv.num_kv_heads) * kRefRows;
      fn(kv, job, kvh, r0, std::min(T, r0 + kRefRows));
    }
  });
  return out;
}

struct ErrorStats {
  size_t non_finite = 0;
  double nmse = 0, max_abs = 0, max_ref = 0;
};

ErrorStats compare(const std::vector<float>& got, const std::vector<float>& ref) {
  ErrorStats e;
  double num = 0, den = 0;
  for (size_t i = 0; i < got.size() && i < ref.size(); ++i) {
    if (!std::isfinite(got[i])) {
      ++e.non_finite;
      continue;
    }
    const double d = static_cast<double>(got[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
    e.max_abs = std::max(e.max_abs, std::fabs(d));
    e.max_ref = std::max(e.max_ref, std::fabs(static_cast<double>(ref[i])));
  }
  e.nmse = den > 0 ? num / den : num;
  return e;
}

void expect_close(const std::vector<float>& got, const std::vector<float>& ref, double bound, const std::string& what) {
  ASSERT_EQ(got.size(), ref.size()) << what;
  const ErrorStats e = compare(got, ref);
  std::printf("  %-62s NMSE %.3g (bound %.0e)  max abs err %.3g  max |ref| %.3g\n", what.c_str(), e.nmse, bound,
              e.max_abs, e.max_ref);
  EXPECT_EQ(e.non_finite, 0u) << what << ": non-finite outputs";
  EXPECT_LE(e.nmse, bound) << what << ": NMSE " << e.nmse << ", max abs error " << e.max_abs;
}

// The reference itself against the CPU backend (checked in tests/backend against a contiguous
// per-sequence reference) on a context short enough for it; needs no GPU.
TEST(CudaLongAttention, ReferenceMatchesCpuBackend) {
  auto c = cpu_reference();
  ASSERT_TRUE(c);
  const int64_t ctx = 3001, H = 8;
  const HostKv kv = make_host_kv(kKvHeads, ctx, 3);
  // The paged cache of the CPU backend, [num_blocks, kBlock, kKvHeads, kD].
  std::vector<float> kc(static_cast<size_t>(kv.num_blocks * kBlock * kKvHeads * kD), 0.0f), vc(kc.size(), 0.0f);
  for (int64_t p = 0; p < ctx; ++p)
    for (int64_t h = 0; h < kKvHeads; ++h) {
      const int64_t at = ((kv.table[p / kBlock] * kBlock + p % kBlock) * kKvHeads + h) * kD;
      std::memcpy(&kc[at], kv.key(h, p), kD * sizeof(float));
      std::memcpy(&vc[at], kv.value(h, p), kD * sizeof(float));
    }
  const KvCacheLayer layer{DType::kF32, kv.num_blocks, kBlock, kKvHeads, kD, kc.data(), vc.data()};
  const int32_t max_blocks = static_cast<int32_t>(kv.table.size());
  for (int64_t T : {int64_t{1}, int64_t{77}}) {
    const auto q = make_queries(kv, T, H, ctx, 5);
    const std::vector<int32_t> qstart{0, static_cast<int32_t>(T)}, ctxs{static_cast<int32_t>(ctx)};
    std::vector<float> out(q.size(), -1.0f);
    const PagedAttentionArgs a{T, 1, H, max_blocks, 1.0f / std::sqrt(static_cast<float>(kD)), q.data(), qstart.data(),
                               ctxs.data(), kv.table.data(), out.data()};
    ASSERT_TRUE(c->paged_attention(a, layer).ok());
    expect_close(reference_attention(kv, q, T, H, ctx), out, 1e-10, "reference vs cpu backend T=" + std::to_string(T));
  }
}

// ---- the GPU side ----

struct DeviceCache {
  Buffer k, v, table;
  KvCacheLayer layer;
};

// The paged cache of `dtype` filled through kv_write in chunks; spare blocks hold 0xFF bytes
// (NaN in f32, BF16 and E4M3).
void fill_device_cache(Backend& g, const HostKv& kv, DType dtype, DeviceCache* dc) {
  const size_t elem = dtype == DType::kF32 ? 4 : dtype == DType::kBF16 ? 2 : 1;
  const size_t block_bytes = static_cast<size_t>(kBlock * kv.num_kv_heads * kD) * elem;
  const size_t bytes = block_bytes * static_cast<size_t>(kv.num_blocks);
  auto k = g.alloc(bytes), v = g.alloc(bytes);
  ASSERT_TRUE(k.ok() && v.ok()) << "cache of " << bytes << " bytes";
  dc->k = *k;
  dc->v = *v;
  dc->layer = KvCacheLayer{dtype, kv.num_blocks, kBlock, kv.num_kv_heads, kD, dc->k.data(), dc->v.data()};
  if (dtype == DType::kF8E4M3) {
    dc->layer.k_scale = kKScale;
    dc->layer.v_scale = kVScale;
  }
  ASSERT_TRUE(g.zero(dc->k.data(), bytes).ok() && g.zero(dc->v.data(), bytes).ok());
  std::vector<bool> used(static_cast<size_t>(kv.num_blocks), false);
  for (int32_t b : kv.table) used[static_cast<size_t>(b)] = true;
  const std::vector<uint8_t> poison(block_bytes, 0xFF);
  for (int64_t b = 0; b < kv.num_blocks; ++b)
    if (!used[static_cast<size_t>(b)]) {
      ASSERT_TRUE(g.copy_to_device(dc->k.as<uint8_t>() + b * block_bytes, poison.data(), block_bytes).ok());
      ASSERT_TRUE(g.copy_to_device(dc->v.as<uint8_t>() + b * block_bytes, poison.data(), block_bytes).ok());
    }
  constexpr int64_t kChunk = 8192;
  const int64_t row = kv.num_kv_heads * kD;
  std::vector<float> kin(static_cast<size_t>(kChunk * row)), vin(kin.size());
  std::vector<int64_t> slots(kChunk);
  auto dk = g.alloc(kin.size() * sizeof(float)), dv = g.alloc(vin.size() * sizeof(float));
  auto ds = g.alloc(slots.size() * sizeof(int64_t));
  ASSERT_TRUE(dk.ok() && dv.ok() && ds.ok());
  for (int64_t p0 = 0; p0 < kv.context; p0 += kChunk) {
    const int64_t n = std::min(kChunk, kv.context - p0);
    for (int64_t t = 0; t < n; ++t) {
      const int64_t p = p0 + t;
      slots[t] = static_cast<int64_t>(kv.table[p / kBlock]) * kBlock + p % kBlock;
      for (int64_t h = 0; h < kv.num_kv_heads; ++h) {
        std::memcpy(&kin[(t * kv.num_kv_heads + h) * kD], kv.key(h, p), kD * sizeof(float));
        std::memcpy(&vin[(t * kv.num_kv_heads + h) * kD], kv.value(h, p), kD * sizeof(float));
      }
    }
    ASSERT_TRUE(g.copy_to_device(dk->data(), kin.data(), n * row * sizeof(float)).ok());
    ASSERT_TRUE(g.copy_to_device(dv->data(), vin.data(), n * row * sizeof(float)).ok());
    ASSERT_TRUE(g.copy_to_device(ds->data(), slots.data(), n * sizeof(int64_t)).ok());
    Status st = g.kv_write({n, dk->as<float>(), dv->as<float>(), ds->as<int64_t>()}, dc->layer);
    ASSERT_TRUE(st.ok()) << st.to_string();
    st = g.synchronize();  // the staging buffers are refilled next
    ASSERT_TRUE(st.ok()) << st.to_string();
  }
  dc->table = to_device(g, kv.table);
}

// One sequence: T query rows ending at `context` over the full block table.
std::vector<float> gpu_attention(Backend& g, const DeviceCache& dc, const std::vector<float>& q, int64_t T, int64_t H,
                                 int64_t context) {
  Buffer dq = to_device(g, q);
  Buffer qs = to_device(g, std::vector<int32_t>{0, static_cast<int32_t>(T)});
  Buffer cl = to_device(g, std::vector<int32_t>{static_cast<int32_t>(context)});
  auto out = g.alloc(q.size() * sizeof(float));
  EXPECT_TRUE(out.ok());
  if (!out.ok() || dq.empty()) return {};
  const int64_t max_blocks = static_cast<int64_t>(dc.table.nbytes() / sizeof(int32_t));
  const PagedAttentionArgs a{T, 1, H, max_blocks, 1.0f / std::sqrt(static_cast<float>(kD)), dq.as<float>(),
                             qs.as<int32_t>(), cl.as<int32_t>(), dc.table.as<int32_t>(), out->as<float>()};
  Status st = g.paged_attention(a, dc.layer);
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (st.ok()) st = g.synchronize();
  EXPECT_TRUE(st.ok()) << st.to_string();
  if (!st.ok()) return {};
  return to_host<float>(g, *out, q.size());
}

// Bounds, from the ones tests/backend_cuda/cuda_attention_test.cc justifies up to 9000 keys:
// the CUDA-core kernel differs from the reference only by f32 summation order (1e-9 there;
// FP8 caches 1e-8, the scales applied to q.k and the output instead of each element); the
// variance of that rounding grows with the number of keys summed, 14.6x more here, hence 1e-8
// (power-of-two scales here are exact). The tensor-core kernel rounds Q and P to BF16 (K and
// V already are BF16-exact): 1e-4 as there.
constexpr double kExactBound = 1e-8;
constexpr double kFastBound = 1e-4;

struct Check {
  const char* name;
  int64_t T, context;
};
const Check kChecks[] = {
    {"decode @131071", 1, kContext},
    {"prefill chunk [130560, 131072)", 512, kContext},
    {"prefill chunk [65536, 65792)", 256, 65536 + 256},
};

double elapsed_s(std::chrono::steady_clock::time_point since) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - since).count();
}

void run_long_attention(int64_t num_heads) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  auto t0 = std::chrono::steady_clock::now();
  const HostKv kv = make_host_kv(kKvHeads, kContext, 17);
  std::vector<std::vector<float>> qs, refs;
  for (const Check& c : kChecks) {
    qs.push_back(make_queries(kv, c.T, num_heads, c.context, 100 + static_cast<uint32_t>(c.T)));
    refs.push_back(reference_attention(kv, qs.back(), c.T, num_heads, c.context));
  }
  std::printf("  H=%lld/%lld: data and CPU reference in %.1f s (%d threads)\n", static_cast<long long>(num_heads),
              static_cast<long long>(kKvHeads), elapsed_s(t0), default_thread_pool().num_threads());
  // The data must make an off-by-one context visible: the decode row without its own key.
  const auto shifted = reference_attention(kv, qs[0], 1, num_heads, kContext - 1);
  EXPECT_GT(compare(shifted, refs[0]).nmse, 1e3 * kFastBound) << "the data would hide an off-by-one mask";

  for (DType dt : {DType::kF32, DType::kBF16, DType::kF8E4M3}) {
    t0 = std::chrono::steady_clock::now();
    DeviceCache dc;
    fill_device_cache(*g, kv, dt, &dc);
    if (::testing::Test::HasFatalFailure()) return;
    for (ActivationPrecision prec : {ActivationPrecision::kFast, ActivationPrecision::kExact}) {
      g->set_activation_precision(prec);
      for (size_t i = 0; i < std::size(kChecks); ++i) {
        const Check& c = kChecks[i];
        // Fast precision: prompt chunks take the tensor-core prefill kernel, decode rows of a
        // bf16 or fp8 cache the tensor-core decode kernel; everything else the CUDA cores.
        const bool tensor_cores = prec == ActivationPrecision::kFast && (c.T >= 64 || dt != DType::kF32);
        if (c.T == 1 && prec == ActivationPrecision::kExact && dt == DType::kF32) continue;  // same kernel as kFast
        const std::string what = std::string("H=") + std::to_string(num_heads) + "/2 " + dtype_name(dt) + " " +
                                 c.name + (tensor_cores ? " (tensor cores)" : " (cuda cores)");
        expect_close(gpu_attention(*g, dc, qs[i], c.T, num_heads, c.context), refs[i],
                     tensor_cores ? kFastBound : kExactBound, what);
      }
    }
    g->set_activation_precision(ActivationPrecision::kFast);
    std::printf("  %s cache: filled and checked in %.1f s\n", dtype_name(dt), elapsed_s(t0));
  }
}

TEST(CudaLongAttention, Gqa4At128K) { run_long_attention(8); }
TEST(CudaLongAttention, Gqa8At128K) { run_long_attention(16); }

}  // namespace
}  // namespace lancet
