// cuBLASLt's FP8 GEMMs alone, outside lancet (not a test): for the Llama-3-8B (and 70B)
// projection shapes at 512 and 4096 rows, as the CUDA backend calls them (W [m, k] and x [n, k]
// E4M3, outer-vector scales, fast accumulation, f32 or BF16 output, 256-byte operand
// alignment), every algorithm the heuristic offers (up to MAX_ALGOS) timed on the same
// operands: the heuristic's first pick (what the backend runs), the fastest, and the fastest
// one's configuration (algorithm id, tile, stages, split-K, reduction, swizzle, cluster), so a
// faster choice can be pinned.
// Operands are random E4M3 codes by default (a GEMM on random data draws more power, and so
// runs at lower clocks, than on constant data); `constant` fills them with one code. With
// `enumerate`, the candidates are not the heuristic's but every configuration cuBLASLt accepts
// for the call (each algorithm id's tiles and stage counts, cluster shapes auto / 1x1 / 2x1 /
// 1x2, split-K 1 / 2 / 4 where supported; up to MAX_ALGOS of them) after the heuristic's pick,
// to find what the heuristic does not offer; the three fastest are printed. SHAPE_FILTER is a
// substring of the case's label ("q/o n=512").
//   g++ -O2 -std=c++17 -I$CUDA/include bench/cuda/cublaslt_fp8_probe.cc -L$CUDA/lib64 -lcublasLt -lcudart
//   ./a.out [random|constant] [MAX_ALGOS=32] [SHAPE_FILTER] [heuristic|enumerate]
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr size_t kWorkspace = size_t{64} << 20;

struct Shape {
  const char* name;
  int n, m, k;  // tokens, output channels, input channels
};

struct Operands {
  void *w = nullptr, *x = nullptr, *y = nullptr, *ws = nullptr;
  float *w_scale = nullptr, *x_scale = nullptr;
};

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::printf("  %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

bool ok(cublasStatus_t s, const char* what) {
  if (s == CUBLAS_STATUS_SUCCESS) return true;
  std::printf("  %s: cublas status %d\n", what, static_cast<int>(s));
  return false;
}

// E4M3 codes with magnitudes below 2^8 (exponent field < 15: never NaN), random signs.
void fill_codes(void* dev, size_t bytes, bool random, uint32_t seed) {
  std::vector<uint8_t> h(std::min<size_t>(bytes, size_t{64} << 20));
  uint32_t st = seed * 2654435761u + 1;
  for (auto& b : h) {
    st = st * 1664525u + 1013904223u;
    const uint8_t r = static_cast<uint8_t>(st >> 24);
    b = random ? static_cast<uint8_t>((r & 0x80) | ((r & 0x7f) % 0x78)) : uint8_t{0x30};
  }
  for (size_t off = 0; off < bytes; off += h.size())
    cudaMemcpy(static_cast<uint8_t*>(dev) + off, h.data(), std::min(h.size(), bytes - off), cudaMemcpyHostToDevice);
}

// A configuration attribute of its own width (the cluster shape is 16 bits, the others 32).
template <typename T = uint32_t>
int config(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoConfigAttributes_t attr) {
  T v = 0;
  size_t written = 0;
  if (cublasLtMatmulAlgoConfigGetAttribute(&algo, attr, &v, sizeof(v), &written) != CUBLAS_STATUS_SUCCESS) return -1;
  return static_cast<int>(v);
}

// A capability that is an array of uint32_t (tile or stage ids).
std::vector<uint32_t> cap_ids(const cublasLtMatmulAlgo_t& algo, cublasLtMatmulAlgoCapAttributes_t attr) {
  size_t bytes = 0;
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, nullptr, 0, &bytes) != CUBLAS_STATUS_SUCCESS || bytes == 0)
    return {};
  std::vector<uint32_t> ids(bytes / sizeof(uint32_t));
  if (cublasLtMatmulAlgoCapGetAttribute(&algo, attr, ids.data(), bytes, &bytes) != CUBLAS_STATUS_SUCCESS) return {};
  return ids;
}

