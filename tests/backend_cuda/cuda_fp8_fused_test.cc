// The FP8 GEMM path's fused producers: rms_norm quantizing its output rows for the next FP8
// matmul, and matmul_gate_up_silu's epilogue (scales, SiLU * up, act quantized for the down
// projection). Checks: results against the CPU backend (NMSE bounds of the FP8 matmul tests);
// bit equality with the unfused sequence (the same quantization math on the same bytes);
// that any write between the producer and the matmul (copy_to_device, zero, a kernel) is
// seen; that the matmul really uses the producer's quantization (a write behind the backend's
// back is not seen); and that graph capture neither uses an eager quantization nor replays
// stale data.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

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

constexpr float kEps = 1e-5f;

// An FP8 E4M3 weight [m, k] (values over most of the E4M3 range) with per-row or per-tensor
// scales, kept alive for both backends.
struct Fp8Weight {
  std::vector<uint8_t> bytes;
  std::vector<float> scale;
  TensorView t, s;
  WeightSpec spec;
};

std::unique_ptr<Fp8Weight> make_fp8(int64_t m, int64_t k, uint32_t seed, bool per_row) {
  auto h = std::make_unique<Fp8Weight>();
  const auto f = random_floats(m * k, seed, 0.5f);
  h->bytes.resize(static_cast<size_t>(m * k));
  for (int64_t i = 0; i < m * k; ++i) h->bytes[i] = f32_to_fp8e4m3(f[i] * 700.0f);
  if (per_row) {
    h->scale = random_floats(m, seed + 7, 1.0f / 700);
    for (float& v : h->scale) v = std::fabs(v) + 1e-4f;
  } else {
    h->scale = {1.0f / 700};
  }
  h->t = TensorView{DType::kF8E4M3, {m, k}, h->bytes.data(), h->bytes.size()};
  h->s = TensorView{DType::kF32, {static_cast<int64_t>(h->scale.size())}, h->scale.data(), h->scale.size() * 4};
  h->spec = WeightSpec{"w" + std::to_string(seed), &h->t, &h->s};
  return h;
}

// The weight on the GPU (kept FP8: k is a multiple of 16) and on the CPU reference.
struct Pair {
  std::unique_ptr<Fp8Weight> host;
  WeightMatrix g, c;
};

Pair upload(Backend& g, Backend* c, int64_t m, int64_t k, uint32_t seed, bool per_row) {
  Pair p;
  p.host = make_fp8(m, k, seed, per_row);
  auto a = g.upload_weight(p.host->spec);
  EXPECT_TRUE(a.ok()) << a.status().to_string();
  if (a.ok()) {
    p.g = *a;
    EXPECT_EQ(p.g.dtype, DType::kF8E4M3);
  }
  if (c) {
    auto b = c->upload_weight(p.host->spec);
    EXPECT_TRUE(b.ok()) << b.status().to_string();
    if (b.ok()) p.c = *b;
  }
  return p;
}

double nmse(const std::vector<float>& a, const std::vector<float>& ref) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = static_cast<double>(a[i]) - ref[i];
    num += d * d;
    den += static_cast<double>(ref[i]) * ref[i];
  }
  return den > 0 ? num / den : num;
}

Buffer dalloc(Backend& g, size_t floats) {
  auto b = g.alloc(floats * sizeof(float));
  EXPECT_TRUE(b.ok()) << b.status().to_string();
  return b.ok() ? *b : Buffer();
}

// ---- (a) the fused gate/up epilogue against the CPU and against the CUDA ops it replaces ----

