// Micro-benchmark of the CUDA backend's heavy ops at Llama-3-8B shapes, next to the H200
// ceilings measured on this machine kind (copy 4.25 TB/s, BF16 GEMM 759 TFLOP/s):
//  - matmul, decode (n = 1): bytes moved (BF16 weight + f32 x/y) / time -> GB/s, % of copy;
//  - matmul, prefill (n = 512, 4096): 2nmk / time -> TFLOP/s, % of BF16 peak;
//  - paged attention, decode: K+V bytes read / time -> GB/s; prefill: 4 T^2/2 H D / time.
// Weights rotate over enough copies (>= 512 MB) that the 60 MB L2 cannot serve them.
// Times are wall clock over back-to-back launches on the backend's stream; decode-sized
// matmuls (a few microseconds each, shorter than the host takes to launch one) are captured
// into a CUDA graph of 32 calls and timed over its replays, as decode runs them. Prints a
// table and one JSON line per case.
// Built and run by bench/cuda/run_bench.sh.
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "backend/backend.h"

using namespace lancet;

namespace {

constexpr double kCopyGBs = 4250.0;
constexpr double kBf16TFlops = 759.0;
constexpr double kFp8SpecTFlops = 1979.0;  // H200 dense FP8 tensor-core peak (spec sheet; not measured)

void die(const Status& s, const char* what) {
  if (s.ok()) return;
  std::fprintf(stderr, "bench_ops: %s: %s\n", what, s.to_string().c_str());
  std::exit(1);
}

template <typename F>
double time_per_call(Backend& be, int reps, F&& fn) {
  for (int i = 0; i < 3; ++i) fn(i);
  die(be.synchronize(), "warm-up");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < reps; ++i) fn(i);
  die(be.synchronize(), "timed run");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / reps;
}

// As time_per_call, but fn(0 .. 31) captured once into a graph and the graph replayed.
template <typename F>
double time_per_call_graph(Backend& be, int replays, F&& fn) {
  constexpr int kCalls = 32;
  for (int i = 0; i < kCalls; ++i) fn(i);  // warm-up, and any lazy setup before the capture
  die(be.synchronize(), "warm-up");
  die(be.begin_capture(), "begin_capture");
  for (int i = 0; i < kCalls; ++i) fn(i);
  auto graph = be.end_capture();
  die(graph.status(), "end_capture");
  for (int i = 0; i < 2; ++i) die(be.launch_graph(**graph), "replay");
  die(be.synchronize(), "warm-up replay");
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < replays; ++i) die(be.launch_graph(**graph), "replay");
  die(be.synchronize(), "timed replays");
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / (replays * kCalls);
}

Buffer dev_alloc(Backend& be, size_t n) {
  auto b = be.alloc(n);
  die(b.status(), "alloc");
  die(be.zero(b->data(), n), "zero");
  return *b;
}

// f32 values in [-1, 1): timed inputs are never all zeros (a GEMM on zeros runs faster).
Buffer dev_random_f32(Backend& be, size_t count, uint32_t seed) {
  std::vector<float> h(count);
  uint32_t st = seed * 2654435761u + 1;
  for (auto& v : h) {
    st = st * 1664525u + 1013904223u;
    v = static_cast<float>(st >> 8) * (2.0f / 16777216.0f) - 1.0f;
  }
  Buffer b = dev_alloc(be, count * 4);
  die(be.copy_to_device(b.data(), h.data(), count * 4), "copy");
  return b;
}

void row(const char* kind, const std::string& name, double us, double achieved, const char* unit, double ceiling) {
  std::printf("%-10s %-34s %10.1f us %10.1f %-7s %5.1f%% of %.0f\n", kind, name.c_str(), us, achieved, unit,
              100.0 * achieved / ceiling, ceiling);
  std::printf("JSON {\"kind\":\"%s\",\"case\":\"%s\",\"us\":%.2f,\"achieved\":%.2f,\"unit\":\"%s\",\"ceiling\":%.0f}\n",
              kind, name.c_str(), us, achieved, unit, ceiling);
}

