// Linear layers y[n, m] = x[n, k] . W[m, k]^T on the CUDA backend, for BF16 and FP8 E4M3 weights:
//  - n <= kGemvMaxRows (decode): our bandwidth-bound gemv kernel reads W once, straight from
//    f32 x (FP8 weights: from x's FP8 codes when rms_norm wrote them, prepared_ below); q/k/v
//    share one launch and gate/up/SiLU*mul another.
//  - BF16, larger n: cuBLASLt with x converted to BF16 on the device, FP32 accumulation and output
//    (ActivationPrecision::kExact: x split into bf16 hi + lo and both multiplied, accumulating).
//    In fast precision the conversion is skipped when the op that produced x wrote its BF16 copy
//    (rms_norm; the gate/up SiLU * up kernel), and gate/up write BF16 outputs for that kernel.
//  - FP8, larger n: x quantized per row to E4M3 (dynamic per-token scales), then one cuBLASLt
//    FP8 GEMM that applies the per-row activation and per-channel weight scales itself
//    (outer-vector scaling, cuBLASLt 12.9+; with older libraries a unit-scale GEMM and a rescale
//    pass over the f32 result). The quantization is skipped when the op that produced x already
//    did it (rms_norm; the gate/up epilogue for the down projection: prepared_ in
//    cuda_backend.h); gate/up run unit-scale GEMMs and apply their scales, SiLU * up and act's
//    quantization in one epilogue pass.
// In cuBLASLt's column-major terms: y^T [m, n] = op_T(W stored [k, m]) . x^T stored [k, n] ("TN",
// the layout its BF16 kernels prefer and its FP8 kernels require). Descriptors and the
// heuristic's first algorithm are cached per (n, m, k, pointer alignment, input type).
#include <cstdint>
#include <string>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/logging.h"

namespace lancet::cuda {
namespace {

void destroy_plan(GemmPlan& p) {
  if (p.a) cublasLtMatrixLayoutDestroy(p.a);
  if (p.b) cublasLtMatrixLayoutDestroy(p.b);
  if (p.c) cublasLtMatrixLayoutDestroy(p.c);
  if (p.op) cublasLtMatmulDescDestroy(p.op);
  p = GemmPlan{};
}

Status set_scale_pointers(cublasLtMatmulDesc_t op, const float* a_scale, const float* b_scale) {
  LANCET_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_A_SCALE_POINTER, &a_scale,
                                                      sizeof(a_scale)),
                       "weight scales");
  LANCET_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(op, CUBLASLT_MATMUL_DESC_B_SCALE_POINTER, &b_scale,
                                                      sizeof(b_scale)),
                       "activation scales");
  return OkStatus();
}

// Largest power of two (<= 256) dividing every address.
unsigned common_alignment(const void* a, const void* b, const void* c) {
  const uintptr_t bits = reinterpret_cast<uintptr_t>(a) | reinterpret_cast<uintptr_t>(b) |
                         reinterpret_cast<uintptr_t>(c) | uintptr_t{256};
  return static_cast<unsigned>(bits & (~bits + 1));
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// kFp8Scaled: a_scale [m] and b_scale [n] are the first call's scale vectors (cuBLASLt checks
// the scale pointers when it picks the algorithm; each call sets its own).
Status build_plan(cublasLtHandle_t lt, int64_t n, int64_t m, int64_t k, unsigned align, GemmKind kind, GemmOut out,
                  const float* a_scale, const float* b_scale, size_t workspace, GemmPlan* p) {
  const bool fp8 = kind != GemmKind::kBf16;
  LANCET_CUBLAS_RETURN(cublasLtMatmulDescCreate(&p->op, CUBLAS_COMPUTE_32F, CUDA_R_32F), "matmul desc");
  const cublasOperation_t ta = CUBLAS_OP_T, tb = CUBLAS_OP_N;
  LANCET_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSA, &ta, sizeof(ta)),
                       "transa");
  LANCET_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_TRANSB, &tb, sizeof(tb)),
                       "transb");
  if (fp8) {
    // Inference-style accumulation (what FP8 serving engines use): the tensor cores' own
    // accumulator without periodic promotion; accuracy is checked by the op tests.
    const int8_t fast = 1;
    LANCET_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_FAST_ACCUM, &fast, sizeof(fast)),
                         "fast accumulation");
  }
  if (kind == GemmKind::kFp8Scaled) {
    // cuBLASLt's A is W (M = m output channels), its B is x (N = n tokens).
    const int32_t mode = CUBLASLT_MATMUL_MATRIX_SCALE_OUTER_VEC_32F;
    LANCET_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_A_SCALE_MODE, &mode, sizeof(mode)),
                         "weight scale mode");
    LANCET_CUBLAS_RETURN(cublasLtMatmulDescSetAttribute(p->op, CUBLASLT_MATMUL_DESC_B_SCALE_MODE, &mode, sizeof(mode)),
                         "activation scale mode");
    RETURN_IF_ERROR(set_scale_pointers(p->op, a_scale, b_scale));
  }
  const cudaDataType_t in = fp8 ? CUDA_R_8F_E4M3 : CUDA_R_16BF;
  LANCET_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&p->a, in, k, m, k), "layout W");
  LANCET_CUBLAS_RETURN(cublasLtMatrixLayoutCreate(&p->b, in, k, n, k), "layout x");
  LANCET_CUBLAS_RETURN(
      cublasLtMatrixLayoutCreate(&p->c, out == GemmOut::kBf16 ? CUDA_R_16BF : CUDA_R_32F, m, n, m), "layout y");
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
    return Unimplemented(std::string("cublasLt has no ") + (fp8 ? "FP8" : "BF16") + " algorithm for n=" +
                         std::to_string(n) + " m=" + std::to_string(m) + " k=" + std::to_string(k));
  p->algo = result.algo;
  return OkStatus();
}

