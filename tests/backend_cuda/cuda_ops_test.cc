// Every CUDA token-parallel op and the matmul against the CPU backend on random inputs of odd
// sizes (1, 7, 97, 769, 5125 tokens). NMSE bounds per op:
//  - exact data movement (embedding, gather_rows, memory): bit-equal;
//  - f32 element-wise math (rms_norm, rope, silu_mul): 1e-10 (only rounding order differs);
//  - matmul: the GPU rounds activations to BF16 (relative error <= 2^-9 per element, random
//    signs, so NMSE ~ 2^-18 / 3 ~ 1.3e-6); bound 2e-5 for BF16 weights, also for F32/FP8
//    weights (rounded to BF16 at upload) and 5e-5 for Q8_0/Q4_K (dequantized on the host).
#include <algorithm>
#include <cstring>
#include <numeric>

#include "backend/cuda/device_info.h"
#include "backend/cuda/kernels.h"
#include "cuda_test_util.h"
#include "quant/gguf_blocks.h"

namespace lancet {
namespace {

using namespace lancet::testing;

const int64_t kTokenCounts[] = {1, 7, 97, 769, 5125};

TEST(CudaDevice, GpuIsPresent) {
  const auto devs = cuda::list_devices();
  ASSERT_FALSE(devs.empty()) << "no GPU visible: this test binary must run on the GPU machine";
  EXPECT_GE(devs[0].sm_major, 8);
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  EXPECT_STREQ(g->name(), "cuda");
}

TEST(CudaMemory, RoundTripAndZero) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  std::vector<float> v = random_floats(12345, 1);
  Buffer b = to_device(*g, v);
  EXPECT_EQ(to_host<float>(*g, b, v.size()), v);
  ASSERT_TRUE(g->zero(b.data(), 100 * sizeof(float)).ok());
  auto z = to_host<float>(*g, b, v.size());
  for (int i = 0; i < 100; ++i) ASSERT_EQ(z[i], 0.0f);
  EXPECT_EQ(z[100], v[100]);
  ASSERT_TRUE(g->synchronize().ok());
}

TEST(CudaOps, EmbeddingMatchesCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  const int64_t vocab = 1000, cols = 257;
  const auto table = to_bf16(random_floats(vocab * cols, 2));
  TensorView tv{DType::kBF16, {vocab, cols}, table.data(), table.size() * 2};
  auto wg = g->upload_weight({"embed", &tv, nullptr});
  auto wc = c->upload_weight({"embed", &tv, nullptr});
  ASSERT_TRUE(wg.ok() && wc.ok()) << wg.status().to_string();
  for (int64_t n : kTokenCounts) {
    std::vector<int32_t> ids(n);
    std::mt19937 r(static_cast<uint32_t>(n));
    for (auto& id : ids) id = static_cast<int32_t>(r() % vocab);
    std::vector<float> ref(n * cols);
    ASSERT_TRUE(c->embedding(*wc, ids.data(), n, ref.data()).ok());
    Buffer d_ids = to_device(*g, ids);
    auto out = g->alloc(n * cols * sizeof(float));
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(g->embedding(*wg, d_ids.as<int32_t>(), n, out->as<float>()).ok());
    ASSERT_TRUE(g->synchronize().ok());
    EXPECT_EQ(to_host<float>(*g, *out, n * cols), ref) << "n=" << n;
  }
}

TEST(CudaOps, BadIndicesAreReportedAtSynchronize) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const auto table = to_bf16(random_floats(10 * 64, 3));
  TensorView tv{DType::kBF16, {10, 64}, table.data(), table.size() * 2};
  auto w = g->upload_weight({"embed", &tv, nullptr});
  ASSERT_TRUE(w.ok());
  Buffer ids = to_device(*g, std::vector<int32_t>{3, 10});
  auto out = g->alloc(2 * 64 * sizeof(float));
  ASSERT_TRUE(out.ok());
  ASSERT_TRUE(g->embedding(*w, ids.as<int32_t>(), 2, out->as<float>()).ok());
  Status st = g->synchronize();
  EXPECT_EQ(st.code(), StatusCode::kOutOfRange) << st.to_string();
  EXPECT_NE(st.message().find("embedding"), std::string::npos) << st.message();
  EXPECT_TRUE(g->synchronize().ok()) << "the error word must clear once reported";
  // Row gather past n.
  Buffer x = to_device(*g, random_floats(4 * 8, 4));
  Buffer rows = to_device(*g, std::vector<int32_t>{0, 4});
  ASSERT_TRUE(g->gather_rows(x.as<float>(), 4, 8, rows.as<int32_t>(), 2, out->as<float>()).ok());
  EXPECT_EQ(g->synchronize().code(), StatusCode::kOutOfRange);
}