void check_gate_up(int64_t k, int64_t m) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  // Per-row scales on gate, one per-tensor scale on up: both epilogue modes.
  Pair gate = upload(*g, c.get(), m, k, 31, true), up = upload(*g, c.get(), m, k, 32, false);
  for (int64_t n : {5, 37, 300}) {
    const std::string what =
        "gate_up_silu k=" + std::to_string(k) + " m=" + std::to_string(m) + " n=" + std::to_string(n);
    const auto x = random_floats(n * k, static_cast<uint32_t>(n + 40));
    std::vector<float> a(n * m), b(n * m), ref(n * m);
    ASSERT_TRUE(c->matmul(x.data(), n, gate.c, a.data()).ok());
    ASSERT_TRUE(c->matmul(x.data(), n, up.c, b.data()).ok());
    ASSERT_TRUE(c->silu_mul(a.data(), b.data(), n, m, ref.data()).ok());
    Buffer dx = to_device(*g, x);
    Buffer s1 = dalloc(*g, n * m), s2 = dalloc(*g, n * m), act = dalloc(*g, n * m);
    Status st =
        g->matmul_gate_up_silu(dx.as<float>(), n, gate.g, up.g, s1.as<float>(), s2.as<float>(), act.as<float>());
    ASSERT_TRUE(st.ok()) << st.to_string();
    ASSERT_TRUE(g->synchronize().ok());
    const auto fused = to_host<float>(*g, act, n * m);
    expect_nmse(fused, ref, 8e-3, what);
    // The ops the epilogue replaces (two FP8 matmuls, each with its rescale pass, then
    // silu_mul) compute the same products in the same order: equal bit for bit.
    Buffer y1 = dalloc(*g, n * m), y2 = dalloc(*g, n * m), act2 = dalloc(*g, n * m);
    ASSERT_TRUE(g->matmul(dx.as<float>(), n, gate.g, y1.as<float>()).ok());
    ASSERT_TRUE(g->matmul(dx.as<float>(), n, up.g, y2.as<float>()).ok());
    ASSERT_TRUE(g->silu_mul(y1.as<float>(), y2.as<float>(), n, m, act2.as<float>()).ok());
    ASSERT_TRUE(g->synchronize().ok());
    expect_bits_equal(fused, to_host<float>(*g, act2, n * m), what + " vs unfused cuda ops");
  }
}

TEST(CudaFp8Fused, GateUpSiluMatchesCpu) {
  check_gate_up(576, 1536);
  check_gate_up(4096, 1792);
}

// ---- (b) rms_norm's quantization reused by matmul_multi ----