// fp8: E4M3 weights with per-row scales (FP8 activations above the gemv rows). Weights are
// uniform in [-0.035, 0.035) (the spread of a normal with sigma 0.02), from a cheap generator:
// the 70B shapes hold half a billion values.
// `bench_ops matmul TEXT`: only the linear layers whose name (with its "fp8 " prefix) holds TEXT
// (the decode-layer rows: "layer linears n=N", "fp8 layer linears n=N").
std::string g_matmul_filter;
std::string g_attn_filter;  // `bench_ops attn TEXT`: the attention cases TEXT picks (picked())
int g_prompt_attn_reps = 3;  // `bench_ops attn TEXT REPS`: timed calls per prompt-attention case

// Whether a case's label is picked by a filter: the label contains it, or, for a filter that
// ends in '$', ends with it ("b=1 ctx=32768 q=32768$" is the BF16 row alone).
bool picked(const std::string& label, const std::string& filter) {
  if (filter.empty() || filter.back() != '$') return label.find(filter) != std::string::npos;
  const std::string tail = filter.substr(0, filter.size() - 1);
  return label.size() >= tail.size() && label.compare(label.size() - tail.size(), tail.size(), tail) == 0;
}

// `copies` uploads of one weight [m, k] (BF16, or FP8 with per-row scales).
std::vector<WeightMatrix> upload_weights(Backend& be, const char* name, int64_t m, int64_t k, bool fp8, int copies) {
  std::vector<uint16_t> host(static_cast<size_t>(m * k));
  std::vector<uint8_t> host8;
  std::vector<float> scales;
  uint32_t st = static_cast<uint32_t>(m * 31 + k);
  for (auto& v : host) {
    st = st * 1664525u + 1013904223u;
    v = f32_to_bf16((static_cast<float>(st >> 8) * (2.0f / 16777216.0f) - 1.0f) * 0.035f);
  }
  TensorView t{DType::kBF16, {m, k}, host.data(), host.size() * 2};
  TensorView ts;
  if (fp8) {
    host8.resize(host.size());
    scales.assign(static_cast<size_t>(m), 0.1f / 448.0f);
    for (size_t i = 0; i < host.size(); ++i) host8[i] = f32_to_fp8e4m3(bf16_to_f32(host[i]) / scales[0]);
    t = TensorView{DType::kF8E4M3, {m, k}, host8.data(), host8.size()};
    ts = TensorView{DType::kF32, {m}, scales.data(), scales.size() * 4};
  }
  std::vector<WeightMatrix> ws;
  for (int c = 0; c < copies; ++c) {
    auto w = be.upload_weight({name, &t, fp8 ? &ts : nullptr});
    die(w.status(), "upload");
    ws.push_back(*w);
  }
  return ws;
}

// An FP8 GEMM alone, its input already in codes, as the model's GEMMs get it from the kernel
// before them (RMSNorm for q/k/v and gate/up, the SiLU epilogue for down): each call is an
// RMSNorm over x [n, k] (which writes the codes beside its output) and the matmul of ws[i] on
// that output; the time is the matmul's own, from the backend's op timing (CUDA events around
// each op), per call. The "fp8 ... n=N" rows above also hold the matmul's quantization pass.
double fp8_gemm_alone(Backend& be, const std::vector<WeightMatrix>& ws, int64_t n, Buffer& x, Buffer& y) {
  const int64_t k = ws[0].cols;
  Buffer gain = dev_random_f32(be, static_cast<size_t>(k), 5), normed = dev_alloc(be, static_cast<size_t>(n * k) * 4);
  const RmsNormArgs norm{n, k, x.as<float>(), nullptr, gain.as<float>(), 1e-5f, normed.as<float>()};
  auto call = [&](int i) {
    die(be.rms_norm(norm), "rms_norm");
    die(be.matmul(normed.as<float>(), n, ws[i % ws.size()], y.as<float>()), "matmul");
  };
  for (int i = 0; i < 3; ++i) call(i);
  die(be.synchronize(), "warm-up");
  die(be.set_op_timing(true), "op timing");
  constexpr int kReps = 20;
  for (int i = 0; i < kReps; ++i) call(i);
  OpTimes t;
  die(be.take_op_times(&t), "op times");
  die(be.set_op_timing(false), "op timing");
  const int g = static_cast<int>(OpKind::kGemm);
  if (t.calls[g] != kReps) die(Internal("op timing counted " + std::to_string(t.calls[g]) + " GEMMs"), "op times");
  return t.ms[g] / 1e3 / kReps;
}

