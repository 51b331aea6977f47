// The CUDA backend's fused linear ops (q/k/v in one launch, gate/up with SiLU*mul) and graph
// capture/replay, against the CPU backend's plain ops on odd sizes. FP8 weights run W8A8 on the
// GPU (x quantized per row; at every row count on devices with FP8 tensor cores, above the gemv
// rows elsewhere), so their reference is the CPU's product with the same quantized x.
#include <gtest/gtest.h>

#include <cstring>

#include "backend/backend.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"
#include "cuda_test_util.h"

namespace lancet {
namespace {

using testing::cpu_reference;
using testing::expect_bits_equal;
using testing::expect_nmse;
using testing::gpu_backend;
using testing::random_floats;
using testing::to_device;
using testing::to_host;
using testing::w8a8_input;

// The x the GPU multiplies FP8 weights with at n rows.
std::vector<float> gpu_fp8_input(const std::vector<float>& x, int64_t n, int64_t k) {
  return n > cuda::kGemvMaxRows || cuda::gemv_fp8_mma_supported() ? w8a8_input(x, n, k) : x;
}

struct HostW {
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  TensorView t, s;
  WeightSpec spec;
};

// A weight [m, k] in BF16, or FP8 E4M3 with per-row scales.
std::unique_ptr<HostW> make(bool fp8, int64_t m, int64_t k, uint32_t seed) {
  auto h = std::make_unique<HostW>();
  const auto f = random_floats(m * k, seed, 0.5f);
  h->bytes.resize(static_cast<size_t>(m * k) * (fp8 ? 1 : 2));
  for (int64_t i = 0; i < m * k; ++i) {
    if (fp8)
      h->bytes[i] = f32_to_fp8e4m3(f[i] * 700.0f);
    else
      reinterpret_cast<uint16_t*>(h->bytes.data())[i] = f32_to_bf16(f[i]);
  }
  h->t = TensorView{fp8 ? DType::kF8E4M3 : DType::kBF16, {m, k}, h->bytes.data(), h->bytes.size()};
  if (fp8) {
    h->scale = random_floats(m, seed + 7, 1.0f / 700);
    for (float& v : h->scale) v = std::fabs(v) + 1e-4f;
    h->s = TensorView{DType::kF32, {m}, h->scale.data(), h->scale.size() * 4};
  }
  h->spec = WeightSpec{"w" + std::to_string(seed), &h->t, fp8 ? &h->s : nullptr};
  return h;
}

void check_multi(bool fp8, int64_t k, std::vector<int64_t> rows, std::vector<int64_t> ns = {1, 2, 3, 4, 5, 33}) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  std::vector<std::unique_ptr<HostW>> hw;
  std::vector<WeightMatrix> wg, wc;
  for (size_t i = 0; i < rows.size(); ++i) {
    hw.push_back(make(fp8, rows[i], k, static_cast<uint32_t>(11 + i)));
    auto a = g->upload_weight(hw.back()->spec);
    auto b = c->upload_weight(hw.back()->spec);
    ASSERT_TRUE(a.ok() && b.ok());
    wg.push_back(*a);
    wc.push_back(*b);
  }
  for (int64_t n : ns) {
    const auto x = random_floats(n * k, static_cast<uint32_t>(n + 3));
    Buffer dx = to_device(*g, x);
    std::vector<Buffer> ys;
    std::vector<float*> yp;
    std::vector<const WeightMatrix*> wp;
    for (size_t i = 0; i < rows.size(); ++i) {
      ys.push_back(*g->alloc(n * rows[i] * sizeof(float)));
      yp.push_back(ys.back().as<float>());
      wp.push_back(&wg[i]);
    }
    Status st = g->matmul_multi(dx.as<float>(), n, wp, yp);
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(g->synchronize().ok());
    const auto xr = fp8 ? gpu_fp8_input(x, n, k) : x;
    for (size_t i = 0; i < rows.size(); ++i) {
      std::vector<float> ref(n * rows[i]);
      ASSERT_TRUE(c->matmul(xr.data(), n, wc[i], ref.data()).ok());
      expect_nmse(to_host<float>(*g, ys[i], ref.size()), ref, 2e-5,
                  "matmul_multi " + std::to_string(i) + " n=" + std::to_string(n));
    }
  }
}

TEST(CudaFused, QkvMatchesSeparateCpuMatmuls) {
  check_multi(false, 136, {96, 40, 40});
  check_multi(true, 144, {96, 40, 40});
  check_multi(false, 4096, {4096, 1024, 1024});
  check_multi(true, 4096, {4096, 1024, 1024});
  // Odd row counts (gemv tiles straddle segments and the end) and k not a multiple of 64; the
  // gemv rows only (cuBLASLt's FP8 GEMMs take row counts in multiples of 16).
  check_multi(true, 784, {97, 7, 23}, {1, 2, 3, 4});
  // 512 tiles, more than the CTAs resident at once: a persistent CTA's later tiles cross from q
  // into k and v.
  check_multi(true, 256, {6144, 1024, 1024}, {1, 4});
}

void check_gate_up(bool fp8, int64_t k, int64_t m) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  auto hg = make(fp8, m, k, 21), hu = make(fp8, m, k, 22);
  auto gg = g->upload_weight(hg->spec), gu = g->upload_weight(hu->spec);
  auto cg = c->upload_weight(hg->spec), cu = c->upload_weight(hu->spec);
  ASSERT_TRUE(gg.ok() && gu.ok() && cg.ok() && cu.ok());
  for (int64_t n : {1, 3, 4, 9}) {
    const auto x = random_floats(n * k, static_cast<uint32_t>(n + 5));
    const auto xr = fp8 ? gpu_fp8_input(x, n, k) : x;
    std::vector<float> a(n * m), b(n * m), ref(n * m);
    ASSERT_TRUE(c->matmul(xr.data(), n, *cg, a.data()).ok());
    ASSERT_TRUE(c->matmul(xr.data(), n, *cu, b.data()).ok());
    ASSERT_TRUE(c->silu_mul(a.data(), b.data(), n, m, ref.data()).ok());
    Buffer dx = to_device(*g, x);
    Buffer s1 = *g->alloc(n * m * 4), s2 = *g->alloc(n * m * 4), act = *g->alloc(n * m * 4);
    Status st = g->matmul_gate_up_silu(dx.as<float>(), n, *gg, *gu, s1.as<float>(), s2.as<float>(), act.as<float>());
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(g->synchronize().ok());
    expect_nmse(to_host<float>(*g, act, ref.size()), ref, 4e-5, "gate_up_silu n=" + std::to_string(n));
  }
}