TEST(CudaOps, RmsNormMatchesCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  for (int64_t dim : {64, 97, 4096}) {
    const auto w = random_floats(dim, 5, 2.0f);
    Buffer dw = to_device(*g, w);
    for (int64_t n : kTokenCounts) {
      // mode 0: residual += x then norm; 1: norm of residual alone; 2: norm of x alone.
      for (int mode = 0; mode < 3; ++mode) {
        const auto x = random_floats(n * dim, 6 + mode, 3.0f);
        auto res = random_floats(n * dim, 9 + mode);
        std::vector<float> out(n * dim), res_ref = res;
        RmsNormArgs a{n, dim, mode == 1 ? nullptr : x.data(), mode == 2 ? nullptr : res_ref.data(), w.data(),
                      1e-5f, out.data()};
        ASSERT_TRUE(c->rms_norm(a).ok());
        Buffer dx = to_device(*g, x), dr = to_device(*g, res);
        auto dout = g->alloc(n * dim * sizeof(float));
        ASSERT_TRUE(dout.ok());
        RmsNormArgs ga{n, dim, mode == 1 ? nullptr : dx.as<float>(), mode == 2 ? nullptr : dr.as<float>(),
                       dw.as<float>(), 1e-5f, dout->as<float>()};
        ASSERT_TRUE(g->rms_norm(ga).ok());
        ASSERT_TRUE(g->synchronize().ok());
        const std::string what = "rms_norm dim=" + std::to_string(dim) + " n=" + std::to_string(n) +
                                 " mode=" + std::to_string(mode);
        expect_nmse(to_host<float>(*g, *dout, n * dim), out, 1e-10, what);
        if (mode != 2) expect_nmse(to_host<float>(*g, dr, n * dim), res_ref, 1e-12, what + " residual");
      }
    }
  }
}

TEST(CudaOps, RopeMatchesCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  const int64_t max_pos = 9000;
  for (int64_t head_dim : {64, 128}) {
    for (int64_t rot : {head_dim, head_dim / 2}) {
      const auto cs = random_floats(max_pos * rot / 2, 11);
      const auto sn = random_floats(max_pos * rot / 2, 12);
      Buffer dcs = to_device(*g, cs), dsn = to_device(*g, sn);
      for (bool inter : {false, true}) {
        for (int64_t n : kTokenCounts) {
          const int64_t H = 6, KH = 2;
          auto q = random_floats(n * H * head_dim, 13);
          auto k = random_floats(n * KH * head_dim, 14);
          std::vector<int32_t> pos(n);
          std::mt19937 r(static_cast<uint32_t>(n + 7));
          for (auto& p : pos) p = static_cast<int32_t>(r() % max_pos);
          Buffer dq = to_device(*g, q), dk = to_device(*g, k), dp = to_device(*g, pos);
          RopeArgs a{n, H, KH, head_dim, rot, inter, q.data(), k.data(), pos.data(), cs.data(), sn.data(), max_pos};
          ASSERT_TRUE(c->rope(a).ok());
          RopeArgs ga{n, H, KH, head_dim, rot, inter, dq.as<float>(), dk.as<float>(), dp.as<int32_t>(),
                      dcs.as<float>(), dsn.as<float>(), max_pos};
          ASSERT_TRUE(g->rope(ga).ok());
          ASSERT_TRUE(g->synchronize().ok());
          const std::string what = "rope D=" + std::to_string(head_dim) + " rot=" + std::to_string(rot) +
                                   (inter ? " interleaved" : " halves") + " n=" + std::to_string(n);
          expect_nmse(to_host<float>(*g, dq, q.size()), q, 1e-12, what + " q");
          expect_nmse(to_host<float>(*g, dk, k.size()), k, 1e-12, what + " k");
        }
      }
    }
  }
}