void bench_matmul(Backend& be, const char* name, int64_t m, int64_t k, bool fp8, std::vector<int64_t> ns) {
  if ((std::string(fp8 ? "fp8 " : "") + name).find(g_matmul_filter) == std::string::npos) return;
  const size_t wbytes = static_cast<size_t>(m * k) * (fp8 ? 1 : 2);
  const int copies = static_cast<int>(std::max<size_t>(1, (size_t{512} << 20) / wbytes + 1));
  const std::vector<WeightMatrix> ws = upload_weights(be, name, m, k, fp8, std::min(copies, 64));
  for (int64_t n : ns) {
    Buffer x = dev_random_f32(be, static_cast<size_t>(n * k), static_cast<uint32_t>(n)),
           y = dev_alloc(be, static_cast<size_t>(n * m) * 4);
    auto call = [&](int i) { die(be.matmul(x.as<float>(), n, ws[i % ws.size()], y.as<float>()), "matmul"); };
    const double s = n <= 4 ? time_per_call_graph(be, 10, call) : time_per_call(be, 20, call);
    const std::string label = std::string(fp8 ? "fp8 " : "") + name + " n=" + std::to_string(n) + " [" +
                              std::to_string(m) + "x" + std::to_string(k) + "]";
    if (n <= 4) {
      const double bytes = wbytes + (n * k + n * m) * 4.0;
      row("matmul", label, s * 1e6, bytes / s / 1e9, "GB/s", kCopyGBs);
    } else {
      row("matmul", label, s * 1e6, 2.0 * n * m * k / s / 1e12, "TFLOP/s", fp8 ? kFp8SpecTFlops : kBf16TFlops);
    }
    if (fp8 && n > 4) {
      const double g = fp8_gemm_alone(be, ws, n, x, y);
      row("matmul", label + " gemm", g * 1e6, 2.0 * n * m * k / g / 1e12, "TFLOP/s", kFp8SpecTFlops);
    }
  }
}

// The linear half of decode layers at batch n (Llama-3-8B shape): norm, fused q/k/v, o_proj,
// norm, fused gate/up + SiLU, down_proj, as the model runs them, over layers of distinct
// weights (0.87 GB, so L2 cannot serve them), captured into one graph. Bytes: the weights
// (what bounds batch-1 decode), per layer and time: how far the launches between the gemvs
// keep the layer from the bandwidth the gemvs reach alone.
void bench_decode_layers(bool fp8, int64_t n) {
  const std::string label = std::string(fp8 ? "fp8 " : "") + "layer linears n=" + std::to_string(n);
  if (label.find(g_matmul_filter) == std::string::npos) return;
  auto made = make_backend("cuda");
  die(made.status(), "cuda backend");
  Backend& be = **made;
  const int64_t h = 4096, kvd = 1024, inter = 14336;
  const int layers = fp8 ? 4 : 2;  // 0.87 GB of weights either way
  struct Layer {
    WeightMatrix q, k, v, o, gate, up, down;
  };
  std::vector<Layer> ls;
  for (int l = 0; l < layers; ++l)
    ls.push_back(Layer{upload_weights(be, "q", h, h, fp8, 1)[0], upload_weights(be, "k", kvd, h, fp8, 1)[0],
                       upload_weights(be, "v", kvd, h, fp8, 1)[0], upload_weights(be, "o", h, h, fp8, 1)[0],
                       upload_weights(be, "gate", inter, h, fp8, 1)[0], upload_weights(be, "up", inter, h, fp8, 1)[0],
                       upload_weights(be, "down", h, inter, fp8, 1)[0]});
  Buffer res = dev_random_f32(be, static_cast<size_t>(n * h), 5), gain = dev_random_f32(be, static_cast<size_t>(h), 6);
  Buffer hidden = dev_alloc(be, static_cast<size_t>(n * h) * 4), proj = dev_random_f32(be, static_cast<size_t>(n * h), 7);
  Buffer q = dev_alloc(be, static_cast<size_t>(n * h) * 4), k = dev_alloc(be, static_cast<size_t>(n * kvd) * 4),
         v = dev_alloc(be, static_cast<size_t>(n * kvd) * 4);
  Buffer s1 = dev_alloc(be, static_cast<size_t>(n * inter) * 4), s2 = dev_alloc(be, static_cast<size_t>(n * inter) * 4),
         act = dev_alloc(be, static_cast<size_t>(n * inter) * 4);
  // The residual is renormalized every call and proj stays bounded, so replays stay finite.
  const RmsNormArgs norm{n, h, proj.as<float>(), res.as<float>(), gain.as<float>(), 1e-5f, hidden.as<float>()};
  float* qkv_out[3] = {q.as<float>(), k.as<float>(), v.as<float>()};
  auto call = [&](int i) {
    const Layer& L = ls[static_cast<size_t>(i) % ls.size()];
    const WeightMatrix* qkv[3] = {&L.q, &L.k, &L.v};
    die(be.rms_norm(norm), "norm");
    die(be.matmul_multi(hidden.as<float>(), n, qkv, qkv_out), "qkv");
    die(be.matmul(q.as<float>(), n, L.o, proj.as<float>()), "o_proj");
    die(be.rms_norm(norm), "norm");
    die(be.matmul_gate_up_silu(hidden.as<float>(), n, L.gate, L.up, s1.as<float>(), s2.as<float>(), act.as<float>()),
        "gate_up");
    die(be.matmul(act.as<float>(), n, L.down, proj.as<float>()), "down_proj");
  };
  const double t = time_per_call_graph(be, 10, call);
  const double bytes = static_cast<double>(h * (h + 2 * kvd) + h * h + 3 * h * inter) * (fp8 ? 1 : 2);
  row("layer", label, t * 1e6, bytes / t / 1e9, "GB/s", kCopyGBs);
}