TEST(CudaFused, GateUpSiluMatchesCpu) {
  check_gate_up(false, 264, 100);
  check_gate_up(true, 272, 100);
  check_gate_up(true, 14336, 40);  // a long k: every warp of a tile gets many k-blocks
}

// ---- BF16 GEMM inputs written by their producers (fast precision, above the gemv rows) ----

// The norm's BF16 copy feeds q/k/v: the same bits as when the matmul converts the norm's f32
// output itself (a zero() in between ends the record), and the CPU's product within BF16
// input rounding. An output 4 bytes off 16-byte alignment takes the norm's scalar path.
TEST(CudaFused, Bf16NormThenQkvIsBitExactWithOrWithoutTheRecord) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  for (int64_t dim : {576, 4096}) {
    const std::vector<int64_t> rows = {dim, dim / 4 + 8, dim / 4 + 8};
    std::vector<std::unique_ptr<HostW>> hw;
    std::vector<WeightMatrix> wg, wc;
    for (size_t i = 0; i < rows.size(); ++i) {
      hw.push_back(make(false, rows[i], dim, static_cast<uint32_t>(40 + i)));
      wg.push_back(*g->upload_weight(hw.back()->spec));
      wc.push_back(*c->upload_weight(hw.back()->spec));
    }
    std::vector<const WeightMatrix*> wp = {&wg[0], &wg[1], &wg[2]};
    auto nw = random_floats(dim, 45, 0.5f);
    for (float& v : nw) v += 1.0f;
    Buffer dnw = to_device(*g, nw), spare = *g->alloc(256);
    for (int64_t n : {5, 37, 300}) for (int off : {0, 1}) {
      const auto x = random_floats(n * dim, static_cast<uint32_t>(n + 46), 3.0f);
      const auto res = random_floats(n * dim, static_cast<uint32_t>(n + 47));
      const std::string what = "dim=" + std::to_string(dim) + " n=" + std::to_string(n) + " off=" + std::to_string(off);
      std::vector<std::vector<float>> outs[2];
      for (int run = 0; run < 2; ++run) {
        Buffer dx = to_device(*g, x), dr = to_device(*g, res), dout_buf = *g->alloc((n * dim + 4) * 4);
        float* dout = dout_buf.as<float>() + off;
        std::vector<Buffer> ys;
        std::vector<float*> yp;
        for (int64_t r : rows) {
          ys.push_back(*g->alloc(n * r * 4));
          yp.push_back(ys.back().as<float>());
        }
        RmsNormArgs a{n, dim, dx.as<float>(), dr.as<float>(), dnw.as<float>(), 1e-5f, dout};
        ASSERT_TRUE(g->rms_norm(a).ok());
        if (run == 1) ASSERT_TRUE(g->zero(spare.data(), 64).ok());
        Status st = g->matmul_multi(dout, n, wp, yp);
        ASSERT_TRUE(st.ok()) << st.to_string();
        ASSERT_TRUE(g->synchronize().ok());
        for (size_t i = 0; i < rows.size(); ++i) outs[run].push_back(to_host<float>(*g, ys[i], n * rows[i]));
      }
      std::vector<float> xr = x, rr = res, normed(n * dim);
      RmsNormArgs ca{n, dim, xr.data(), rr.data(), nw.data(), 1e-5f, normed.data()};
      ASSERT_TRUE(c->rms_norm(ca).ok());
      for (size_t i = 0; i < rows.size(); ++i) {
        expect_bits_equal(outs[0][i], outs[1][i], what + " w" + std::to_string(i) + " with / without the record");
        std::vector<float> ref(n * rows[i]);
        ASSERT_TRUE(c->matmul(normed.data(), n, wc[i], ref.data()).ok());
        expect_nmse(outs[0][i], ref, 2e-5, what + " w" + std::to_string(i) + " vs cpu");
      }
    }
  }
}