TEST(CudaFp8Fused, NormThenQkvIsBitExactWithOrWithoutTheRecord) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  for (int64_t dim : {576, 4096}) {
    const std::vector<int64_t> rows = dim == 576 ? std::vector<int64_t>{576, 192, 192}
                                                 : std::vector<int64_t>{4096, 1024, 1024};
    std::vector<Pair> w;
    for (size_t i = 0; i < rows.size(); ++i)
      w.push_back(upload(*g, c.get(), rows[i], dim, static_cast<uint32_t>(50 + i), i != 1));
    std::vector<const WeightMatrix*> wp;
    for (const Pair& p : w) wp.push_back(&p.g);
    auto nw = random_floats(dim, 60, 0.5f);
    for (float& v : nw) v += 1.0f;
    Buffer dnw = to_device(*g, nw);
    Buffer spare = dalloc(*g, 256), spare2 = dalloc(*g, 256);
    for (int64_t n : {1, 3, 5, 37, 300}) {
      const auto x = random_floats(n * dim, static_cast<uint32_t>(n + 61), 3.0f);
      const auto res = random_floats(n * dim, static_cast<uint32_t>(n + 62));
      for (int mode = 0; mode < 2; ++mode) {  // 0: norm of x; 1: residual += x, then norm
        const std::string what = "dim=" + std::to_string(dim) + " n=" + std::to_string(n) + " mode=" +
                                 std::to_string(mode);
        // run 0: the matmul consumes the norm's quantization; 1: a kernel in between; 2: zero().
        std::vector<std::vector<float>> outs[3];
        for (int run = 0; run < 3; ++run) {
          Buffer dx = to_device(*g, x), dr = to_device(*g, res), dout = dalloc(*g, n * dim);
          std::vector<Buffer> ys;
          std::vector<float*> yp;
          for (int64_t r : rows) {
            ys.push_back(dalloc(*g, n * r));
            yp.push_back(ys.back().as<float>());
          }
          RmsNormArgs a{n, dim, dx.as<float>(), mode ? dr.as<float>() : nullptr, dnw.as<float>(), kEps,
                        dout.as<float>()};
          ASSERT_TRUE(g->rms_norm(a).ok());
          if (run == 1) ASSERT_TRUE(g->silu_mul(spare.as<float>(), spare.as<float>(), 4, 64, spare2.as<float>()).ok());
          if (run == 2) ASSERT_TRUE(g->zero(spare2.data(), 64).ok());
          Status st = g->matmul_multi(dout.as<float>(), n, wp, yp);
          ASSERT_TRUE(st.ok()) << st.to_string();
          ASSERT_TRUE(g->synchronize().ok());
          for (size_t i = 0; i < rows.size(); ++i) outs[run].push_back(to_host<float>(*g, ys[i], n * rows[i]));
        }
        for (size_t i = 0; i < rows.size(); ++i) {
          expect_bits_equal(outs[0][i], outs[1][i], what + " w" + std::to_string(i) + " kernel between");
          expect_bits_equal(outs[0][i], outs[2][i], what + " w" + std::to_string(i) + " zero between");
        }
        if (dim == 4096 && n == 300) continue;  // the CPU reference's largest case adds nothing
        std::vector<float> xr = x, rr = res, normed(n * dim);
        RmsNormArgs ca{n, dim, xr.data(), mode ? rr.data() : nullptr, nw.data(), kEps, normed.data()};
        ASSERT_TRUE(c->rms_norm(ca).ok());
        // The GPU runs W8A8 here (the gemv too, on FP8 tensor cores): the reference multiplies the
        // same per-row quantization of the CPU's norm output (which may round an element to the
        // neighbouring E4M3 code where the two norms differ in the last bit).
        const bool w8a8 = n > cuda::kGemvMaxRows || cuda::gemv_fp8_mma_supported();
        const std::vector<float> xin = w8a8 ? w8a8_input(normed, n, dim) : normed;
        for (size_t i = 0; i < rows.size(); ++i) {
          std::vector<float> ref(n * rows[i]);
          ASSERT_TRUE(c->matmul(xin.data(), n, w[i].c, ref.data()).ok());
          expect_nmse(outs[0][i], ref, w8a8 ? 1e-4 : 2e-5, what + " w" + std::to_string(i) + " vs cpu");
        }
      }
    }
  }
}

// The FP8 variant of the norm writes out (and the residual) exactly as the plain one does.
TEST(CudaFp8Fused, RmsNormOutputIsUnchangedByTheFp8Variant) {
  auto plain = gpu_backend();
  auto fp8 = gpu_backend();
  ASSERT_TRUE(plain && fp8);
  Pair w = upload(*fp8, nullptr, 32, 64, 70, true);  // marks the backend as holding FP8 weights
  for (int64_t dim : {200, 576, 2048, 4096}) {
    const auto nw = random_floats(dim, 71, 2.0f);
    const int64_t n = 37;
    const auto x = random_floats(n * dim, 72, 3.0f), res = random_floats(n * dim, 73);
    for (int mode = 0; mode < 2; ++mode) {
      std::vector<float> out[2], resid[2];
      for (int b = 0; b < 2; ++b) {
        Backend& be = b ? *fp8 : *plain;
        Buffer dnw = to_device(be, nw), dx = to_device(be, x), dr = to_device(be, res);
        Buffer dout = dalloc(be, n * dim);
        RmsNormArgs a{n, dim, dx.as<float>(), mode ? dr.as<float>() : nullptr, dnw.as<float>(), kEps,
                      dout.as<float>()};
        ASSERT_TRUE(be.rms_norm(a).ok());
        ASSERT_TRUE(be.synchronize().ok());
        out[b] = to_host<float>(be, dout, n * dim);
        resid[b] = to_host<float>(be, dr, n * dim);
      }
      const std::string what = "rms_norm dim=" + std::to_string(dim) + " mode=" + std::to_string(mode);
      expect_bits_equal(out[1], out[0], what);
      expect_bits_equal(resid[1], resid[0], what + " residual");
    }
  }
}