// The ops of a prompt chunk's MLP block at n = 8192 rows, Llama-3-8B shape, on a fresh backend
// (BF16 weights, or FP8 weights, which make the norm quantize its rows): the residual add +
// RMSNorm alone (bytes: residual and x read, residual and out written, and the GEMM-input copy
// it leaves, 2 or 1 bytes per value), then norm + gate/up + SiLU * up + down as the model
// runs them (TFLOP/s of the three GEMMs over the whole sequence, next to the bare GEMM rows).
void bench_prompt_mlp(bool fp8) {
  auto made = make_backend("cuda");
  die(made.status(), "cuda backend");
  Backend& be = **made;
  const int64_t n = 8192, h = 4096, inter = 14336;
  const WeightMatrix gate = upload_weights(be, "gate", inter, h, fp8, 1)[0];
  const WeightMatrix up = upload_weights(be, "up", inter, h, fp8, 1)[0];
  const WeightMatrix down = upload_weights(be, "down", h, inter, fp8, 1)[0];
  Buffer x = dev_random_f32(be, static_cast<size_t>(n * h), 1), res = dev_random_f32(be, static_cast<size_t>(n * h), 2);
  Buffer gain = dev_random_f32(be, static_cast<size_t>(h), 3), out = dev_alloc(be, static_cast<size_t>(n * h) * 4);
  Buffer s1 = dev_alloc(be, static_cast<size_t>(n * inter) * 4), s2 = dev_alloc(be, static_cast<size_t>(n * inter) * 4);
  Buffer act = dev_alloc(be, static_cast<size_t>(n * inter) * 4), y = dev_alloc(be, static_cast<size_t>(n * h) * 4);
  // The residual grows by x each call: a few dozen calls keep it far from overflow.
  const RmsNormArgs norm{n, h, x.as<float>(), res.as<float>(), gain.as<float>(), 1e-5f, out.as<float>()};
  const char* tag = fp8 ? "fp8 " : "";
  const double t_norm = time_per_call(be, 20, [&](int) { die(be.rms_norm(norm), "rms_norm"); });
  row("prompt", std::string(tag) + "rms_norm+residual n=8192 [4096]", t_norm * 1e6,
      n * h * (16.0 + (fp8 ? 1 : 2)) / t_norm / 1e9, "GB/s", kCopyGBs);
  const double t_mlp = time_per_call(be, 10, [&](int) {
    die(be.rms_norm(norm), "rms_norm");
    die(be.matmul_gate_up_silu(out.as<float>(), n, gate, up, s1.as<float>(), s2.as<float>(), act.as<float>()),
        "gate_up_silu");
    die(be.matmul(act.as<float>(), n, down, y.as<float>()), "down");
  });
  row("prompt", std::string(tag) + "norm+gate_up_silu+down n=8192", t_mlp * 1e6, 2.0 * n * 3 * inter * h / t_mlp / 1e12,
      "TFLOP/s", fp8 ? kFp8SpecTFlops : kBf16TFlops);
}