// Every configuration cuBLASLt accepts for the call (cublasLtMatmulAlgoCheck), up to `limit`.
std::vector<cublasLtMatmulAlgo_t> enumerate_algos(cublasLtHandle_t lt, cublasLtMatmulDesc_t op,
                                                  cublasLtMatrixLayout_t a, cublasLtMatrixLayout_t b,
                                                  cublasLtMatrixLayout_t c, cudaDataType_t out, int limit) {
  std::vector<cublasLtMatmulAlgo_t> algos;
  int ids[128], n_ids = 0;
  if (cublasLtMatmulAlgoGetIds(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, out, out, 128, ids,
                               &n_ids) != CUBLAS_STATUS_SUCCESS)
    return algos;
  for (int i = 0; i < n_ids && static_cast<int>(algos.size()) < limit; ++i) {
    cublasLtMatmulAlgo_t base;
    if (cublasLtMatmulAlgoInit(lt, CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_8F_E4M3, CUDA_R_8F_E4M3, out, out, ids[i],
                               &base) != CUBLAS_STATUS_SUCCESS)
      continue;
    std::vector<uint32_t> tiles = cap_ids(base, CUBLASLT_ALGO_CAP_TILE_IDS),
                          stages = cap_ids(base, CUBLASLT_ALGO_CAP_STAGES_IDS);
    if (tiles.empty()) tiles.push_back(CUBLASLT_MATMUL_TILE_UNDEFINED);
    if (stages.empty()) stages.push_back(CUBLASLT_MATMUL_STAGES_UNDEFINED);
    int32_t splitk_ok = 0;
    size_t w = 0;
    cublasLtMatmulAlgoCapGetAttribute(&base, CUBLASLT_ALGO_CAP_SPLITK_SUPPORT, &splitk_ok, sizeof(splitk_ok), &w);
    for (uint32_t tile : tiles)
      for (uint32_t stage : stages)
        for (uint16_t cluster : {uint16_t{CUBLASLT_CLUSTER_SHAPE_AUTO}, uint16_t{CUBLASLT_CLUSTER_SHAPE_1x1x1},
                                 uint16_t{CUBLASLT_CLUSTER_SHAPE_2x1x1}, uint16_t{CUBLASLT_CLUSTER_SHAPE_1x2x1}})
          for (int32_t splitk : {1, 2, 4}) {
            if (splitk > 1 && !splitk_ok) continue;
            if (static_cast<int>(algos.size()) >= limit) return algos;
            cublasLtMatmulAlgo_t al = base;
            cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof(tile));
            cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stage, sizeof(stage));
            cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof(cluster));
            cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &splitk, sizeof(splitk));
            if (splitk > 1) {
              const uint32_t red = CUBLASLT_REDUCTION_SCHEME_OUTPUT_TYPE;
              cublasLtMatmulAlgoConfigSetAttribute(&al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof(red));
            }
            cublasLtMatmulHeuristicResult_t r{};
            if (cublasLtMatmulAlgoCheck(lt, op, a, b, c, c, &al, &r) != CUBLAS_STATUS_SUCCESS) continue;
            if (r.workspaceSize > kWorkspace) continue;
            algos.push_back(al);
          }
  }
  return algos;
}