// ---- (c) act quantized by the epilogue feeds the down projection ----
// Rows for the GEMMs: the epilogue writes act's codes. Rows for the gemv (FP8 tensor cores):
// the gate/up tiles write partial maxima of act, and the down gemv quantizes act in one pass
// with their maximum; without the record (zero() in between) it finds the maxima itself, in
// registers (down rows of up to 4096, or 8192 in short launches) or in two passes (longer ones,
// 14336 as Llama-3-8B's).

void check_down_of_fused_act(int64_t k, int64_t m, const std::vector<int64_t>& ns) {
  auto g = gpu_backend();
  auto c = cpu_reference();
  ASSERT_TRUE(g && c);
  Pair gate = upload(*g, c.get(), m, k, 81, true), up = upload(*g, c.get(), m, k, 82, true);
  Pair down = upload(*g, c.get(), k, m, 83, true);
  Buffer spare = dalloc(*g, 64);
  for (int64_t n : ns) {
    const std::string what = "down k=" + std::to_string(k) + " m=" + std::to_string(m) + " n=" + std::to_string(n);
    const auto x = random_floats(n * k, static_cast<uint32_t>(n + 84));
    std::vector<float> acts[2], ys[2];
    for (int run = 0; run < 2; ++run) {  // run 1: zero() in between, so down quantizes act itself
      Buffer dx = to_device(*g, x);
      Buffer s1 = dalloc(*g, n * m), s2 = dalloc(*g, n * m), act = dalloc(*g, n * m), y = dalloc(*g, n * k);
      Status st =
          g->matmul_gate_up_silu(dx.as<float>(), n, gate.g, up.g, s1.as<float>(), s2.as<float>(), act.as<float>());
      ASSERT_TRUE(st.ok()) << st.to_string();
      if (run == 1) ASSERT_TRUE(g->zero(spare.data(), 64).ok());
      ASSERT_TRUE(g->matmul(act.as<float>(), n, down.g, y.as<float>()).ok());
      ASSERT_TRUE(g->synchronize().ok());
      acts[run] = to_host<float>(*g, act, n * m);
      ys[run] = to_host<float>(*g, y, n * k);
    }
    expect_bits_equal(acts[0], acts[1], what + " act");
    expect_bits_equal(ys[0], ys[1], what + " y");
    if (n * m > 40 * 1536) continue;  // the CPU reference's largest cases add nothing
    std::vector<float> a(n * m), b(n * m), act_ref(n * m), y_ref(n * k);
    ASSERT_TRUE(c->matmul(x.data(), n, gate.c, a.data()).ok());
    ASSERT_TRUE(c->matmul(x.data(), n, up.c, b.data()).ok());
    ASSERT_TRUE(c->silu_mul(a.data(), b.data(), n, m, act_ref.data()).ok());
    ASSERT_TRUE(c->matmul(act_ref.data(), n, down.c, y_ref.data()).ok());
    expect_nmse(acts[0], act_ref, 8e-3, what + " act vs cpu");
    // Two FP8 activation quantizations in a row (x, then act): about twice one's error.
    expect_nmse(ys[0], y_ref, 1.2e-2, what + " y vs cpu");
  }
}

TEST(CudaFp8Fused, DownProjectionOfFusedActIsBitExact) {
  check_down_of_fused_act(576, 1536, {1, 2, 3, 4, 5, 37, 300});
  check_down_of_fused_act(256, 14336, {1, 3, 4});
  check_down_of_fused_act(512, 6144, {3});
  check_down_of_fused_act(512, 9216, {2});
}

// ---- (d) writes between the producer and the matmul are seen ----

