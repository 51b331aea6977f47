// Host-side launchers of the CUDA backend's kernels (defined in the .cu files beside this).
// Each enqueues work on the given stream and returns the launch error (cudaGetLastError);
// none synchronizes. Indices that come from device memory (token ids, rows, positions,
// slots, block tables, query offsets) cannot be checked on the host without a round trip,
// so kernels skip bad ones (writing zeros) and set a bit in a device error word that
// CudaBackend::synchronize() turns into a Status.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/backend.h"

namespace lancet::cuda {

// Bits of the device error word.
enum ErrorBit : unsigned {
  kErrEmbeddingId = 1u << 0,   // embedding: token id outside the table
  kErrGatherRow = 1u << 1,     // gather_rows: row outside [0, n)
  kErrRopePosition = 1u << 2,  // rope: position outside the table
  kErrKvSlot = 1u << 3,        // kv_write: slot past the cache
  kErrBlockId = 1u << 4,       // paged_attention: block id outside the cache
  kErrSeqShape = 1u << 5,      // paged_attention: bad query_start / context_lens
  kErrLoraRows = 1u << 6,      // lora_apply: slot_start or a row outside the step
};

// hi = bf16(x), lo = bf16(x - hi): x to about 16 mantissa bits as two bf16 halves.
cudaError_t launch_split_bf16(const float* x /*[n]*/, void* hi /*[n] bf16*/, void* lo /*[n] bf16*/, int64_t n,
                              cudaStream_t s);
// y = bf16(x), round to nearest even.
cudaError_t launch_f32_to_bf16(const float* x /*[n]*/, void* y /*[n] bf16*/, int64_t n, cudaStream_t s);

// out[i] = table[ids[i]] as f32.
cudaError_t launch_embedding_bf16(const void* table /*[rows, cols] bf16*/, int64_t rows, int64_t cols,
                                  const int32_t* ids /*[n]*/, int64_t n, float* out /*[n, cols]*/,
                                  unsigned* err, cudaStream_t s);

cudaError_t launch_rms_norm(const RmsNormArgs& a, cudaStream_t s);
cudaError_t launch_rope(const RopeArgs& a, unsigned* err, cudaStream_t s);
cudaError_t launch_silu_mul(const float* gate /*[n]*/, const float* up /*[n]*/, int64_t n, float* out /*[n]*/,
                            cudaStream_t s);
// out = silu(gate) * up from BF16 values (GEMM outputs), and out rounded to BF16 in out_bf16.
cudaError_t launch_silu_mul_bf16(const void* gate /*[n] bf16*/, const void* up /*[n] bf16*/, int64_t n,
                                 float* out /*[n]*/, void* out_bf16 /*[n] bf16*/, cudaStream_t s);
cudaError_t launch_gather_rows(const float* x /*[n, d]*/, int64_t n, int64_t d, const int32_t* rows /*[r]*/,
                               int64_t r, float* out /*[r, d]*/, unsigned* err, cudaStream_t s);
cudaError_t launch_kv_write(const KvWriteArgs& a, const KvCacheLayer& cache, unsigned* err, cudaStream_t s);
// rope then kv_write in one launch (rope_kv_write.cu; r.k must be w.k), for decode-sized steps.
cudaError_t launch_rope_kv_write(const RopeArgs& r, const KvWriteArgs& w, const KvCacheLayer& cache, unsigned* err,
                                 cudaStream_t s);

// How paged attention splits each query's context (flash decoding): num_splits > 1 writes
// per-split partial results to the workspace and a second kernel combines them. With device
// set (the decode and exact kernels, in captured graphs), the kernels and the merge read
// {num_splits, split_len} from device[0..1] at run time instead, over a grid of grid_splits
// splits (>= any plan device can hold); CTAs of splits past the plan exit, and a plan of one
// split writes the output directly, as an eager launch of that plan does.
struct AttentionPlan {
  int num_splits = 1;
  int split_len = 0;      // keys per split (multiple of 16)
  int grid_splits = 1;    // the launch's splits, and the partial buffer's stride
  const int32_t* device = nullptr;  // [2] {num_splits, split_len}, or null
  float* partial = nullptr;  // [num_tokens, num_heads, grid_splits, head_dim + 2] when grid_splits > 1
  // The first query row of the launch's sequences (query_start[0]; > 0 for the prompt part of
  // a mixed step): partial's rows count from it. Prompt kernels only; decode launches start at 0.
  int64_t first_row = 0;
};

// Query heads of one KV head that one CTA handles (the grid's head chunking).
int attention_exact_heads_per_cta(int64_t head_dim);
// Floats of workspace a plan with num_splits needs.
int64_t attention_workspace_floats(int64_t num_tokens, int64_t num_heads, int64_t head_dim, int num_splits);

cudaError_t launch_attention_exact(const PagedAttentionArgs& a, const KvCacheLayer& cache,
                                   const AttentionPlan& plan, unsigned* err, cudaStream_t s);

// The split-KV merge (attention/merge.cu): combines the partial results every attention
// kernel writes under a split plan (maxima in log2 units) into out.
// With device_plan, the splits merged are device_plan[0] (<= grid_splits; nothing is done for
// one: the attention kernel wrote out itself), else grid_splits.
cudaError_t launch_attention_merge(const float* partial /*[rows, grid_splits, head_dim + 2]*/, int64_t rows,
                                    int grid_splits, const int32_t* device_plan /*[2] or null*/, int64_t head_dim,
                                    float* out /*[rows, head_dim]*/, cudaStream_t s);

// Decode attention on tensor cores (attention/decode.cu): same arguments and results as
// launch_attention_exact for bf16 and fp8 caches, one CTA per (token, KV head, split) holding up
// to attention_decode_heads_per_cta() query heads; BF16 (FP16 for fp8 caches) rounding of Q and P.
int attention_decode_heads_per_cta();
// Keys one round of the decode kernel covers (each of its warps one pipeline stage) for a
// cache of this dtype: the unit of its split plans.
int attention_decode_keys_per_round(DType kv);
// CTAs of the decode kernel one multiprocessor holds at once (its shared memory and registers).
int attention_decode_ctas_per_sm();
cudaError_t launch_attention_decode(const PagedAttentionArgs& a, const KvCacheLayer& cache, const AttentionPlan& plan,
                                    unsigned* err, cudaStream_t s);

// Prompt-chunk attention on tensor cores (mma.sync, sm_80+) for bf16 and fp8 caches
// (attention/prefill_sm80.cu; the path where the sm_90a kernel is not available): same
// arguments and results as launch_attention_exact, the query heads of a KV head packed into one
// CTA's rows, split-KV per plan (split_len a multiple of 64); group <= 128.
// attention_prefill_ctas: the CTAs an unsplit launch needs for num_tokens query rows packed
// densely (0 when the group is too large). Decode rows riding along in the batch each add a
// CTA of little work, so the planner counts only these.
int64_t attention_prefill_ctas(int64_t num_tokens, int64_t group, int64_t num_kv_heads);
cudaError_t launch_attention_prefill_sm80(const PagedAttentionArgs& a, const KvCacheLayer& cache,
                                          const AttentionPlan& plan, unsigned* err, cudaStream_t s);

// Prompt-chunk attention on Hopper (attention/prefill_sm90.cu): warp-specialized, wgmma, bf16
// and fp8 caches, head_dim 64 or 128; same arguments, results and split-KV plans as
// launch_attention_prefill_sm80 (any split_len). Available when the build holds its sm_90a
// image and the device is an sm_90 GPU.
// fp8_math (fp8 caches only): kE4m3Query rounds each query row to E4M3 under its own scale and
// runs Q K^T on the FP8 tensor cores; kE4m3x2Query holds each row as two E4M3 terms (two FP8
// Q K^T products, about a 16-bit query's precision); kE4m3QueryAndP also rounds P (times 256)
// to E4M3 and runs P V on them over V transposed in shared memory; kE4m3x2QueryAndP is the
// two-term query with that P V; kF16 keeps Q and P in FP16.
bool attention_prefill_sm90_available();
cudaError_t launch_attention_prefill_sm90(const PagedAttentionArgs& a, const KvCacheLayer& cache,
                                          const AttentionPlan& plan, Fp8AttentionMath fp8_math, unsigned* err,
                                          cudaStream_t s);

// Prefill attention on tensor cores for any cache dtype (attention/prefill_f32_cache.cu; the
// path of f32 caches): same arguments and results as launch_attention_exact, BF16 rounding of
// Q, K, V and P; head_dim 64 or 128, sm_80+.
cudaError_t launch_attention_prefill_f32_cache(const PagedAttentionArgs& a, const KvCacheLayer& cache, unsigned* err,
                                               cudaStream_t s);

// ---- matrix-vector products for decode (gemv.cu) ----
constexpr int kGemvMaxRows = 4;  // rows of x one launch handles; larger batches use cuBLASLt

// One weight matrix of a gemv launch: W [rows, k] (bf16 or fp8 e4m3), y [n, rows].
struct GemvSegment {
  const void* w = nullptr;
  const float* scale = nullptr;  // null, [1] or [rows] (per_row_scale)
  bool per_row_scale = false;
  float* y = nullptr;
  int64_t rows = 0;
};

// y_s = x . W_s^T for up to three segments sharing x (rows numbered across segments), or with
// silu: act = silu(x . W_0^T) * (x . W_1^T) (two segments of equal shape, y unused).
struct GemvParams {
  const float* x = nullptr;  // [n, k], 16-byte aligned rows
  int64_t n = 0;             // 1..kGemvMaxRows
  int64_t k = 0;             // a multiple of gemv_k_multiple
  GemvSegment seg[3];
  int num_segments = 0;
  int64_t total_rows = 0;    // sum of segment rows (silu: segment 0's rows)
  bool silu = false;
  float* act = nullptr;      // [n, seg[0].rows] with silu
  // FP8 weights on the tensor-core path (launch_gemv_fp8_mma): x as its producer already
  // quantized it with the shared per-row rule below (rms_norm's FP8 variant), [n, k] e4m3 codes
  // (16-byte aligned) and [n] scales; null: the kernel quantizes x itself (same bytes).
  const void* xq = nullptr;
  const float* xq_scale = nullptr;
  // Also on that path, without xq: x's producer wrote partial maxima of |x| per row, [n,
  // x_partials] (the row's absmax is their maximum), so the kernel quantizes x in one pass.
  const float* x_absmax = nullptr;
  int64_t x_partials = 0;
  // silu on that path: also write those partial maxima of act for the next gemv, one per CTA:
  // [n, gemv_fp8_tiles(total_rows)] (null: not written).
  float* act_absmax = nullptr;
};

// k must be a multiple of this (the 16-byte weight load) and W rows 16-byte aligned.
int gemv_k_multiple(bool fp8);
// BF16 weights: f32 math on the CUDA cores (gemv.cu). FP8 weights: on devices with FP8 tensor
// cores (sm_89+) x is quantized per row and multiplied there (gemv_fp8.cu, W8A8 as the FP8
// GEMMs); elsewhere E4M3 is widened on the CUDA cores (weight-only, f32 x).
cudaError_t launch_gemv(const GemvParams& p, bool fp8, cudaStream_t s);
bool gemv_fp8_mma_supported();  // the current device runs launch_gemv_fp8_mma
cudaError_t launch_gemv_fp8_mma(const GemvParams& p, cudaStream_t s);
int64_t gemv_fp8_tiles(int64_t rows);  // CTAs of a launch_gemv_fp8_mma over rows weight rows

// ---- FP8 activations (fp8_activations.cu) ----
// Per-row dynamic quantization: scale[r] = max(absmax(x[r]) / 448, tiny), q = e4m3(x / scale).
cudaError_t launch_quantize_rows_fp8(const float* x /*[n, k]*/, int64_t n, int64_t k, void* q /*[n, k] e4m3*/,
                                     float* scale /*[n]*/, cudaStream_t s);
// y[i, j] *= row_scale[i] * col_scale[j or 0] (the FP8 GEMM's epilogue).
cudaError_t launch_rescale_fp8_output(float* y /*[n, m]*/, int64_t n, int64_t m, const float* row_scale /*[n]*/,
                                      const float* col_scale /*[m] or [1]*/, bool per_col, cudaStream_t s);

// The per-row quantization rule every producer of FP8 GEMM inputs shares (so that a fused
// producer writes exactly the bytes launch_quantize_rows_fp8 would): scale = max(absmax / kFp8Max,
// kFp8MinScale) (an all-zero row quantizes to zeros), q = e4m3_satfinite(x * (1 / scale)).
constexpr float kFp8Max = 448.0f;
constexpr float kFp8MinScale = 1e-12f;

// launch_rms_norm, and out's rows quantized into q / scale as launch_quantize_rows_fp8 does
// (elementwise.cu); out is written exactly as launch_rms_norm writes it.
cudaError_t launch_rms_norm_quantize_fp8(const RmsNormArgs& a, void* q /*[rows, dim] e4m3*/,
                                         float* scale /*[rows]*/, cudaStream_t s);
// launch_rms_norm, and out also rounded to BF16 in y (what launch_f32_to_bf16 makes of out).
cudaError_t launch_rms_norm_bf16(const RmsNormArgs& a, void* y /*[rows, dim] bf16*/, cudaStream_t s);

// The FP8 gate/up GEMMs' shared epilogue: act = silu(g) * u, bit for bit what launch_silu_mul
// gives on the two GEMM outputs (with x_scale set: g = gate[i, j] * (x_scale[i] *
// gate_scale[j or 0]) and u likewise, as launch_rescale_fp8_output on both would leave them);
// then act quantized per row into q / q_scale (the down projection's input).
struct Fp8SiluEpilogue {
  const float* gate = nullptr;        // [n, m] FP8 GEMM output (unscaled when x_scale is set)
  const float* up = nullptr;          // [n, m] FP8 GEMM output (unscaled when x_scale is set)
  int64_t n = 0;
  int64_t m = 0;
  // [n] the GEMM input's row scales (may be q_scale itself), applied with gate_scale and
  // up_scale; null when the GEMMs applied every scale themselves.
  const float* x_scale = nullptr;
  const float* gate_scale = nullptr;  // [m] (gate_per_col) or [1]
  bool gate_per_col = false;
  const float* up_scale = nullptr;    // [m] (up_per_col) or [1]
  bool up_per_col = false;
  float* act = nullptr;               // [n, m] (may alias gate or up)
  void* q = nullptr;                  // [n, m] e4m3
  float* q_scale = nullptr;           // [n]
};
cudaError_t launch_fp8_silu_mul_quantize(const Fp8SiluEpilogue& e, cudaStream_t s);

// ---- sampling (sampling.cu) ----
// Largest vocabulary sample_rows handles (masses are 2^44 fixed point; sums stay below 2^63).
constexpr int64_t kSampleMaxVocab = int64_t{1} << 19;
// tokens[i] = a draw from logits row params[i].row (backend.h DeviceSampleRow), one CTA per
// entry. params and tokens are device memory; rows are not checked here (the caller does).
cudaError_t launch_sample_rows(const float* logits /*[rows, vocab]*/, int64_t vocab,
                               const DeviceSampleRow* params /*[n]*/, int64_t n, int32_t* tokens /*[n]*/,
                               cudaStream_t s);

// ---- asynchronous steps (token_feed.cu) ----
// token_ids[pairs[2i]] = samples[pairs[2i + 1]] for i < n (device memory; indices checked by
// the caller): a step's inputs fed from the previous step's sampled tokens.
cudaError_t launch_scatter_tokens(int32_t* token_ids, const int32_t* samples, const int32_t* pairs /*[n, 2]*/,
                                  int64_t n, cudaStream_t s);

// ---- LoRA (lora.cu) ----
// Largest max_rank the kernels take (the expand stages scratch rows of up to this many ranks in
// shared memory).
constexpr int64_t kLoraMaxRank = 256;
// Projections of one input that one launch_lora_apply takes (q, k and v).
constexpr int kLoraMaxModules = 3;
// Floats of the backend's workspace for the shrink's partial sums over K splits (8 MB): a step
// whose splits need more (sum over modules of splits x num_rows x max_rank) takes fewer splits.
constexpr int64_t kLoraPartialFloats = int64_t{1} << 21;
// lora_apply (lora_args.h; factors bf16, f32 accumulation) for every slot of up to
// kLoraMaxModules modules with the same x, in, num_tokens and rows, and distinct y and scratch:
// two launches (shrink, expand), each spanning the modules. Segments and ranks are read from
// device memory (slot_start, slot_rank), so the grids depend only on the slots, the modules'
// shapes and rows.num_rows (an upper bound in a captured graph). The shrink's partial sums go to
// partials ([kLoraPartialFloats] backend memory, used by one stream; null: none) when the step
// splits the input features, else to each module's scratch ([num_rows, max_rank]). Rows of
// different slots must be different tokens (each output element has one writer). Bad segments or
// rows set kErrLoraRows and are skipped. The caller checks the arguments (cuda_lora.cc); slots
// past 65535 are refused here.
cudaError_t launch_lora_apply(std::span<const LoraApplyArgs> mods, float* partials /*[partial_floats]*/,
                              int64_t partial_floats, unsigned* err, cudaStream_t s);

}  // namespace lancet::cuda