Status check_weight(const WeightMatrix& w) {
  if (!w.data || w.rows <= 0 || w.cols <= 0) return InvalidArgument("matmul: empty weight " + w.name);
  if (w.dtype != DType::kBF16 && w.dtype != DType::kF8E4M3)
    return Unimplemented("matmul: weight " + w.name + " is " + dtype_name(w.dtype) +
                         "; upload it through the cuda backend (bf16 or fp8)");
  if (w.dtype == DType::kF8E4M3 && !w.scales) return InvalidArgument("matmul: fp8 weight " + w.name + " has no scales");
  return OkStatus();
}

GemvSegment segment(const WeightMatrix& w, float* y) {
  GemvSegment s;
  s.w = w.data;
  s.rows = w.rows;
  s.y = y;
  if (w.dtype == DType::kF8E4M3) {
    s.scale = w.scales;
    s.per_row_scale = w.scale_kind == WeightScale::kPerRow;
  }
  return s;
}

}  // namespace

StatusOr<GemmPlan*> CudaBackend::gemm_plan(int64_t n, int64_t m, int64_t k, unsigned align, GemmKind kind,
                                           GemmOut out, const float* a_scale, const float* b_scale) {
  const auto key = std::make_tuple(n, m, k, align, kind, out);
  auto it = plans_.find(key);
  if (it != plans_.end()) return &it->second;
  GemmPlan p;
  Status st = build_plan(lt_, n, m, k, align, kind, out, a_scale, b_scale, workspace_bytes_, &p);
  if (!st.ok()) {
    destroy_plan(p);
    // A library without outer-vector scaling rejects the scale modes or finds no algorithm.
    if (kind == GemmKind::kFp8Scaled) return Unimplemented("cublasLt outer-vector FP8 scaling: " + st.message());
    return st;
  }
  return &plans_.emplace(key, p).first->second;
}

bool CudaBackend::gemv_fits(const float* x, int64_t n, const WeightMatrix& w) const {
  return n >= 1 && n <= kGemvMaxRows && w.cols % gemv_k_multiple(w.dtype == DType::kF8E4M3) == 0 && aligned16(x) &&
         aligned16(w.data);
}

Status CudaBackend::gemm_cublas(const void* xin, int64_t n, const WeightMatrix& w, void* y, GemmKind kind,
                                const float* x_scale, float beta, GemmOut out) {
  const unsigned align = common_alignment(w.data, xin, y);
  ASSIGN_OR_RETURN(GemmPlan* plan, gemm_plan(n, w.rows, w.cols, align, kind, out, w.scales, x_scale));
  // The scale vectors are per call (the plan is shared by every weight of this shape).
  if (kind == GemmKind::kFp8Scaled) RETURN_IF_ERROR(set_scale_pointers(plan->op, w.scales, x_scale));
  const float alpha = 1.0f;
  const cublasStatus_t st = cublasLtMatmul(lt_, plan->op, &alpha, w.data, plan->a, xin, plan->b, &beta, y, plan->c, y,
                                           plan->c, &plan->algo, workspace_.data(), workspace_bytes_, ctx_->stream);
  if (st != CUBLAS_STATUS_SUCCESS) return cublas_status(st, ("matmul " + w.name).c_str());
  return OkStatus();
}