TEST(CudaOps, SiluMulMatchesCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  const int64_t d = 769;
  for (int64_t n : kTokenCounts) {
    const auto gate = random_floats(n * d, 15, 8.0f), up = random_floats(n * d, 16, 2.0f);
    std::vector<float> ref(n * d);
    ASSERT_TRUE(c->silu_mul(gate.data(), up.data(), n, d, ref.data()).ok());
    Buffer dg = to_device(*g, gate), du = to_device(*g, up);
    auto out = g->alloc(n * d * sizeof(float));
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(g->silu_mul(dg.as<float>(), du.as<float>(), n, d, out->as<float>()).ok());
    ASSERT_TRUE(g->synchronize().ok());
    expect_nmse(to_host<float>(*g, *out, n * d), ref, 1e-12, "silu_mul n=" + std::to_string(n));
  }
}

TEST(CudaOps, GatherRowsMatchesCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  const int64_t d = 97;
  for (int64_t n : kTokenCounts) {
    const auto x = random_floats(n * d, 17);
    std::vector<int32_t> rows;
    for (int64_t i = n - 1; i >= 0; i -= 3) rows.push_back(static_cast<int32_t>(i));
    const int64_t r = static_cast<int64_t>(rows.size());
    std::vector<float> ref(r * d);
    ASSERT_TRUE(c->gather_rows(x.data(), n, d, rows.data(), r, ref.data()).ok());
    Buffer dx = to_device(*g, x), dr = to_device(*g, rows);
    auto out = g->alloc(r * d * sizeof(float));
    ASSERT_TRUE(out.ok());
    ASSERT_TRUE(g->gather_rows(dx.as<float>(), n, d, dr.as<int32_t>(), r, out->as<float>()).ok());
    ASSERT_TRUE(g->synchronize().ok());
    EXPECT_EQ(to_host<float>(*g, *out, r * d), ref) << "n=" << n;
  }
}

// One weight in a given storage format, kept alive for both backends.
struct HostWeight {
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  TensorView t, s;
};

HostWeight make_weight(DType dt, int64_t m, int64_t k, uint32_t seed, bool per_row_scale) {
  HostWeight h;
  const auto f = random_floats(m * k, seed, 0.5f);
  const uint64_t rb = dtype_row_bytes(dt, k).value();
  h.bytes.resize(rb * m);
  for (int64_t r = 0; r < m; ++r) {
    uint8_t* dst = h.bytes.data() + r * rb;
    const float* src = f.data() + r * k;
    if (dt == DType::kF32) {
      std::memcpy(dst, src, k * 4);
    } else if (dt == DType::kBF16) {
      for (int64_t i = 0; i < k; ++i) reinterpret_cast<uint16_t*>(dst)[i] = f32_to_bf16(src[i]);
    } else if (dt == DType::kF8E4M3) {
      for (int64_t i = 0; i < k; ++i) dst[i] = f32_to_fp8e4m3(src[i] * 400.0f);
    } else {
      EXPECT_TRUE(quantize_row(dt, src, dst, k).ok());
    }
  }
  h.t = TensorView{dt, {m, k}, h.bytes.data(), h.bytes.size()};
  if (dt == DType::kF8E4M3) {
    h.scale = per_row_scale ? random_floats(m, seed + 1, 1.0f / 400) : std::vector<float>{1.0f / 400};
    for (auto& v : h.scale) v = std::fabs(v) + 1e-4f;
    h.s = TensorView{DType::kF32, {static_cast<int64_t>(h.scale.size())}, h.scale.data(), h.scale.size() * 4};
  }
  return h;
}