TEST(CudaFp8Fused, WritesBetweenProducerAndMatmulAreSeen) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const int64_t n = 37, dim = 576, m = 1536;
  Pair w = upload(*g, nullptr, 192, dim, 91, true);
  Pair gate = upload(*g, nullptr, m, dim, 92, true), up = upload(*g, nullptr, m, dim, 93, false);
  Pair down = upload(*g, nullptr, dim, m, 94, true);
  const auto nw = random_floats(dim, 95, 2.0f);
  const auto x = random_floats(n * dim, 96, 3.0f), x_new = random_floats(n * dim, 97, 3.0f);
  const auto act_new = random_floats(n * m, 98);
  std::vector<int32_t> ident(n);
  std::iota(ident.begin(), ident.end(), 0);
  Buffer dnw = to_device(*g, nw), dx = to_device(*g, x), dnew = to_device(*g, x_new), dact_new = to_device(*g, act_new);
  Buffer drows = to_device(*g, ident);
  Buffer P = dalloc(*g, n * dim), y = dalloc(*g, n * 192), yref = dalloc(*g, n * 192);
  Buffer s1 = dalloc(*g, n * m), s2 = dalloc(*g, n * m), act = dalloc(*g, n * m);
  Buffer yd = dalloc(*g, n * dim), ydref = dalloc(*g, n * dim);
  const RmsNormArgs norm{n, dim, dx.as<float>(), nullptr, dnw.as<float>(), kEps, P.as<float>()};
  auto result = [&](const Buffer& b, int64_t count) {
    EXPECT_TRUE(g->synchronize().ok());
    return to_host<float>(*g, b, count);
  };

  // References from buffers no producer ever wrote.
  ASSERT_TRUE(g->matmul(dnew.as<float>(), n, w.g, yref.as<float>()).ok());
  ASSERT_TRUE(g->matmul(dact_new.as<float>(), n, down.g, ydref.as<float>()).ok());
  const auto want = result(yref, n * 192), want_down = result(ydref, n * dim);
  // What the norm output itself gives: far from the references, so the checks below can fail.
  ASSERT_TRUE(g->rms_norm(norm).ok());
  ASSERT_TRUE(g->matmul(P.as<float>(), n, w.g, y.as<float>()).ok());
  EXPECT_GT(nmse(result(y, n * 192), want), 0.1);

  ASSERT_TRUE(g->rms_norm(norm).ok());
  ASSERT_TRUE(g->copy_to_device(P.data(), x_new.data(), x_new.size() * sizeof(float)).ok());
  ASSERT_TRUE(g->matmul(P.as<float>(), n, w.g, y.as<float>()).ok());
  expect_bits_equal(result(y, n * 192), want, "copy_to_device between norm and matmul");

  ASSERT_TRUE(g->rms_norm(norm).ok());
  ASSERT_TRUE(g->gather_rows(dnew.as<float>(), n, dim, drows.as<int32_t>(), n, P.as<float>()).ok());
  ASSERT_TRUE(g->matmul(P.as<float>(), n, w.g, y.as<float>()).ok());
  expect_bits_equal(result(y, n * 192), want, "gather_rows between norm and matmul");

  ASSERT_TRUE(g->rms_norm(norm).ok());
  ASSERT_TRUE(g->zero(P.data(), n * dim * sizeof(float)).ok());
  ASSERT_TRUE(g->matmul(P.as<float>(), n, w.g, y.as<float>()).ok());
  const auto zeros = result(y, n * 192);
  EXPECT_EQ(std::count(zeros.begin(), zeros.end(), 0.0f), static_cast<ptrdiff_t>(zeros.size()))
      << "zero() between norm and matmul";

  // The gate/up epilogue's act, overwritten before the down projection.
  ASSERT_TRUE(
      g->matmul_gate_up_silu(P.as<float>(), n, gate.g, up.g, s1.as<float>(), s2.as<float>(), act.as<float>()).ok());
  ASSERT_TRUE(g->copy_to_device(act.data(), act_new.data(), act_new.size() * sizeof(float)).ok());
  ASSERT_TRUE(g->matmul(act.as<float>(), n, down.g, yd.as<float>()).ok());
  expect_bits_equal(result(yd, n * dim), want_down, "copy_to_device between gate_up_silu and down");
}