// x converted (bf16) or quantized (fp8, with per-row scales) into scratch, once for every
// weight of that input type. Nothing to do when the op that wrote x left it in that type (the
// record is consumed either way: the caller's kernels follow).
Status CudaBackend::prepare_gemm_input(const float* x, int64_t n, int64_t k, bool fp8) {
  const PreparedInput rec = prepared_;
  clear_prepared_input();
  if (rec.x == x && rec.n == n && rec.k == k && rec.fp8 == fp8 && rec.capturing == capturing_ &&
      rec.absmax_partials == 0 && (fp8 || precision_ == ActivationPrecision::kFast))
    return OkStatus();
  if (fp8) {
    RETURN_IF_ERROR(ensure_scratch(&x_fp8_, static_cast<size_t>(n * k)));
    RETURN_IF_ERROR(ensure_scratch(&x_scale_, static_cast<size_t>(n) * sizeof(float)));
    return launch_status(launch_quantize_rows_fp8(x, n, k, x_fp8_.data(), x_scale_.as<float>(), ctx_->stream),
                         "matmul: quantize x");
  }
  RETURN_IF_ERROR(ensure_scratch(&x_bf16_, static_cast<size_t>(n * k) * 2));
  if (precision_ == ActivationPrecision::kExact) {
    RETURN_IF_ERROR(ensure_scratch(&x_lo_, static_cast<size_t>(n * k) * 2));
    return launch_status(launch_split_bf16(x, x_bf16_.data(), x_lo_.data(), n * k, ctx_->stream), "matmul: split x");
  }
  return launch_status(launch_f32_to_bf16(x, x_bf16_.data(), n * k, ctx_->stream), "matmul: convert x");
}

void CudaBackend::take_prepared_gemv_input(GemvParams* p, DType weights) {
  const PreparedInput rec = prepared_;
  clear_prepared_input();
  if (weights != DType::kF8E4M3 || !gemv_fp8_mma_supported()) return;
  if (rec.x != p->x || rec.n != p->n || rec.k != p->k || !rec.fp8 || rec.capturing != capturing_) return;
  if (rec.absmax_partials > 0) {
    p->x_absmax = x_absmax_.as<float>();
    p->x_partials = rec.absmax_partials;
    return;
  }
  p->xq = x_fp8_.data();
  p->xq_scale = x_scale_.as<float>();
}

Status CudaBackend::gemm_prepared(int64_t n, const WeightMatrix& w, float* y, bool rescale) {
  if (w.dtype != DType::kF8E4M3) {
    RETURN_IF_ERROR(gemm_cublas(x_bf16_.data(), n, w, y, GemmKind::kBf16));
    // Exact precision: y += W . lo (the part of x that bf16 rounded away).
    if (precision_ == ActivationPrecision::kExact)
      RETURN_IF_ERROR(gemm_cublas(x_lo_.data(), n, w, y, GemmKind::kBf16, nullptr, 1.0f));
    return OkStatus();
  }
  if (fp8_outer_scaling_ && w.scale_kind == WeightScale::kPerRow) {
    // w.scales holds one scale per row (upload_weight widens a per-tensor scale).
    Status st = gemm_cublas(x_fp8_.data(), n, w, y, GemmKind::kFp8Scaled, x_scale_.as<float>());
    if (st.ok() || st.code() != StatusCode::kUnimplemented) return st;
    // No such algorithm in this cuBLASLt: unit scales and a rescale pass from now on.
    LOG_WARN("FP8 GEMMs fall back to unit scales and a rescale pass (" << st.message() << ")");
    fp8_outer_scaling_ = false;
  }
  RETURN_IF_ERROR(gemm_cublas(x_fp8_.data(), n, w, y, GemmKind::kFp8Unit));
  if (!rescale) return OkStatus();
  return launch_status(launch_rescale_fp8_output(y, n, w.rows, x_scale_.as<float>(), w.scales,
                                                 w.scale_kind == WeightScale::kPerRow, ctx_->stream),
                       "matmul: fp8 scales");
}

