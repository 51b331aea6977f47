// Matmul y[n, m] = x[n, k] . W[m, k]^T through cuBLASLt: x is converted to BF16 on the device,
// W is BF16 (every weight is uploaded as BF16), accumulation and output are FP32.
// In cuBLASLt's column-major terms: y^T [m, n] = op_T(W stored [k, m]) . x^T stored [k, n]
// ("TN", the layout its BF16 kernels prefer). Descriptors and the heuristic's first algorithm
// are cached per (n, m, k, pointer alignment).
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

void destroy_plan(GemmPlan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  p = GemmPlan{};
}

// Largest power of two (<= 256) dividing every address.
unsigned common_alignment(const void* a, const void* b, const void* c) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                         reinterpret_cast<uintptr_t>(c) | uintptr_t{256};
  return static_cast<unsigned>(bits & (~bits + 1));
}

Status build_plan(cublasLtHandle_t lt, int64_t n, int64_t m, int64_t k, unsigned align, size_t workspace,
                  GemmPlan* p) {
  LANCET_CUBLAS_RETURN(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LANCET_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
                       "transa");
  LANCET_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
                       "transb");
  LANCET_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&p->a, CUDA_R_16BF, k, m, k), "layout W");
  LANCET_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&p->b, CUDA_R_16BF, k, n, k), "layout x");
  LANCET_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&p->c, CUDA_R_32F, m, n, m), "layout y");
  cublasLtMatmulPreference_t pref = nullptr;
  LANCET_CUBLAS_RETURN(cublasLtMatmulPreferenceCreate(&pref), "preference");
  const uint64_t ws = workspace;
  cublasStatus_t st = cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws,
                                                           sizeof(ws));
  const uint32_t al = align;
  for (auto attr : {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES,
                    CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES})
    if (st == CUBLAS_STATUS_SUCCESS) st = cublasLtMatmulPreferenceSetAttribute(pref, attr, &al, sizeof(al));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (st == CUBLAS_STATUS_SUCCESS)
    st = cublasLtMatmulAlgoGetHeuristic(lt, p->op, p->a, p->b, p->c, p->c, pref, 1, &result, &found);
  cublasLtMatmulPreferenceDestroy(pref);
  LANCET_CUBLAS_RETURN(st, "algorithm heuristic");
  if (found < 1)
    return Unimplemented("cublasLt has no BF16 algorithm for n=" + std::to_string(n) + " m=" + std::to_string(m) +
                         " k=" + std::to_string(k));
  p->algo = result.algo;
  return OkStatus();
}

}  // namespace

StatusOr<const GemmPlan*> CudaBackend::gemm_plan(int64_t n, int64_t m, int64_t k, unsigned align) {
  const auto key = std::make_tuple(n, m, k, align);
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  GemmPlan p;
  Status st = build_plan(lt_, n, m, k, align, workspace_bytes_, &p);
  if (!st.ok()) {
    destroy_plan(p);
    return st;
  }
  return &plans_.emplace(key, p).first->second;
}

Status CudaBackend::matmul(const float* x, int64_t n, const WeightMatrix& w, float* y) {
  if (!w.data || w.rows <= 0 || w.cols <= 0) return InvalidArgument("matmul: empty weight " + w.name);
  if (w.dtype != DType::kBF16)
    return Unimplemented("matmul: weight " + w.name + " is " + dtype_name(w.dtype) +
                         "; upload it through the cuda backend (bf16)");
  if (n < 0) return InvalidArgument("matmul: negative row count for " + w.name);
  if (n == 0) return OkStatus();
  const int64_t m = w.rows, k = w.cols;
  RETURN_IF_ERROR(ensure_scratch(&x_bf16_, static_cast<size_t>(n * k) * 2));
  RETURN_IF_ERROR(launch_status(launch_f32_to_bf16(x, x_bf16_.data(), n * k, ctx_->stream), "matmul: convert x"));
  const unsigned align = common_alignment(w.data, x_bf16_.data(), y);
  ASSIGN_OR_RETURN(const GemmPlan* plan, gemm_plan(n, m, k, align));
  const float alpha = 1.0f, beta = 0.0f;
  const cublasStatus_t st = cublasLtMatmul(lt_, plan->op, &alpha, w.data, plan->a, x_bf16_.data(), plan->b, &beta, y,
                                           plan->c, y, plan->c, &plan->algo, workspace_.data(), workspace_bytes_,
                                           ctx_->stream);
  if (st != CUBLAS_STATUS_SUCCESS) return cublas_status(st, ("matmul " + w.name).c_str());
  return OkStatus();
}

}  // namespace lancet::cuda