// Random cache values, as a model writes them (normal-like spread, no NaN or inf codes), so
// the softmax sees changing maxima: a 16 MiB random pattern repeated over the buffer.
void fill_cache(Backend& be, Buffer& buf, size_t bytes, DType kv, uint32_t seed) {
  const size_t pattern_bytes = std::min<size_t>(bytes, size_t{16} << 20);
  std::vector<uint8_t> h(pattern_bytes);
  uint32_t st = seed * 2654435761u + 7;
  auto uniform = [&] {
    st = st * 1664525u + 1013904223u;
    return static_cast<float>(st >> 8) * (2.0f / 16777216.0f) - 1.0f;
  };
  if (kv == DType::kBF16) {
    for (size_t i = 0; i + 1 < pattern_bytes; i += 2) {
      const uint16_t v = f32_to_bf16(2.0f * (uniform() + uniform() + uniform()));
      std::memcpy(&h[i], &v, 2);
    }
  } else {
    for (auto& v : h) v = f32_to_fp8e4m3(64.0f * (uniform() + uniform() + uniform()));
  }
  for (size_t off = 0; off < bytes; off += pattern_bytes)
    die(be.copy_to_device(static_cast<uint8_t*>(buf.data()) + off, h.data(), std::min(pattern_bytes, bytes - off)),
        "copy");
}

// One sequence layout in the cache: contiguous block ids per sequence.
// fp8_math: how an FP8 cache is multiplied (kE4m3Query: prompt chunks round Q to E4M3;
// kE4m3x2Query: Q as two E4M3 terms; kE4m3QueryAndP: P too, FP8 P V; kE4m3x2QueryAndP: both).
// splits > 0: the context split into that many ranges (a multiple of 128 keys each) instead
// of the planner's choice, to compare split counts.
void bench_attention(Backend& be, int64_t batch, int64_t ctx, int64_t q_len, DType kv = DType::kBF16,
                     Fp8AttentionMath fp8_math = Fp8AttentionMath::kF16, int64_t splits = 0) {
  const std::string label = "b=" + std::to_string(batch) + " ctx=" + std::to_string(ctx) + " q=" +
                            std::to_string(q_len) + (kv == DType::kBF16 ? "" : std::string(" ") + dtype_name(kv)) +
                            (fp8_math == Fp8AttentionMath::kE4m3Query         ? " e4m3-query"
                             : fp8_math == Fp8AttentionMath::kE4m3x2Query     ? " e4m3x2-query"
                             : fp8_math == Fp8AttentionMath::kE4m3QueryAndP   ? " e4m3-pv"
                             : fp8_math == Fp8AttentionMath::kE4m3x2QueryAndP ? " e4m3x2-pv"
                                                                              : "") +
                            (splits > 0 ? " splits=" + std::to_string(splits) : "");
  if (!picked(label, g_attn_filter)) return;
  be.set_fp8_attention_math(fp8_math);
  const int64_t H = 32, KH = 8, D = 128, bs = 16;
  const int64_t blocks_per_seq = (ctx + bs - 1) / bs, num_blocks = batch * blocks_per_seq;
  const size_t cache_bytes = static_cast<size_t>(num_blocks * bs * KH * D) * dtype_info(kv).block_bytes;
  Buffer kc = dev_alloc(be, cache_bytes), vc = dev_alloc(be, cache_bytes);
  fill_cache(be, kc, cache_bytes, kv, 1);
  fill_cache(be, vc, cache_bytes, kv, 2);
  KvCacheLayer cache{kv, num_blocks, bs, KH, D, kc.data(), vc.data()};
  if (kv == DType::kF8E4M3) cache.k_scale = cache.v_scale = 1.0f / 64.0f;  // fill_cache's codes back to ~[-6, 6]
  std::vector<int32_t> qstart{0}, lens, tables(static_cast<size_t>(batch * blocks_per_seq));
  std::iota(tables.begin(), tables.end(), 0);
  for (int64_t s = 0; s < batch; ++s) {
    qstart.push_back(qstart.back() + static_cast<int32_t>(q_len));
    lens.push_back(static_cast<int32_t>(ctx));
  }
  const int64_t T = batch * q_len;
  Buffer q = dev_alloc(be, static_cast<size_t>(T * H * D) * 4), out = dev_alloc(be, static_cast<size_t>(T * H * D) * 4);
  Buffer dqs = dev_alloc(be, qstart.size() * 4), dl = dev_alloc(be, lens.size() * 4),
         dt = dev_alloc(be, tables.size() * 4);
  die(be.copy_to_device(dqs.data(), qstart.data(), qstart.size() * 4), "copy");
  die(be.copy_to_device(dl.data(), lens.data(), lens.size() * 4), "copy");
  die(be.copy_to_device(dt.data(), tables.data(), tables.size() * 4), "copy");
  PagedAttentionArgs a{T, batch, H, blocks_per_seq, 1.0f / std::sqrt(128.0f), q.as<float>(), dqs.as<int32_t>(),
                       dl.as<int32_t>(), dt.as<int32_t>(), out.as<float>()};
  if (splits > 1) {
    const int64_t len = ((ctx + splits - 1) / splits + 127) / 128 * 128, n = (ctx + len - 1) / len;
    a.plan = AttentionStepPlan{static_cast<int32_t>(n), static_cast<int32_t>(len), static_cast<int32_t>(n)};
  }
  const int reps = q_len == 1 ? 50 : g_prompt_attn_reps;
  const double s = time_per_call(be, reps, [&](int) { die(be.paged_attention(a, cache), "attention"); });
  if (q_len == 1) {
    const double bytes = static_cast<double>(cache_bytes) * 2 * (static_cast<double>(ctx) / (blocks_per_seq * bs));
    row("attn-dec", label, s * 1e6, bytes / s / 1e9, "GB/s", kCopyGBs);
  } else {
    // Causal prefill of the last q_len positions of a ctx-long context.
    const double pairs = static_cast<double>(batch) * q_len * (ctx - q_len + (q_len + 1) / 2.0);
    row("attn-pre", label, s * 1e6, 4.0 * pairs * H * D / s / 1e12, "TFLOP/s", kBf16TFlops);
  }
  be.set_fp8_attention_math(Fp8AttentionMath::kF16);
}