// One shape and output type: every offered algorithm timed; prints one RESULT line.
void probe(cublasLtHandle_t lt, const Shape& s, cudaDataType_t out, int max_algos, bool enumerate, const Operands& o) {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t pref = nullptr;
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  const int8_t fast = 1;
  const int32_t outer = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
  const uint64_t wsb = kWorkspace;
  bool good =
      ok(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "desc") &&
      ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)), "transa") &&
      ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)), "transb") &&
      ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)), "fast") &&
      ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &outer, sizeof(outer)), "a mode") &&
      ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &outer, sizeof(outer)), "b mode") &&
      ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &o.w_scale, sizeof(o.w_scale)),
         "a scale") &&
      ok(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &o.x_scale, sizeof(o.x_scale)),
         "b scale") &&
      ok(cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, s.k, s.m, s.k), "layout W") &&
      ok(cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, s.k, s.n, s.k), "layout x") &&
      ok(cublasLtMatrixLayoutCreate(&c, out, s.m, s.n, s.m), "layout y") &&
      ok(cublasLtMatmulPreferenceCreate(&pref), "preference") &&
      ok(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &wsb, sizeof(wsb)),
         "workspace");
  // The operands' alignment, as the backend declares it (cudaMalloc'd buffers: 256 bytes).
  const uint32_t align = 256;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    good = good && ok(cublasLtMatmulPreferenceSetAttribute(pref, attr, &align, sizeof(align)), "alignment");
  // Candidate 0 is always the heuristic's first pick (what the backend runs).
  std::vector<cublasLtMatmulAlgo_t> algos;
  if (good) {
    std::vector<cublasLtMatmulHeuristicResult_t> res(static_cast<size_t>(max_algos));
    int n = 0;
    good = ok(cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, c, pref, enumerate ? 1 : max_algos, res.data(), &n),
              "heuristic");
    for (int i = 0; good && i < n; ++i) algos.push_back(res[static_cast<size_t>(i)].algo);
  }
  if (good && enumerate) {
    const std::vector<cublasLtMatmulAlgo_t> more = enumerate_algos(lt, op, a, b, c, out, max_algos);
    algos.insert(algos.end(), more.begin(), more.end());
  }
  const int found = static_cast<int>(algos.size());
  const char* dt = out == CUDA_R_32F ? "f32" : "bf16";
  if (good && found > 0) {
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    const float alpha = 1, beta = 0;
    double first = -1;
    std::vector<std::pair<double, int>> timed;  // (us, candidate)
    const int reps = s.n * static_cast<double>(s.m) * s.k > 1e11 ? 20 : enumerate ? 30 : 100;
    for (int i = 0; i < found; ++i) {
      auto call = [&] {
        return cublasLtMatmul(lt, op, &alpha, o.w, a, o.x, b, &beta, o.y, c, o.y, c, &algos[static_cast<size_t>(i)],
                              o.ws, kWorkspace, 0);
      };
      bool ran = call() == CUBLAS_STATUS_SUCCESS;
      for (int r = 0; ran && r < 4; ++r) ran = call() == CUBLAS_STATUS_SUCCESS;
      cudaEventRecord(e0);
      for (int r = 0; ran && r < reps; ++r) ran = call() == CUBLAS_STATUS_SUCCESS;
      cudaEventRecord(e1);
      cudaEventSynchronize(e1);
      float ms = 0;
      cudaEventElapsedTime(&ms, e0, e1);
      if (!ran || cudaGetLastError() != cudaSuccess) continue;
      const double us = 1000.0 * ms / reps;
      if (i == 0) first = us;
      timed.emplace_back(us, i);
    }
    std::sort(timed.begin(), timed.end());
    const double flop = 2.0 * s.n * static_cast<double>(s.m) * s.k;
    // The fastest candidate on the RESULT line; with `enumerate`, the next two on NEXT lines.
    for (size_t rank = 0; rank < std::min<size_t>(timed.size(), enumerate ? 3 : 1); ++rank) {
      const auto [us, i] = timed[rank];
      const cublasLtMatmulAlgo_t& al = algos[static_cast<size_t>(i)];
      if (rank == 0)
        std::printf("RESULT %-14s n=%-5d m=%-6d k=%-6d D=%-4s algos=%-3d first %8.1f us %6.0f TFLOP/s  best", s.name,
                    s.n, s.m, s.k, dt, found, first, first > 0 ? flop / first / 1e6 : 0.0);
      else
        std::printf("NEXT   %-14s n=%-5d m=%-6d k=%-6d D=%-4s %46s", s.name, s.n, s.m, s.k, dt, "");
      std::printf(
          " #%-3d %8.1f us %6.0f TFLOP/s  id=%d tile=%d stages=%d splitk=%d reduction=%d swizzle=%d cluster=%d\n", i,
          us, flop / us / 1e6, config(al, CUBLASLT_ALGO_CONFIG_ID), config(al, CUBLASLT_ALGO_CONFIG_TILE_ID),
          config(al, CUBLASLT_ALGO_CONFIG_STAGES_ID), config(al, CUBLASLT_ALGO_CONFIG_SPLITK_NUM),
          config(al, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME), config(al, CUBLASLT_ALGO_CONFIG_CTA_SWIZZLING),
          config<uint16_t>(al, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID));
    }
    if (timed.empty()) {
      std::printf("RESULT %-14s n=%-5d m=%-6d k=%-6d D=%-4s no algorithm ran\n", s.name, s.n, s.m, s.k, dt);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
  } else {
    std::printf("RESULT %-14s n=%-5d m=%-6d k=%-6d D=%-4s no algorithm offered\n", s.name, s.n, s.m, s.k, dt);
  }
  if (pref) cublasLtMatmulPreferenceDestroy(pref);
  for (auto l : {a, b, c})
    if (l) cublasLtMatrixLayoutDestroy(l);
  if (op) cublasLtMatmulDescDestroy(op);
}

}  // namespace