// ---- the matmul really reads the producer's quantization ----
// Overwriting the producer's output behind the backend's back (a raw cudaMemcpy, which the
// backend cannot see) is exactly what the record forbids; here it shows which bytes the next
// matmul multiplied: the producer's quantization, not the overwritten buffer. Rows for the
// gemv (n <= kGemvMaxRows, FP8 tensor cores) read the norm's codes too; its gate/up tiles
// leave partial maxima of act instead of codes, so there the down projection reads act itself
// with the scale those maxima give.
TEST(CudaFp8Fused, NextMatmulUsesTheProducersQuantization) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const int64_t dim = 576, m = 1536;
  Pair q = upload(*g, nullptr, 576, dim, 101, true), k = upload(*g, nullptr, 192, dim, 102, false);
  Pair gate = upload(*g, nullptr, m, dim, 103, true), up = upload(*g, nullptr, m, dim, 104, true);
  Pair down = upload(*g, nullptr, dim, m, 105, true);
  const WeightMatrix* ws[2] = {&q.g, &k.g};
  const auto nw = random_floats(dim, 106, 2.0f);
  for (int64_t n : {2, 37}) {
    const bool gemv = n <= cuda::kGemvMaxRows;
    if (gemv && !cuda::gemv_fp8_mma_supported()) continue;  // that gemv quantizes nothing
    const std::string what = " (n=" + std::to_string(n) + ")";
    const auto x = random_floats(n * dim, 107, 3.0f);
    const auto junk = random_floats(n * m, 108, 50.0f);
    Buffer dnw = to_device(*g, nw), dx = to_device(*g, x);
    Buffer P = dalloc(*g, n * dim), yq = dalloc(*g, n * 576), yk = dalloc(*g, n * 192);
    Buffer s1 = dalloc(*g, n * m), s2 = dalloc(*g, n * m), act = dalloc(*g, n * m), yd = dalloc(*g, n * dim);
    float* ys[2] = {yq.as<float>(), yk.as<float>()};
    const RmsNormArgs norm{n, dim, dx.as<float>(), nullptr, dnw.as<float>(), kEps, P.as<float>()};
    auto clobber = [&](const Buffer& b, size_t floats) {
      ASSERT_TRUE(g->synchronize().ok());
      ASSERT_EQ(cudaMemcpy(b.data(), junk.data(), floats * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
      ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    };
    std::vector<float> want[4], got[4];
    for (int run = 0; run < 2; ++run) {  // run 1 clobbers each producer's output before its consumer
      ASSERT_TRUE(g->rms_norm(norm).ok());
      if (run == 1) clobber(P, n * dim);
      ASSERT_TRUE(g->matmul_multi(P.as<float>(), n, ws, ys).ok());
      ASSERT_TRUE(g->rms_norm(norm).ok());
      if (run == 1) clobber(P, n * dim);
      ASSERT_TRUE(
          g->matmul_gate_up_silu(P.as<float>(), n, gate.g, up.g, s1.as<float>(), s2.as<float>(), act.as<float>()).ok());
      auto& out = run ? got : want;
      ASSERT_TRUE(g->synchronize().ok());
      out[2] = to_host<float>(*g, act, n * m);  // before act is clobbered
      if (run == 1 && !gemv) clobber(act, n * m);
      ASSERT_TRUE(g->matmul(act.as<float>(), n, down.g, yd.as<float>()).ok());
      ASSERT_TRUE(g->synchronize().ok());
      out[0] = to_host<float>(*g, yq, n * 576);
      out[1] = to_host<float>(*g, yk, n * 192);
      out[3] = to_host<float>(*g, yd, n * dim);
      if (run == 1) continue;
      // The clobbering data is far from the norm's output, so the checks below can fail.
      Buffer yj = dalloc(*g, n * 576), dj = to_device(*g, std::vector<float>(junk.begin(), junk.begin() + n * dim));
      ASSERT_TRUE(g->matmul(dj.as<float>(), n, q.g, yj.as<float>()).ok());
      ASSERT_TRUE(g->synchronize().ok());
      EXPECT_GT(nmse(to_host<float>(*g, yj, n * 576), out[0]), 0.1) << what;
    }
    expect_bits_equal(got[0], want[0], "q after the norm, output clobbered" + what);
    expect_bits_equal(got[1], want[1], "k after the norm, output clobbered" + what);
    expect_bits_equal(got[2], want[2], "act after the norm, output clobbered" + what);
    expect_bits_equal(got[3], want[3], (gemv ? "down after gate_up_silu" : "down after gate_up_silu, act clobbered") + what);
    if (!gemv) continue;
    // act overwritten with values far above its own: quantized with act's scale from the
    // gate/up tiles (saturating), not with the scale of the new values as a fresh matmul of them.
    std::vector<float> big(junk.begin(), junk.begin() + n * m);
    for (float& v : big) v *= 1e4f;
    ASSERT_TRUE(g->rms_norm(norm).ok());  // P as the norm wrote it (run 1 clobbered it)
    ASSERT_TRUE(
        g->matmul_gate_up_silu(P.as<float>(), n, gate.g, up.g, s1.as<float>(), s2.as<float>(), act.as<float>()).ok());
    ASSERT_TRUE(g->synchronize().ok());
    ASSERT_EQ(cudaMemcpy(act.data(), big.data(), big.size() * sizeof(float), cudaMemcpyHostToDevice), cudaSuccess);
    ASSERT_TRUE(g->matmul(act.as<float>(), n, down.g, yd.as<float>()).ok());
    ASSERT_TRUE(g->synchronize().ok());
    const auto stale = to_host<float>(*g, yd, n * dim);
    Buffer dj = to_device(*g, big), yf = dalloc(*g, n * dim);
    ASSERT_TRUE(g->matmul(dj.as<float>(), n, down.g, yf.as<float>()).ok());
    ASSERT_TRUE(g->synchronize().ok());
    EXPECT_GT(nmse(stale, to_host<float>(*g, yf, n * dim)), 0.1)
        << "down of clobbered act uses the tiles' maxima" << what;
  }
}

// ---- graphs ----

// A quantization that ran eagerly is not part of a graph captured afterwards: the captured
// matmul quantizes its input itself, so a replay sees the data as it is then.
TEST(CudaFp8Fused, CaptureDoesNotUseAnEagerQuantization) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  ASSERT_TRUE(g->supports_graphs());
  const int64_t n = 37, dim = 576;
  Pair w = upload(*g, nullptr, 192, dim, 111, true);
  const auto nw = random_floats(dim, 112, 2.0f);
  const auto x = random_floats(n * dim, 113, 3.0f), x_new = random_floats(n * dim, 114, 3.0f);
  Buffer dnw = to_device(*g, nw), dx = to_device(*g, x), dnew = to_device(*g, x_new);
  Buffer P = dalloc(*g, n * dim), y = dalloc(*g, n * 192), yref = dalloc(*g, n * 192);
  const RmsNormArgs norm{n, dim, dx.as<float>(), nullptr, dnw.as<float>(), kEps, P.as<float>()};
  // Warm up (scratch sizes, GEMM plans), then the reference for the new data.
  ASSERT_TRUE(g->rms_norm(norm).ok());
  ASSERT_TRUE(g->matmul(P.as<float>(), n, w.g, y.as<float>()).ok());
  ASSERT_TRUE(g->matmul(dnew.as<float>(), n, w.g, yref.as<float>()).ok());
  ASSERT_TRUE(g->synchronize().ok());
  const auto want = to_host<float>(*g, yref, n * 192);
  // The eager norm leaves its quantization of x in the scratch; the capture must not rely on it.
  ASSERT_TRUE(g->rms_norm(norm).ok());
  ASSERT_TRUE(g->begin_capture().ok());
  ASSERT_TRUE(g->matmul(P.as<float>(), n, w.g, y.as<float>()).ok());
  auto graph = g->end_capture();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  ASSERT_TRUE(g->copy_to_device(P.data(), x_new.data(), x_new.size() * sizeof(float)).ok());
  ASSERT_TRUE(g->launch_graph(**graph).ok());
  ASSERT_TRUE(g->synchronize().ok());
  expect_bits_equal(to_host<float>(*g, y, n * 192), want, "captured matmul after an eager norm");
}