void bench_matmuls(Backend& be) {
  const std::vector<int64_t> all{1, 4, 512, 4096}, decode{1, 4};
  // Llama-3-8B projections: q/o, k/v, gate/up, down, the lm_head, and the fused q+k+v and
  // gate+up matrices of decode (one launch streams both) by their byte counts.
  for (bool fp8 : {false, true}) {
    bench_matmul(be, "q/o_proj", 4096, 4096, fp8, all);
    if (!fp8) bench_matmul(be, "k/v_proj", 1024, 4096, fp8, decode);
    bench_matmul(be, "qkv_proj", 6144, 4096, fp8, all);
    bench_matmul(be, "gate/up_proj", 14336, 4096, fp8, all);
    bench_matmul(be, "gate_up_proj", 28672, 4096, fp8, all);
    bench_matmul(be, "down_proj", 4096, 14336, fp8, all);
    if (!fp8) bench_matmul(be, "lm_head", 128256, 4096, fp8, decode);
  }
  // Llama-3-70B (FP8): fused q+k+v, o, fused gate+up, down.
  bench_matmul(be, "70b qkv_proj", 10240, 8192, true, decode);
  bench_matmul(be, "70b o_proj", 8192, 8192, true, decode);
  bench_matmul(be, "70b gate_up_proj", 57344, 8192, true, decode);
  bench_matmul(be, "70b down_proj", 8192, 28672, true, decode);
}

}  // namespace