int main(int argc, char** argv) {
  const bool random = argc < 2 || std::strcmp(argv[1], "constant") != 0;
  const int max_algos = argc > 2 ? std::max(1, std::atoi(argv[2])) : 32;
  const std::string filter = argc > 3 ? argv[3] : "";
  const bool enumerate = argc > 4 && std::strcmp(argv[4], "enumerate") == 0;
  const std::vector<Shape> shapes = {
      {"q/o", 4096, 4096, 4096},          {"qkv", 4096, 6144, 4096},       {"gate/up", 4096, 14336, 4096},
      {"gate_up", 4096, 28672, 4096},     {"down", 4096, 4096, 14336},     {"q/o", 512, 4096, 4096},
      {"qkv", 512, 6144, 4096},           {"gate/up", 512, 14336, 4096},   {"gate_up", 512, 28672, 4096},
      {"down", 512, 4096, 14336},         {"70b qkv", 4096, 10240, 8192},  {"70b o", 4096, 8192, 8192},
      {"70b gate_up", 4096, 57344, 8192}, {"70b down", 4096, 8192, 28672},
  };
  cublasLtHandle_t lt = nullptr;
  if (!ok(cublasLtCreate(&lt), "cublasLt")) return 1;
  Operands o;
  const size_t w_bytes = size_t{57344} * 8192, x_bytes = size_t{4096} * 28672, y_bytes = size_t{4096} * 57344 * 4;
  if (!ok(cudaMalloc(&o.w, w_bytes), "W") || !ok(cudaMalloc(&o.x, x_bytes), "x") ||
      !ok(cudaMalloc(&o.y, y_bytes), "y") || !ok(cudaMalloc(&o.ws, kWorkspace), "workspace") ||
      !ok(cudaMalloc(&o.w_scale, 57344 * 4), "W scale") || !ok(cudaMalloc(&o.x_scale, 4096 * 4), "x scale"))
    return 1;
  fill_codes(o.w, w_bytes, random, 1);
  fill_codes(o.x, x_bytes, random, 2);
  const std::vector<float> scales(57344, 0.01f);
  cudaMemcpy(o.w_scale, scales.data(), 57344 * 4, cudaMemcpyHostToDevice);
  cudaMemcpy(o.x_scale, scales.data(), 4096 * 4, cudaMemcpyHostToDevice);
  std::printf("operands: %s codes; up to %d %s per case\n", random ? "random" : "constant", max_algos,
              enumerate ? "enumerated configurations" : "heuristic algorithms");
  for (const Shape& s : shapes) {
    const std::string label = std::string(s.name) + " n=" + std::to_string(s.n);
    if (!filter.empty() && label.find(filter) == std::string::npos) continue;
    for (cudaDataType_t out : {CUDA_R_32F, CUDA_R_16BF}) probe(lt, s, out, max_algos, enumerate, o);
  }
  cublasLtDestroy(lt);
  return 0;
}