// A captured layer (norm -> q/k/v, norm -> gate/up/SiLU -> down) replays what the same ops
// compute eagerly on the new input.
TEST(CudaFp8Fused, CapturedLayerReplayFollowsTheData) {
  auto g = gpu_backend();
  ASSERT_TRUE(g);
  const int64_t n = 37, dim = 576, m = 1536;
  Pair q = upload(*g, nullptr, 576, dim, 121, true), k = upload(*g, nullptr, 192, dim, 122, false);
  Pair v = upload(*g, nullptr, 192, dim, 123, true);
  Pair gate = upload(*g, nullptr, m, dim, 124, true), up = upload(*g, nullptr, m, dim, 125, false);
  Pair down = upload(*g, nullptr, dim, m, 126, true);
  const WeightMatrix* ws[3] = {&q.g, &k.g, &v.g};
  const auto nw = random_floats(dim, 127, 2.0f);
  Buffer dnw = to_device(*g, nw), X = dalloc(*g, n * dim), P = dalloc(*g, n * dim);
  Buffer yq = dalloc(*g, n * 576), yk = dalloc(*g, n * 192), yv = dalloc(*g, n * 192);
  Buffer s1 = dalloc(*g, n * m), s2 = dalloc(*g, n * m), act = dalloc(*g, n * m), yd = dalloc(*g, n * dim);
  float* ys[3] = {yq.as<float>(), yk.as<float>(), yv.as<float>()};
  const RmsNormArgs norm{n, dim, X.as<float>(), nullptr, dnw.as<float>(), kEps, P.as<float>()};
  auto layer = [&]() -> Status {
    RETURN_IF_ERROR(g->rms_norm(norm));
    RETURN_IF_ERROR(g->matmul_multi(P.as<float>(), n, ws, ys));
    RETURN_IF_ERROR(g->rms_norm(norm));
    RETURN_IF_ERROR(g->matmul_gate_up_silu(P.as<float>(), n, gate.g, up.g, s1.as<float>(), s2.as<float>(),
                                           act.as<float>()));
    return g->matmul(act.as<float>(), n, down.g, yd.as<float>());
  };
  auto outputs = [&]() {
    EXPECT_TRUE(g->synchronize().ok());
    std::vector<std::vector<float>> o;
    o.push_back(to_host<float>(*g, yq, n * 576));
    o.push_back(to_host<float>(*g, yk, n * 192));
    o.push_back(to_host<float>(*g, yv, n * 192));
    o.push_back(to_host<float>(*g, act, n * m));
    o.push_back(to_host<float>(*g, yd, n * dim));
    return o;
  };
  const auto x0 = random_floats(n * dim, 128, 3.0f);
  ASSERT_TRUE(g->copy_to_device(X.data(), x0.data(), x0.size() * sizeof(float)).ok());
  ASSERT_TRUE(layer().ok());  // warm-up: scratch sizes and GEMM plans
  ASSERT_TRUE(g->synchronize().ok());
  ASSERT_TRUE(g->begin_capture().ok());
  Status st = layer();
  auto graph = g->end_capture();
  ASSERT_TRUE(st.ok()) << st.to_string();
  ASSERT_TRUE(graph.ok()) << graph.status().to_string();
  const char* names[] = {"q", "k", "v", "act", "down"};
  for (uint32_t seed : {129u, 130u}) {
    const auto xs = random_floats(n * dim, seed, 3.0f);
    ASSERT_TRUE(g->copy_to_device(X.data(), xs.data(), xs.size() * sizeof(float)).ok());
    ASSERT_TRUE(g->launch_graph(**graph).ok());
    const auto replayed = outputs();
    ASSERT_TRUE(g->copy_to_device(X.data(), xs.data(), xs.size() * sizeof(float)).ok());
    ASSERT_TRUE(layer().ok());
    const auto eager = outputs();
    for (size_t i = 0; i < eager.size(); ++i)
      expect_bits_equal(replayed[i], eager[i],
                        std::string("replay vs eager ") + names[i] + " seed " + std::to_string(seed));
  }
}

}  // namespace
}  // namespace lancet
