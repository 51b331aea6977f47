// cuBLASLt's FP8 GEMMs alone, outside lancet (not a test): for the Llama-3-8B projection shapes
// at 4096 and 512 rows, every combination of f32 or BF16 output, unit or outer-vector scales and
// fast accumulation, whether the heuristic offers an algorithm and how fast the best of its first
// eight is (constant inputs: an upper bound for random data, which draws more power).
//   g++ -O2 -std=c++17 -I$CUDA/include bench/cuda/cublaslt_fp8_probe.cc -L$CUDA/lib64 -lcublasLt -lcudart
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <cstdio>
#include <vector>
#include <cstdint>
#define CK(x) do { auto e = (x); if (e != 0) { std::printf("  err %d at %s\n", (int)e, #x); return -1.0; } } while (0)
static void* ws; static size_t wsb = 64 << 20;
double run(cublasLtHandle_t lt, int n, int m, int k, cudaDataType_t dt, bool outer, int8_t fast, void* W, void* X, void* Y, float* sa, float* sb, int* nalg) {
  cublasLtMatmulDesc_t op; CK(cublasLtMatmulDescCreate(&op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb));
  cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast));
  if (outer) { int32_t md = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &md, sizeof(md)));
    CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &md, sizeof(md))); }
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &sa, sizeof(sa)));
  CK(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &sb, sizeof(sb)));
  cublasLtMatrixLayout_t a, b, c, d;
  cublasLtMatrixLayoutCreate(&a, CUDA_R_8F_E4M3, k, m, k); cublasLtMatrixLayoutCreate(&b, CUDA_R_8F_E4M3, k, n, k);
  cublasLtMatrixLayoutCreate(&c, dt == CUDA_R_32F ? CUDA_R_32F : CUDA_R_16BF, m, n, m); cublasLtMatrixLayoutCreate(&d, dt, m, n, m);
  cublasLtMatmulPreference_t pref; cublasLtMatmulPreferenceCreate(&pref);
  uint64_t w = wsb; cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &w, sizeof(w));
  cublasLtMatmulHeuristicResult_t res[8]; int found = 0;
  auto st = cublasLtMatmulAlgoGetHeuristic(lt, op, a, b, c, d, pref, 8, res, &found);
  *nalg = found;
  if (st != 0 || found == 0) { std::printf("  heuristic status %d found %d\n", (int)st, found); return -1.0; }
  cudaEvent_t e0, e1; cudaEventCreate(&e0); cudaEventCreate(&e1);
  double best = 1e30; float alpha = 1, beta = 0;
  for (int i = 0; i < found; ++i) {
    for (int r = 0; r < 3; ++r) cublasLtMatmul(lt, op, &alpha, W, a, X, b, &beta, Y, c, Y, d, &res[i].algo, ws, wsb, 0);
    cudaEventRecord(e0);
    for (int r = 0; r < 20; ++r) cublasLtMatmul(lt, op, &alpha, W, a, X, b, &beta, Y, c, Y, d, &res[i].algo, ws, wsb, 0);
    cudaEventRecord(e1); cudaEventSynchronize(e1); float ms; cudaEventElapsedTime(&ms, e0, e1);
    if (cudaGetLastError() != 0) continue;
    double us = ms * 1000 / 20; if (i == 0) std::printf("  algo0 %.1f us", us); if (us < best) best = us;
  }
  std::printf("  best-of-%d %.1f us\n", found, best);
  return best;
}
int main() {
  cublasLtHandle_t lt; cublasLtCreate(&lt); cudaMalloc(&ws, wsb);
  int shapes[][3] = {{4096, 4096, 4096}, {4096, 6144, 4096}, {4096, 28672, 4096}, {4096, 4096, 14336}, {512, 6144, 4096}, {512, 4096, 14336}, {512, 28672, 4096}};
  void *W, *X, *Y; cudaMalloc(&W, 28672ull * 14336); cudaMalloc(&X, 4096ull * 14336); cudaMalloc(&Y, 4096ull * 28672 * 4);
  cudaMemset(W, 0x30, 28672ull * 14336); cudaMemset(X, 0x30, 4096ull * 14336);
  float *sa, *sb; cudaMalloc(&sa, 28672 * 4); cudaMalloc(&sb, 4096 * 4);
  std::vector<float> ones(28672, 0.01f); cudaMemcpy(sa, ones.data(), 28672 * 4, cudaMemcpyHostToDevice); cudaMemcpy(sb, ones.data(), 4096 * 4, cudaMemcpyHostToDevice);
  for (auto& s : shapes) {
    int n = s[0], m = s[1], k = s[2]; double fl = 2.0 * n * m * k;
    for (cudaDataType_t dt : {CUDA_R_32F, CUDA_R_16BF}) for (bool outer : {false, true}) for (int8_t fast : {0, 1}) {
      std::printf("n=%d m=%d k=%d D=%s outer=%d fast=%d\n", n, m, k, dt == CUDA_R_32F ? "f32" : "bf16", outer, fast);
      int na = 0; double us = run(lt, n, m, k, dt, outer, fast, W, X, Y, outer ? sa : sa, outer ? sb : sb, &na);
      if (us > 0) std::printf("RESULT n=%d m=%d k=%d D=%s outer=%d fast=%d %.1f us %.0f TFLOP/s\n", n, m, k, dt == CUDA_R_32F ? "f32" : "bf16", outer, fast, us, fl / us / 1e6);
    }
  }
  return 0;
}