// gate/up with BF16 outputs, SiLU * up writing act and its BF16 copy, then the down projection:
// act and y the same bits whether down takes the copy or converts act itself; act within the
// gate/up outputs' BF16 rounding of the CPU's; act aliasing the scratch takes the f32 path.
TEST(CudaFused, Bf16GateUpSiluFeedsTheDownProjection) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  for (int64_t m : {1536, 1000}) {  // 1000: rows of n * m not a multiple of 8 for odd n
    const int64_t k = 576;
    auto hg = make(false, m, k, 51), hu = make(false, m, k, 52), hd = make(false, k, m, 53);
    WeightMatrix gg = *g->upload_weight(hg->spec), gu = *g->upload_weight(hu->spec), gd = *g->upload_weight(hd->spec);
    WeightMatrix cg = *c->upload_weight(hg->spec), cu = *c->upload_weight(hu->spec), cd = *c->upload_weight(hd->spec);
    Buffer spare = *g->alloc(256);
    for (int64_t n : {5, 37, 300}) {
      const std::string what = "m=" + std::to_string(m) + " n=" + std::to_string(n);
      const auto x = random_floats(n * k, static_cast<uint32_t>(n + 54));
      std::vector<float> acts[3], ys[3];
      for (int run = 0; run < 3; ++run) {  // 1: zero() before down; 2: act = gate_out
        Buffer dx = to_device(*g, x), s1 = *g->alloc(n * m * 4), s2 = *g->alloc(n * m * 4);
        Buffer act_buf = *g->alloc(n * m * 4), y = *g->alloc(n * k * 4);
        float* act = run == 2 ? s1.as<float>() : act_buf.as<float>();
        Status st = g->matmul_gate_up_silu(dx.as<float>(), n, gg, gu, s1.as<float>(), s2.as<float>(), act);
        ASSERT_TRUE(st.ok()) << st.to_string();
        if (run == 1) ASSERT_TRUE(g->zero(spare.data(), 64).ok());
        ASSERT_TRUE(g->matmul(act, n, gd, y.as<float>()).ok());
        ASSERT_TRUE(g->synchronize().ok());
        acts[run] = to_host<float>(*g, run == 2 ? s1 : act_buf, n * m);
        ys[run] = to_host<float>(*g, y, n * k);
      }
      expect_bits_equal(acts[0], acts[1], what + " act");
      expect_bits_equal(ys[0], ys[1], what + " y");
      std::vector<float> a(n * m), b(n * m), act_ref(n * m), y_ref(n * k);
      ASSERT_TRUE(c->matmul(x.data(), n, cg, a.data()).ok());
      ASSERT_TRUE(c->matmul(x.data(), n, cu, b.data()).ok());
      ASSERT_TRUE(c->silu_mul(a.data(), b.data(), n, m, act_ref.data()).ok());
      ASSERT_TRUE(c->matmul(act_ref.data(), n, cd, y_ref.data()).ok());
      for (int run : {0, 2}) {
        const std::string w = what + (run == 2 ? " (act = gate_out)" : "");
        expect_nmse(acts[run], act_ref, 4e-5, w + " act vs cpu");
        expect_nmse(ys[run], y_ref, 4e-5, w + " y vs cpu");
      }
    }
  }
}