void check_matmul(Backend& g, Backend& c, DType dt, int64_t m, int64_t k, bool per_row_scale, double bound) {
  HostWeight h = make_weight(dt, m, k, static_cast<uint32_t>(m * 31 + k), per_row_scale);
  WeightSpec spec{"w", &h.t, dt == DType::kF8E4M3 ? &h.s : nullptr};
  auto wg = g.upload_weight(spec);
  auto wc = c.upload_weight(spec);
  ASSERT_TRUE(wg.ok()) << wg.status().to_string();
  ASSERT_TRUE(wc.ok()) << wc.status().to_string();
  // FP8 stays FP8 on the GPU when its rows suit the 16-byte loads; the rest becomes BF16.
  const bool fp8 = dt == DType::kF8E4M3 && k % 16 == 0;
  EXPECT_EQ(wg->dtype, fp8 ? DType::kF8E4M3 : DType::kBF16);
  for (int64_t n : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{7}, int64_t{97}, int64_t{769}}) {
    const auto x = random_floats(n * k, static_cast<uint32_t>(n + 100));
    // FP8 weights meet FP8 activations (per-row dynamic scales) above kGemvMaxRows rows, and at
    // every row count on devices with FP8 tensor cores: the reference multiplies the same
    // quantized x, so only the accumulation differs.
    const bool w8a8 = fp8 && (n > cuda::kGemvMaxRows || cuda::gemv_fp8_mma_supported());
    const std::vector<float> xr = w8a8 ? testing::w8a8_input(x, n, k) : x;
    std::vector<float> ref(n * m);
    ASSERT_TRUE(c.matmul(xr.data(), n, *wc, ref.data()).ok());
    Buffer dx = to_device(g, x);
    auto y = g.alloc(n * m * sizeof(float));
    ASSERT_TRUE(y.ok());
    Status st = g.matmul(dx.as<float>(), n, *wg, y->as<float>());
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(g.synchronize().ok());
    expect_nmse(to_host<float>(g, *y, n * m), ref, bound,
                std::string("matmul ") + dtype_name(dt) + " m=" + std::to_string(m) + " k=" + std::to_string(k) +
                    " n=" + std::to_string(n));
  }
}

TEST(CudaMatmul, Bf16WeightsMatchCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  check_matmul(*g, *c, DType::kBF16, 256, 512, false, 2e-5);
  check_matmul(*g, *c, DType::kBF16, 97, 200, false, 2e-5);
  check_matmul(*g, *c, DType::kBF16, 1000, 64, false, 2e-5);
}

TEST(CudaMatmul, ConvertedWeightsMatchCpu) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  check_matmul(*g, *c, DType::kF32, 192, 256, false, 2e-5);
  check_matmul(*g, *c, DType::kF8E4M3, 192, 256, false, 2e-5);
  check_matmul(*g, *c, DType::kF8E4M3, 192, 256, true, 2e-5);
  // Rows of k >= 12288 (the down projections): the FP8 gemv's deeper stages, with a k that
  // leaves the last warp a partial stage.
  check_matmul(*g, *c, DType::kF8E4M3, 48, 14336 + 64, true, 2e-5);
  // More 16-row tiles (513, the last one half dead) than CTAs resident at once: the FP8 gemv's
  // persistent CTAs take several tiles each.
  check_matmul(*g, *c, DType::kF8E4M3, 8200, 256, true, 2e-5);
  check_matmul(*g, *c, DType::kQ8_0, 160, 256, false, 5e-5);
  check_matmul(*g, *c, DType::kQ4_K, 96, 512, false, 5e-5);
}

}  // namespace
}  // namespace lancet