// LoRA (lora_apply_multi for q/k/v, lora_apply for o) on the Llama-3-8B shape: `slots`
// adapters of rank R, each with `rows` of the step's tokens; eager and graph-replayed time per
// layer's two calls, and the factor bytes they read (every slot's A and B of the four
// projections) per second.
void bench_lora(Backend& be, int64_t slots, int64_t rows, int64_t R) {
  const int64_t H = 4096, KV = 1024, T = slots * rows;
  struct Mod {
    int64_t in, out;
    LoraModuleWeights w;
  };
  std::vector<Mod> mods = {{H, H, {}}, {H, KV, {}}, {H, KV, {}}, {H, H, {}}};
  double bytes = 0;
  for (Mod& m : mods) {
    auto w = be.alloc_lora_module(slots, R, m.in, m.out);
    die(w.status(), "alloc_lora_module");
    m.w = std::move(*w);
    std::vector<float> a(static_cast<size_t>(R * m.in)), b(static_cast<size_t>(m.out * R));
    for (size_t i = 0; i < a.size(); ++i) a[i] = static_cast<float>((i * 2654435761u) % 1000) * 1e-5f - 0.005f;
    for (size_t i = 0; i < b.size(); ++i) b[i] = static_cast<float>((i * 40503u) % 1000) * 1e-5f - 0.005f;
    for (int64_t s = 0; s < slots; ++s) die(be.set_lora_slot(m.w, s, a.data(), b.data(), R, 2.0f), "set_lora_slot");
    bytes += static_cast<double>(slots * R * (m.in + m.out)) * 2;
  }
  Buffer x = dev_random_f32(be, static_cast<size_t>(T * H), 7), attn = dev_random_f32(be, static_cast<size_t>(T * H), 8);
  Buffer yq = dev_alloc(be, static_cast<size_t>(T * H) * 4), yk = dev_alloc(be, static_cast<size_t>(T * KV) * 4),
         yv = dev_alloc(be, static_cast<size_t>(T * KV) * 4), yo = dev_alloc(be, static_cast<size_t>(T * H) * 4);
  Buffer scratch = dev_alloc(be, static_cast<size_t>(3 * T * R) * 4);
  // Token t in slot t % slots (interleaved, as a batch of requests over several adapters).
  std::vector<int32_t> order, start(static_cast<size_t>(slots + 1), 0);
  for (int64_t s = 0; s < slots; ++s) {
    for (int64_t t = s; t < T; t += slots) order.push_back(static_cast<int32_t>(t));
    start[static_cast<size_t>(s + 1)] = static_cast<int32_t>(order.size());
  }
  Buffer meta = dev_alloc(be, (order.size() + start.size()) * 4);
  die(be.copy_to_device(meta.data(), order.data(), order.size() * 4), "copy rows");
  die(be.copy_to_device(meta.as<int32_t>() + order.size(), start.data(), start.size() * 4), "copy starts");
  const LoraStepRows rs{slots, T, meta.as<int32_t>(), meta.as<int32_t>() + order.size()};
  float* outs[4] = {yq.as<float>(), yk.as<float>(), yv.as<float>(), yo.as<float>()};
  auto layer = [&](int) {
    LoraApplyArgs qkv[3];
    for (int i = 0; i < 3; ++i) {
      qkv[i].x = x.as<float>();
      qkv[i].y = outs[i];
      qkv[i].scratch = scratch.as<float>() + i * T * R;
      qkv[i].num_tokens = T;
      qkv[i].w = &mods[static_cast<size_t>(i)].w;
      qkv[i].rows = rs;
    }
    die(be.lora_apply_multi(qkv), "lora_apply_multi");
    LoraApplyArgs o = qkv[0];
    o.x = attn.as<float>();
    o.y = outs[3];
    o.w = &mods[3].w;
    die(be.lora_apply(o), "lora_apply");
  };
  const std::string name = std::to_string(slots) + " slots x " + std::to_string(rows) + " rows r" + std::to_string(R);
  const double eager = time_per_call(be, 200, layer), graph = time_per_call_graph(be, 20, layer);
  row("lora", name + " eager", eager * 1e6, bytes / eager / 1e9, "GB/s", 4800);
  row("lora", name + " graph", graph * 1e6, bytes / graph / 1e9, "GB/s", 4800);
}