TEST(CudaFused, MismatchedShapesAreErrors) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  auto a = make(false, 16, 64, 1), b = make(false, 16, 32, 2);
  auto wa = g->upload_weight(a->spec), wb = g->upload_weight(b->spec);
  ASSERT_TRUE(wa.ok() && wb.ok());
  Buffer x = *g->alloc(64 * 4), y = *g->alloc(64 * 4), z = *g->alloc(64 * 4);
  EXPECT_FALSE(g->matmul_gate_up_silu(x.as<float>(), 1, *wa, *wb, y.as<float>(), z.as<float>(), y.as<float>()).ok());
  const WeightMatrix* ws[2] = {&*wa, &*wb};
  float* ys[2] = {y.as<float>(), z.as<float>()};
  EXPECT_FALSE(g->matmul_multi(x.as<float>(), 1, ws, ys).ok());
}

TEST(CudaGraph, ReplayFollowsTheInputData) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  ASSERT_TRUE(g->supports_graphs());
  auto h = make(false, 64, 128, 5);
  auto wg = g->upload_weight(h->spec);
  auto wc = c->upload_weight(h->spec);
  ASSERT_TRUE(wg.ok() && wc.ok());
  Buffer x = *g->alloc(2 * 128 * 4), y = *g->alloc(2 * 64 * 4), act = *g->alloc(2 * 64 * 4);
  // Warm up (sizes scratch), then capture matmul + silu.
  auto x0 = random_floats(2 * 128, 1);
  ASSERT_TRUE(g->copy_to_device(x.data(), x0.data(), x0.size() * 4).ok());
  ASSERT_TRUE(g->matmul(x.as<float>(), 2, *wg, y.as<float>()).ok());
  ASSERT_TRUE(g->synchronize().ok());
  ASSERT_TRUE(g->begin_capture().ok());
  ASSERT_TRUE(g->matmul(x.as<float>(), 2, *wg, y.as<float>()).ok());
  ASSERT_TRUE(g->silu_mul(y.as<float>(), y.as<float>(), 2, 64, act.as<float>()).ok());
  auto graph = g->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  for (uint32_t seed : {2u, 3u}) {
    auto xs = random_floats(2 * 128, seed);
    ASSERT_TRUE(g->copy_to_device(x.data(), xs.data(), xs.size() * 4).ok());
    ASSERT_TRUE(g->launch_graph(**graph).ok());
    ASSERT_TRUE(g->synchronize().ok());
    std::vector<float> yr(2 * 64), ref(2 * 64);
    ASSERT_TRUE(c->matmul(xs.data(), 2, *wc, yr.data()).ok());
    ASSERT_TRUE(c->silu_mul(yr.data(), yr.data(), 2, 64, ref.data()).ok());
    expect_nmse(to_host<float>(*g, act, ref.size()), ref, 4e-5, "graph replay seed " + std::to_string(seed));
  }
  // A second capture while one is open is refused; end_capture without a capture too.
  ASSERT_TRUE(g->begin_capture().ok());
  EXPECT_FALSE(g->begin_capture().ok());
  EXPECT_TRUE(g->end_capture().ok());
  EXPECT_FALSE(g->end_capture().ok());
}

}  // namespace
}  // namespace lancet