Status CudaBackend::matmul(const float* x, int64_t n, const WeightMatrix& w, float* y) {
  const OpScope timed(op_timer(), OpKind::kGemm);

  RETURN_IF_ERROR(check_weight(w));
  if (n < 0) return InvalidArgument("matmul: negative row count for " + w.name);
  if (n == 0) return OkStatus();
  if (gemv_fits(x, n, w)) {
    GemvParams p;
    p.x = x;
    p.n = n;
    p.k = w.cols;
    p.seg[0] = segment(w, y);
    p.num_segments = 1;
    p.total_rows = w.rows;
    take_prepared_gemv_input(&p, w.dtype);
    return launch_status(launch_gemv(p, w.dtype == DType::kF8E4M3, ctx_->stream), ("matmul " + w.name).c_str());
  }
  RETURN_IF_ERROR(prepare_gemm_input(x, n, w.cols, w.dtype == DType::kF8E4M3));
  return gemm_prepared(n, w, y);
}

Status CudaBackend::matmul_multi(const float* x, int64_t n, std::span<const WeightMatrix* const> ws,
                                 std::span<float* const> ys) {
  const OpScope timed(op_timer(), OpKind::kGemm);

  if (ws.empty() || ws.size() != ys.size()) return InvalidArgument("matmul_multi: weight and output counts differ");
  for (const WeightMatrix* w : ws) {
    RETURN_IF_ERROR(check_weight(*w));
    if (w->cols != ws[0]->cols || w->dtype != ws[0]->dtype)
      return InvalidArgument("matmul_multi: " + w->name + " differs from " + ws[0]->name + " in columns or dtype");
  }
  if (n < 0) return InvalidArgument("matmul_multi: negative row count");
  if (n == 0) return OkStatus();
  bool gemv = ws.size() <= 3;
  for (const WeightMatrix* w : ws) gemv = gemv && gemv_fits(x, n, *w);
  if (gemv) {
    GemvParams p;
    p.x = x;
    p.n = n;
    p.k = ws[0]->cols;
    for (size_t i = 0; i < ws.size(); ++i) {
      p.seg[i] = segment(*ws[i], ys[i]);
      p.total_rows += ws[i]->rows;
    }
    p.num_segments = static_cast<int>(ws.size());
    take_prepared_gemv_input(&p, ws[0]->dtype);
    return launch_status(launch_gemv(p, ws[0]->dtype == DType::kF8E4M3, ctx_->stream), "matmul_multi");
  }
  RETURN_IF_ERROR(prepare_gemm_input(x, n, ws[0]->cols, ws[0]->dtype == DType::kF8E4M3));
  for (size_t i = 0; i < ws.size(); ++i) RETURN_IF_ERROR(gemm_prepared(n, *ws[i], ys[i]));
  return OkStatus();
}