int main(int argc, char** argv) {
  // `bench_ops lora` times the LoRA ops of one layer only;
  // `bench_ops attn [TEXT [REPS]]` runs the attention cases only (those whose label contains
  // TEXT, or ends with it when TEXT ends in '$'; REPS timed calls per prompt case, 3 by default:
  // more show the rate under sustained load),
  // `bench_ops matmul [TEXT]` the linear layers only, `bench_ops prompt` a prompt chunk's MLP block.
  const std::string only = argc > 1 ? argv[1] : "";
  if (only == "matmul" && argc > 2) g_matmul_filter = argv[2];
  if (only == "attn" && argc > 2) g_attn_filter = argv[2];
  if (only == "attn" && argc > 3) g_prompt_attn_reps = std::max(1, std::atoi(argv[3]));
  auto be = make_backend("cuda");
  die(be.status(), "cuda backend");
  std::printf("%-10s %-34s %13s %18s\n", "op", "case", "time", "achieved");
  if (only == "lora") {  // `bench_ops lora`: one layer's q/k/v and o LoRA calls
    for (auto [slots, rows] : {std::pair{8, 8}, std::pair{8, 1}, std::pair{1, 64}, std::pair{4, 16}, std::pair{8, 1024}})
      bench_lora(**be, slots, rows, 64);
    bench_lora(**be, 8, 8, 16);
    return 0;
  }
  if (only.empty() || only == "prompt") {
    bench_prompt_mlp(false);
    bench_prompt_mlp(true);
    if (only == "prompt") return 0;
  }
  if (only != "attn") {
    bench_matmuls(**be);
    for (bool fp8 : {false, true})
      for (int64_t n : {int64_t{1}, int64_t{4}}) bench_decode_layers(fp8, n);
  }
  if (only == "matmul") return 0;
  for (int64_t ctx : {int64_t{1024}, int64_t{8192}, int64_t{32768}, int64_t{131072}}) bench_attention(**be, 1, ctx, 1);
  bench_attention(**be, 1, 131072, 1, DType::kF8E4M3);
  // Batch 1 at 128K under other split counts (8 KV heads: 33 splits are 2 CTAs per
  // multiprocessor of 132, 49 three).
  for (int64_t splits : {24, 33, 40, 49})
    bench_attention(**be, 1, 131072, 1, DType::kBF16, Fp8AttentionMath::kF16, splits);
  for (int64_t splits : {33, 40, 49})
    bench_attention(**be, 1, 131072, 1, DType::kF8E4M3, Fp8AttentionMath::kF16, splits);
  for (int64_t ctx : {int64_t{256}, int64_t{1024}}) bench_attention(**be, 1, ctx, 1, DType::kF8E4M3);
  bench_attention(**be, 64, 1024, 1);
  bench_attention(**be, 256, 2048, 1);
  bench_attention(**be, 256, 2048, 1, DType::kF8E4M3);
  // Prompt attention: a 4K prompt, chunks late in 32K and 128K contexts, a whole 32K prompt in
  // one chunk, and the 32K chunk over an FP8 cache.
  bench_attention(**be, 1, 4096, 4096);
  bench_attention(**be, 1, 4096, 4096, DType::kF8E4M3, Fp8AttentionMath::kE4m3x2Query);
  bench_attention(**be, 1, 32768, 2048);
  bench_attention(**be, 1, 32768, 2048, DType::kF8E4M3);
  bench_attention(**be, 1, 32768, 2048, DType::kF8E4M3, Fp8AttentionMath::kE4m3Query);
  bench_attention(**be, 1, 32768, 2048, DType::kF8E4M3, Fp8AttentionMath::kE4m3x2Query);
  bench_attention(**be, 1, 32768, 2048, DType::kF8E4M3, Fp8AttentionMath::kE4m3QueryAndP);
  bench_attention(**be, 1, 32768, 2048, DType::kF8E4M3, Fp8AttentionMath::kE4m3x2QueryAndP);
  bench_attention(**be, 1, 32768, 32768, DType::kF8E4M3);
  bench_attention(**be, 1, 32768, 32768, DType::kF8E4M3, Fp8AttentionMath::kE4m3Query);
  bench_attention(**be, 1, 32768, 32768, DType::kF8E4M3, Fp8AttentionMath::kE4m3x2Query);
  bench_attention(**be, 1, 32768, 32768, DType::kF8E4M3, Fp8AttentionMath::kE4m3QueryAndP);
  bench_attention(**be, 1, 32768, 32768, DType::kF8E4M3, Fp8AttentionMath::kE4m3x2QueryAndP);
  bench_attention(**be, 1, 131072, 256);
  bench_attention(**be, 1, 32768, 32768);
  // The two chunks of 16,384 tokens a 32K prompt is prefilled in by default.
  for (int64_t ctx : {int64_t{16384}, int64_t{32768}}) {
    bench_attention(**be, 1, ctx, 16384);
    bench_attention(**be, 1, ctx, 16384, DType::kF8E4M3, Fp8AttentionMath::kE4m3x2Query);
    bench_attention(**be, 1, ctx, 16384, DType::kF8E4M3, Fp8AttentionMath::kE4m3x2QueryAndP);
  }
  return 0;
}
