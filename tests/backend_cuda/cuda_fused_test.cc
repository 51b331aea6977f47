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