Status CudaBackend::matmul_gate_up_silu(const float* x, int64_t n, const WeightMatrix& gate, const WeightMatrix& up,
                                        float* gate_out, float* up_out, float* act) {
  const OpScope timed(op_timer(), OpKind::kGemm);

  RETURN_IF_ERROR(check_weight(gate));
  RETURN_IF_ERROR(check_weight(up));
  if (gate.rows != up.rows || gate.cols != up.cols || gate.dtype != up.dtype)
    return InvalidArgument("matmul_gate_up_silu: " + gate.name + " and " + up.name + " differ");
  if (n < 0) return InvalidArgument("matmul_gate_up_silu: negative row count");
  if (n == 0) return OkStatus();
  if (gemv_fits(x, n, gate) && gemv_fits(x, n, up)) {
    GemvParams p;
    p.x = x;
    p.n = n;
    p.k = gate.cols;
    p.seg[0] = segment(gate, gate_out);
    p.seg[1] = segment(up, up_out);
    p.num_segments = 2;
    p.total_rows = gate.rows;
    p.silu = true;
    p.act = act;
    take_prepared_gemv_input(&p, gate.dtype);
    // On the FP8 tensor cores, act's partial maxima for the down projection, which then
    // quantizes act in one pass.
    const bool absmax = gate.dtype == DType::kF8E4M3 && gemv_fp8_mma_supported();
    const int64_t partials = gemv_fp8_tiles(gate.rows);
    if (absmax) {
      RETURN_IF_ERROR(ensure_scratch(&x_absmax_, static_cast<size_t>(n * partials) * sizeof(float)));
      p.act_absmax = x_absmax_.as<float>();
    }
    RETURN_IF_ERROR(
        launch_status(launch_gemv(p, gate.dtype == DType::kF8E4M3, ctx_->stream), "matmul_gate_up_silu"));
    if (absmax) set_prepared_absmax(act, n, gate.rows, partials);
    return OkStatus();
  }
  RETURN_IF_ERROR(prepare_gemm_input(x, n, gate.cols, gate.dtype == DType::kF8E4M3));
  if (gate.dtype != DType::kF8E4M3) {
    // Fast precision, act apart from the scratch: BF16 GEMM outputs (half of the bytes the
    // SiLU * up pass reads), and act also written in BF16 for the down projection.
    const auto overlaps = [&](const float* p) { return act < p + n * gate.rows && p < act + n * gate.rows; };
    if (precision_ != ActivationPrecision::kFast || overlaps(gate_out) || overlaps(up_out)) {
      RETURN_IF_ERROR(gemm_prepared(n, gate, gate_out));
      RETURN_IF_ERROR(gemm_prepared(n, up, up_out));
      return silu_mul(gate_out, up_out, n, gate.rows, act);
    }
    RETURN_IF_ERROR(gemm_cublas(x_bf16_.data(), n, gate, gate_out, GemmKind::kBf16, nullptr, 0.0f, GemmOut::kBf16));
    RETURN_IF_ERROR(gemm_cublas(x_bf16_.data(), n, up, up_out, GemmKind::kBf16, nullptr, 0.0f, GemmOut::kBf16));
    // x_bf16_ (the GEMMs' input, read before this kernel in stream order) now takes act; a
    // larger buffer retires the old one, which the enqueued GEMMs still read.
    RETURN_IF_ERROR(ensure_scratch(&x_bf16_, static_cast<size_t>(n * gate.rows) * 2));
    RETURN_IF_ERROR(launch_status(
        launch_silu_mul_bf16(gate_out, up_out, n * gate.rows, act, x_bf16_.data(), ctx_->stream),
        "matmul_gate_up_silu"));
    set_prepared_input(act, n, gate.rows, /*fp8=*/false);
    return OkStatus();
  }
  // FP8: the two GEMMs (scaled by cuBLASLt, or left UNSCALED, x_q . W_q^T, without outer-vector
  // scaling; backend.h lets this op leave that scratch in any state), then one epilogue that
  // applies the scales if still due, SiLU * up, and quantizes act for the down projection, which
  // then skips its quantization pass.
  RETURN_IF_ERROR(gemm_prepared(n, gate, gate_out, /*rescale=*/false));
  RETURN_IF_ERROR(gemm_prepared(n, up, up_out, /*rescale=*/false));
  const bool scaled = fp8_outer_scaling_ && gate.scale_kind == WeightScale::kPerRow &&
                      up.scale_kind == WeightScale::kPerRow;
  // x's scales, read before the epilogue overwrites them with act's; growing x_fp8_ keeps the
  // old buffer alive (retired_) for the GEMMs already enqueued on it.
  const float* x_scale = x_scale_.as<float>();
  RETURN_IF_ERROR(ensure_scratch(&x_fp8_, static_cast<size_t>(n * gate.rows)));
  RETURN_IF_ERROR(ensure_scratch(&x_scale_, static_cast<size_t>(n) * sizeof(float)));
  Fp8SiluEpilogue e;
  e.gate = gate_out;
  e.up = up_out;
  e.n = n;
  e.m = gate.rows;
  e.x_scale = scaled ? nullptr : x_scale;
  e.gate_scale = gate.scales;
  e.gate_per_col = gate.scale_kind == WeightScale::kPerRow;
  e.up_scale = up.scales;
  e.up_per_col = up.scale_kind == WeightScale::kPerRow;
  e.act = act;
  e.q = x_fp8_.data();
  e.q_scale = x_scale_.as<float>();
  RETURN_IF_ERROR(launch_status(launch_fp8_silu_mul_quantize(e, ctx_->stream), "matmul_gate_up_silu"));
  set_prepared_input(act, n, gate.rows, /*fp8=*/true);
  return OkStatus();
}

}  // namespace lancet::cuda
