// The op interface the model is written against, implemented once per device (CPU here, CUDA
// in backend/cuda). Every pointer an op takes is backend memory (host memory on CPU, device
// memory on CUDA) allocated through the backend; shapes are written on each parameter.
// Activations are f32 [rows, cols] row-major. Weights are uploaded (or, on CPU, wrapped
// zero-copy over the mmapped file) once as WeightMatrix. Ops return Status for shapes or
// formats they cannot handle; they never abort on bad input.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <span>
#include <string>
#include <vector>

#include "core/dtype.h"
#include "core/status.h"
#include "core/tensor.h"
#include "backend/lora_args.h"
#include "backend/op_timing.h"

namespace lancet {

// A block of backend memory; frees itself.
class Buffer {
 public:
  Buffer() = default;
  Buffer(void* data, size_t nbytes, std::shared_ptr<void> owner)
      : data_(data), nbytes_(nbytes), owner_(std::move(owner)) {}
  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  template <typename T>
  T* as() const { return static_cast<T*>(data_); }
  bool empty() const { return data_ == nullptr; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  std::shared_ptr<void> owner_;  // releases the memory when the last copy goes
};

// How FP8 weights carry their scales (y = x . (w * scale)).
enum class WeightScale { kNone, kPerTensor, kPerRow };

// A linear layer's weight W [rows = out features, cols = in features], row-major, in its
// storage format. GGUF block types hold cols / block_elems blocks per row.
struct WeightMatrix {
  std::string name;  // for error messages
  DType dtype = DType::kF32;
  int64_t rows = 0;
  int64_t cols = 0;
  size_t row_bytes = 0;
  const void* data = nullptr;      // [rows, row_bytes] backend memory
  WeightScale scale_kind = WeightScale::kNone;
  const float* scales = nullptr;   // [1] (per tensor) or [rows] (per row), backend memory
  std::shared_ptr<void> owner;     // keeps uploaded copies alive (null when zero-copy)
  // A backend-private copy in the layout of that backend's kernels (CPU: row-interleaved
  // blocks, backend/cpu/quant_gemm.h), kept alive by owner; null when only data is used.
  const void* packed = nullptr;
  // W8A8 emulation on the CPU backend: each input row of the matmul is quantized to E4M3
  // first (dynamic per-row scale absmax / 448, quant/fp8_quantize.h), as the GPU's FP8
  // tensor-core paths do for F8_E4M3 weights, so CPU measurements reflect what the GPU
  // computes (set on a 16-bit weight it measures the activation rounding alone). Off
  // (f32 activations) by default; the CUDA backend ignores it (its FP8 GEMMs always quantize
  // their input).
  bool fp8_activations = false;
};

// What to make a WeightMatrix from: a 2-D tensor of the model source plus optional FP8 scales.
struct WeightSpec {
  std::string name;
  const TensorView* tensor = nullptr;  // [rows, cols] host view (mmapped)
  const TensorView* scale = nullptr;   // f32/bf16 [1], [] or [rows] / [rows, 1]; FP8 only
};

// One layer's paged KV cache: K and V [num_blocks, block_size, num_kv_heads, head_dim].
// FP8 (kF8E4M3) stores k / k_scale and v / v_scale rounded to E4M3 (saturating at 448);
// readers multiply back by the scale. Other dtypes ignore the scales.
struct KvCacheLayer {
  DType dtype = DType::kF32;  // kF32, kBF16 or kF8E4M3
  int64_t num_blocks = 0;
  int64_t block_size = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  void* k = nullptr;
  void* v = nullptr;
  float k_scale = 1.0f;
  float v_scale = 1.0f;
};

// Fused residual add + RMSNorm: if x is set, residual += x; then
// out = residual * rsqrt(mean(residual^2) + eps) * weight. With residual == nullptr the norm
// reads x alone (first layer / plain norm).
struct RmsNormArgs {
  int64_t rows = 0;
  int64_t dim = 0;
  const float* x = nullptr;       // [rows, dim] or null
  float* residual = nullptr;      // [rows, dim] in/out, or null
  const float* weight = nullptr;  // [dim]
  float eps = 1e-5f;
  float* out = nullptr;           // [rows, dim]
};

// Rotary embedding in place on q and k from a precomputed table.
struct RopeArgs {
  int64_t num_tokens = 0;
  int64_t num_heads = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t rotary_dim = 0;         // dims rotated (== head_dim for Llama)
  bool interleaved = false;       // pairs (2i, 2i+1) instead of halves (i, i + rotary_dim/2)
  float* q = nullptr;             // [num_tokens, num_heads, head_dim]
  float* k = nullptr;             // [num_tokens, num_kv_heads, head_dim]
  const int32_t* positions = nullptr;  // [num_tokens]
  const float* cos = nullptr;     // [max_positions, rotary_dim / 2]
  const float* sin = nullptr;     // [max_positions, rotary_dim / 2]
  int64_t max_positions = 0;
};

// Varlen paged attention over a batch of sequences. Sequence s owns query rows
// [query_start[s], query_start[s+1]); its context (keys already in the cache, including the
// ones written this step) has context_lens[s] tokens, so its query row i sits at position
// context_lens[s] - q_len + i and sees keys 0..that position (causal; decode is q_len == 1,
// a prefill chunk is any q_len with earlier chunks already in the cache).
// One attention plan per step (plan, then run): how every layer's paged_attention in a step
// divides each query's keys among CTAs (split-KV), made once on the host from the step's real
// lengths (Backend::plan_attention) and passed to every layer. num_splits == 0: not planned
// (paged_attention plans the call itself from max_blocks_per_seq).
struct AttentionStepPlan {
  int32_t num_splits = 0;  // key ranges per query row (1: no split)
  int32_t split_len = 0;   // keys per range (with num_splits > 1)
  // The most splits any step of at least these rows and at most this context can plan (a
  // replayed graph's launch holds this many and reads its step's own plan at run time).
  int32_t max_splits = 0;
  // A mixed step (AttentionPlanQuery::decode_seqs): when decode_seqs > 0 its first decode_seqs
  // sequences (decode_tokens rows) run as a decode step under {decode_splits, decode_split_len}
  // and the others as prompt chunks under the fields above, each in the kernel made for it.
  // 0: one kernel for the whole step. Only eager steps are mixed (no device plan).
  int32_t decode_seqs = 0;
  int32_t decode_tokens = 0;
  int32_t decode_splits = 0;
  int32_t decode_split_len = 0;
};

// What plan_attention plans from: the step's rows and the longest context among its sequences,
// and how many of its sequences, from the first, compute decode rows (attention_decode_seq; the
// scheduler puts decodes before prompt chunks), their rows and the longest context among them.
struct AttentionPlanQuery {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t num_heads = 0;
  int64_t max_context_len = 0;
  int64_t decode_seqs = 0;
  int64_t decode_tokens = 0;
  int64_t decode_max_context_len = 0;  // <= 0: unknown (max_context_len)
};

struct PagedAttentionArgs {
  int64_t num_tokens = 0;
  int64_t num_seqs = 0;
  int64_t num_heads = 0;
  int64_t max_blocks_per_seq = 0;
  float scale = 1.0f;                 // softmax scale, usually 1/sqrt(head_dim)
  const float* q = nullptr;           // [num_tokens, num_heads, head_dim]
  const int32_t* query_start = nullptr;   // [num_seqs + 1]
  const int32_t* context_lens = nullptr;  // [num_seqs]
  const int32_t* block_tables = nullptr;  // [num_seqs, max_blocks_per_seq]
  float* out = nullptr;               // [num_tokens, num_heads, head_dim]
  AttentionStepPlan plan;             // this step's plan (unset: the call plans itself)
  // A captured graph's step: {num_splits, split_len} of each replay's own plan, in backend
  // memory, read by the kernels at run time; the launch holds plan.max_splits splits.
  const int32_t* device_plan = nullptr;  // [2]
};

// Writes this step's keys and values into their cache slots (slot = block * block_size + offset;
// a negative slot skips the token).
struct KvWriteArgs {
  int64_t num_tokens = 0;
  const float* k = nullptr;           // [num_tokens, num_kv_heads, head_dim]
  const float* v = nullptr;           // [num_tokens, num_kv_heads, head_dim]
  const int64_t* slot_mapping = nullptr;  // [num_tokens]
};

// How a backend whose tensor cores take 16-bit inputs rounds the activations it multiplies:
// kFast rounds them to BF16 (8 mantissa bits: what serving engines do); kExact splits each
// value into two BF16 halves (x = hi + lo, about 16 mantissa bits) and runs the GEMM on both,
// at twice the tensor-core work, so results follow an f32 reference closely enough for greedy
// decoding of near-tied logits to agree. Backends computing in f32 ignore it.
enum class ActivationPrecision { kFast, kExact };

// How attention multiplies over an FP8 E4M3 KV cache. kF16: the E4M3 values widen to FP16
// (exactly) and Q and P are rounded to FP16 (a backend's default; the runtime's "auto" picks
// kE4m3x2Query on CUDA). kE4m3Query: prompt chunks also round each query row to E4M3 under its
// own scale (absmax / 448) so Q K^T runs on the FP8 tensor cores at twice the rate
// (FlashAttention-3's FP8 mode for the first product; P V stays FP16); decode rows keep kF16.
// Backends without FP8 tensor cores ignore it. kE4m3QueryAndP: as kE4m3Query, and P rounded to
// E4M3 too (FlashAttention-3's FP8 P V); the CPU backend's rounding of P is an estimate for
// `lancet eval-precision` (its key chunks are not the GPU's tiles, so P is rounded against a
// slightly different running maximum). kE4m3x2Query: as kE4m3Query with each query row held as
// two E4M3 terms (the row's rounding, then the rounding of what it left), Q K^T as two FP8
// products: about a 16-bit query's precision. kE4m3x2QueryAndP: that query and P rounded to E4M3.
enum class Fp8AttentionMath { kF16, kE4m3Query, kE4m3QueryAndP, kE4m3x2Query, kE4m3x2QueryAndP };

// A step whose attention runs as prompt chunks (the GPU's prompt kernel; kE4m3Query applies to
// it): at least 64 query rows, at least 4 per sequence. Other steps are decode-shaped.
inline bool attention_prompt_step(int64_t num_tokens, int64_t num_seqs) {
  return num_tokens >= 64 && num_tokens >= 4 * num_seqs;
}
// A sequence whose query rows this step are decode rows (a token, or a token and a few drafts):
// fewer than the four rows per sequence that make a step a prompt step.
inline bool attention_decode_seq(int64_t q_len) { return q_len < 4; }

// One row of Backend::sample_rows: which logits row to draw from and how. The semantics are
// the CPU sampler's (runner/sampler.h) for a request without logit_bias, penalties, min_tokens
// masking or logprobs: temperature, top-k, then top-p on the renormalised top-k distribution,
// then min-p, candidates ordered by logit (ties to the lowest index), and an inverse-CDF draw
// with u = counter_uniform_value(seed, counter) (backend/counter_uniform.h). A structured-output
// mask (allowed) first sets the logits of the tokens it refuses to -inf, as the CPU sampler's
// SampleContext::allowed_tokens does.
struct DeviceSampleRow {
  int32_t row = 0;           // the logits row (of the rows passed to sample_rows)
  float temperature = 1.0f;  // <= 0: greedy (argmax, ties to the lowest index)
  int32_t top_k = 0;         // <= 0: off
  float top_p = 1.0f;        // in (0, 1]; 1: off
  float min_p = 0.0f;        // in [0, 1]; 0: off
  uint64_t seed = 0;         // the request's seed
  uint64_t counter = 0;      // the request's output position (tokens generated so far)
  // The tokens the row may draw: bit t & 31 of allowed[t >> 5] set = token t allowed; tokens
  // past allowed_words words are refused. Null: every token. Host memory, read during the
  // call (the backend stages it where its kernel reads it).
  const uint32_t* allowed = nullptr;
  int32_t allowed_words = 0;
};

// A captured sequence of ops that can be replayed (CUDA graphs); see Backend::begin_capture.
class BackendGraph {
 public:
  virtual ~BackendGraph() = default;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;

  // ---- memory ----
  virtual StatusOr<Buffer> alloc(size_t nbytes) = 0;
  virtual Status copy_to_device(void* dst, const void* src /*[nbytes] host*/, size_t nbytes) = 0;
  virtual Status copy_to_host(void* dst /*[nbytes] host*/, const void* src, size_t nbytes) = 0;
  virtual Status zero(void* dst, size_t nbytes) = 0;
  // Waits for queued work (no-op on CPU).
  virtual Status synchronize() { return OkStatus(); }
  // Makes this backend's device the calling thread's current one. Backends of several GPUs
  // driven from one thread (a tensor-parallel group) call it before each rank's ops.
  virtual Status make_current() { return OkStatus(); }
  // Which device of its kind the backend runs on (0 on the CPU).
  virtual int device_index() const { return 0; }

  // ---- weights ----
  // A linear weight in its storage format (F32/F16/BF16/F8_E4M3 + scales, GGUF Q8_0/Q4_0/Q4_1/
  // Q4_K/Q5_K/Q6_K). The CPU backend wraps the source memory, which must outlive the result.
  virtual StatusOr<WeightMatrix> upload_weight(const WeightSpec& spec) = 0;
  // A 1-D vector (norm weights) converted to f32 in backend memory.
  virtual StatusOr<Buffer> upload_vector_f32(const TensorView& t, const std::string& name) = 0;

  // ---- ops ----
  // out[i] = table[ids[i]] as f32 (any weight format, quantized rows included).
  virtual Status embedding(const WeightMatrix& table, const int32_t* ids /*[n]*/, int64_t n,
                           float* out /*[n, table.cols]*/) = 0;
  virtual Status rms_norm(const RmsNormArgs& a) = 0;
  virtual Status rope(const RopeArgs& a) = 0;
  // y[n, W.rows] = x[n, W.cols] . W^T (fp32 accumulation).
  virtual Status matmul(const float* x /*[n, W.cols]*/, int64_t n, const WeightMatrix& w,
                        float* y /*[n, W.rows]*/) = 0;
  // out = silu(gate) * up.
  virtual Status silu_mul(const float* gate /*[n, d]*/, const float* up /*[n, d]*/, int64_t n,
                          int64_t d, float* out /*[n, d]*/) = 0;
  virtual Status kv_write(const KvWriteArgs& a, const KvCacheLayer& cache) = 0;
  virtual Status paged_attention(const PagedAttentionArgs& a, const KvCacheLayer& cache) = 0;
  // The shared KV tier: block `block` of every cache in `layers` (one shape and dtype) copied
  // to or from host memory laid out as [layers.size(), 2 (K, V), block_size, num_kv_heads,
  // head_dim] elements of the cache's dtype (kv_block_host_bytes()). Synchronous: the host
  // memory may be reused when the call returns.
  virtual Status kv_block_read(std::span<const KvCacheLayer> layers, int64_t block, void* host) = 0;
  virtual Status kv_block_write(std::span<const KvCacheLayer> layers, int64_t block, const void* host) = 0;
  // The step's attention plan (see AttentionStepPlan); backends that never split return
  // {1, 0, 1}.
  virtual AttentionStepPlan plan_attention(const AttentionPlanQuery& q, const KvCacheLayer& cache) const {
    (void)q;
    (void)cache;
    return AttentionStepPlan{1, 0, 1};
  }
  // out[r] = x[rows[r]] (picks the rows that need logits).
  virtual Status gather_rows(const float* x /*[n, d]*/, int64_t n, int64_t d,
                             const int32_t* rows /*[r]*/, int64_t r, float* out /*[r, d]*/) = 0;

  // ---- fused ops: the defaults compose the ops above; backends override them when one
  // kernel can do the work of several (fewer launches and one read of x) ----
  // ys[i] [n, ws[i]->rows] = x . ws[i]^T for every i (q, k and v from one normalized input).
  virtual Status matmul_multi(const float* x /*[n, cols]*/, int64_t n,
                              std::span<const WeightMatrix* const> ws, std::span<float* const> ys);
  // act = silu(x . gate^T) * (x . up^T). gate_out and up_out [n, gate.rows] are scratch that
  // an implementation may use (and leave in any state).
  virtual Status matmul_gate_up_silu(const float* x /*[n, cols]*/, int64_t n, const WeightMatrix& gate,
                                     const WeightMatrix& up, float* gate_out, float* up_out,
                                     float* act /*[n, gate.rows]*/);
  // Rope on q and k, then k and v into their cache slots (rope, then kv_write). r.k is w.k.
  virtual Status rope_kv_write(const RopeArgs& r, const KvWriteArgs& w, const KvCacheLayer& cache);

  // ---- LoRA adapters (backend/lora_args.h) ----
  // Room for one projection's factors in num_slots slots, every slot empty. The default keeps
  // f32; a backend may store another type (CUDA: bf16).
  virtual StatusOr<LoraModuleWeights> alloc_lora_module(int64_t num_slots, int64_t max_rank, int64_t in, int64_t out);
  // Slot `slot` of w takes factors a [rank, w.in] and b [w.out, rank] (f32, host; rank <=
  // w.max_rank), b multiplied by scale; rank 0 empties the slot. Ordered with the queued work.
  virtual Status set_lora_slot(LoraModuleWeights& w, int64_t slot, const float* a /*[rank, in] host*/,
                               const float* b /*[out, rank] host*/, int64_t rank, float scale);
  // Backends without LoRA refuse (both real backends implement it; test doubles need not).
  virtual Status lora_apply(const LoraApplyArgs& a) {
    (void)a;
    return Unimplemented(std::string(name()) + " backend has no LoRA");
  }
  // Several projections of one input (q, k and v): args[i] as lora_apply, all with the same x
  // and rows, each with its own y and scratch. The default applies them one after another; a
  // backend may do them in fewer launches.
  virtual Status lora_apply_multi(std::span<const LoraApplyArgs> args) {
    for (const LoraApplyArgs& a : args) RETURN_IF_ERROR(lora_apply(a));
    return OkStatus();
  }

  // ---- graphs: ops enqueued between begin_capture and end_capture are recorded instead of
  // run, and launch_graph replays them with the same pointers and shapes (the data behind the
  // pointers may change). Nothing may be allocated or copied to the host while capturing. ----
  virtual void set_activation_precision(ActivationPrecision p) { (void)p; }
  virtual void set_fp8_attention_math(Fp8AttentionMath m) { (void)m; }

  virtual bool supports_graphs() const { return false; }
  virtual Status begin_capture() { return Unimplemented(std::string(name()) + " backend has no graphs"); }
  virtual StatusOr<std::unique_ptr<BackendGraph>> end_capture() {
    return Unimplemented(std::string(name()) + " backend has no graphs");
  }
  virtual Status launch_graph(BackendGraph& graph) {
    (void)graph;
    return Unimplemented(std::string(name()) + " backend has no graphs");
  }
  // ---- sampling on the device, so that only token ids come back to the host ----
  virtual bool supports_device_sampling() const { return false; }
  // tokens_host[i] = a draw from logits row params[i].row (DeviceSampleRow). Waits for the
  // queued work: the tokens are on the host when it returns. Not allowed while capturing.
  virtual Status sample_rows(const float* logits /*[rows, vocab]*/, int64_t rows, int64_t vocab,
                             std::span<const DeviceSampleRow> params /*[n] host*/, int32_t* tokens_host /*[n]*/) {
    (void)logits;
    (void)rows;
    (void)vocab;
    (void)params;
    (void)tokens_host;
    return Unimplemented(std::string(name()) + " backend has no device sampling");
  }
  // As sample_rows, but the tokens stay in backend memory and nothing is waited for: the draw
  // is queued behind the work already enqueued (asynchronous scheduling keeps a step's tokens
  // on the device to feed the next step's inputs). Backends without device sampling say so.
  virtual Status sample_rows_async(const float* logits /*[rows, vocab]*/, int64_t rows, int64_t vocab,
                                   std::span<const DeviceSampleRow> params /*[n] host*/, int32_t* tokens /*[n]*/) {
    (void)logits;
    (void)rows;
    (void)vocab;
    (void)params;
    (void)tokens;
    return Unimplemented(std::string(name()) + " backend has no device sampling");
  }
  // token_ids[pairs[i][0]] = samples[pairs[i][1]] for i < n, queued behind the enqueued work:
  // a step's input tokens taken from the previous step's sampled tokens without the host
  // seeing them. The indices were checked by the caller.
  virtual Status scatter_tokens(int32_t* token_ids /*[tokens]*/, const int32_t* samples /*[samples]*/,
                                const int32_t* pairs /*[n, 2] (token index, sample index)*/, int64_t n) = 0;
  // A device-to-host copy of the work enqueued so far that does not hold up the backend's
  // queue (CUDA: on a copy stream of its own, after an event); wait() returns once dst holds
  // the data. dst must stay valid until then (pinned host memory from alloc_host on CUDA).
  // Default: a synchronous copy_to_host (the CPU, where memory is the host's).
  class PendingCopy {
   public:
    virtual ~PendingCopy() = default;
    virtual Status wait() = 0;
  };
  virtual StatusOr<std::unique_ptr<PendingCopy>> copy_to_host_async(void* dst /*[nbytes] host*/, const void* src,
                                                                     size_t nbytes);
  // Host memory the backend copies from fastest (pinned on CUDA; plain memory on CPU).
  virtual StatusOr<Buffer> alloc_host(size_t nbytes);
  // A point in the backend's queue, for timelines of steps (runner/device_timeline.h):
  // reached() says, without waiting, whether the work enqueued before the mark has run, and
  // seconds_after(earlier) is the device time between two reached marks of this backend.
  // Default: the host clock when the mark is made (the CPU, whose ops run as they are called).
  // Not allowed while capturing a graph.
  class DeviceMark {
   public:
    virtual ~DeviceMark() = default;
    virtual StatusOr<bool> reached() = 0;
    virtual StatusOr<double> seconds_after(DeviceMark& earlier) = 0;
  };
  virtual StatusOr<std::unique_ptr<DeviceMark>> mark_device();
  // Free and total bytes of device memory; false where memory is the host's (CPU).
  virtual bool memory_info(size_t* free_bytes, size_t* total_bytes) {
    (void)free_bytes;
    (void)total_bytes;
    return false;
  }

  // ---- op timing (a profiling mode, backend/op_timing.h): every op's time by kind ----
  // Starts (a fresh timer) or stops timing; Unimplemented where the backend cannot time ops.
  Status set_op_timing(bool on);
  bool op_timing() const { return op_timer_ != nullptr; }
  // Waits for the ops since the last call and adds their times to *acc; one call per step.
  Status take_op_times(OpTimes* acc);

 protected:
  // alloc_lora_module's work for a storage type: zeroed factors of dtype, ranks all 0.
  StatusOr<LoraModuleWeights> make_lora_module(DType dtype, int64_t num_slots, int64_t max_rank, int64_t in,
                                               int64_t out);
  virtual StatusOr<std::unique_ptr<OpTimer>> make_op_timer() {
    return Unimplemented(std::string(name()) + " backend cannot time its ops");
  }
  // Null while timing is off; each op runs inside OpScope(op_timer(), kind).
  OpTimer* op_timer() const { return op_timer_.get(); }

 private:
  std::unique_ptr<OpTimer> op_timer_;
};

// Bytes of one block of one layer's K (or V), after checking that every layer has the first's
// shape and dtype and holds `block`; the host side of kv_block_read/kv_block_write holds
// 2 * layers.size() of them.
inline StatusOr<size_t> kv_block_host_bytes(std::span<const KvCacheLayer> layers, int64_t block) {
  if (layers.empty()) return InvalidArgument("kv block copy: no layers");
  const KvCacheLayer& f = layers[0];
  for (const KvCacheLayer& l : layers)
    if (l.dtype != f.dtype || l.num_blocks != f.num_blocks || l.block_size != f.block_size ||
        l.num_kv_heads != f.num_kv_heads || l.head_dim != f.head_dim || !l.k || !l.v)
      return InvalidArgument("kv block copy: the layers differ in shape or dtype");
  if (block < 0 || block >= f.num_blocks)
    return OutOfRange("kv block copy: block " + std::to_string(block) + " outside [0, " +
                      std::to_string(f.num_blocks) + ")");
  const size_t elem = f.dtype == DType::kF32 ? 4 : f.dtype == DType::kBF16 ? 2 : f.dtype == DType::kF8E4M3 ? 1 : 0;
  if (elem == 0) return InvalidArgument(std::string("kv block copy: cache dtype ") + dtype_name(f.dtype));
  return static_cast<size_t>(f.block_size * f.num_kv_heads * f.head_dim) * elem;
}

// The fused ops' and alloc_host's defaults, inline so that every backend library has them
// without linking the factory library.
inline Status Backend::matmul_multi(const float* x, int64_t n, std::span<const WeightMatrix* const> ws,
                             std::span<float* const> ys) {
  if (ws.size() != ys.size()) return InvalidArgument("matmul_multi: weight and output counts differ");
  for (size_t i = 0; i < ws.size(); ++i) RETURN_IF_ERROR(matmul(x, n, *ws[i], ys[i]));
  return OkStatus();
}

inline Status Backend::matmul_gate_up_silu(const float* x, int64_t n, const WeightMatrix& gate, const WeightMatrix& up,
                                    float* gate_out, float* up_out, float* act) {
  if (gate.rows != up.rows || gate.cols != up.cols)
    return InvalidArgument("matmul_gate_up_silu: " + gate.name + " and " + up.name + " differ in shape");
  RETURN_IF_ERROR(matmul(x, n, gate, gate_out));
  RETURN_IF_ERROR(matmul(x, n, up, up_out));
  return silu_mul(gate_out, up_out, n, gate.rows, act);
}

inline StatusOr<LoraModuleWeights> Backend::make_lora_module(DType dtype, int64_t num_slots, int64_t max_rank,
                                                             int64_t in, int64_t out) {
  if (num_slots <= 0 || max_rank <= 0 || in <= 0 || out <= 0)
    return InvalidArgument("alloc_lora_module: slots, rank and shape must be positive");
  LoraModuleWeights w;
  w.num_slots = num_slots;
  w.max_rank = max_rank;
  w.in = in;
  w.out = out;
  w.dtype = dtype;
  const size_t es = dtype_info(dtype).block_bytes;
  const size_t a_bytes = static_cast<size_t>(num_slots * max_rank * in) * es;
  const size_t b_bytes = static_cast<size_t>(num_slots * out * max_rank) * es;
  const size_t r_bytes = static_cast<size_t>(num_slots) * sizeof(int32_t);
  ASSIGN_OR_RETURN(Buffer a, alloc(a_bytes));
  ASSIGN_OR_RETURN(Buffer b, alloc(b_bytes));
  ASSIGN_OR_RETURN(Buffer r, alloc(r_bytes));
  RETURN_IF_ERROR(zero(a.data(), a_bytes));
  RETURN_IF_ERROR(zero(b.data(), b_bytes));
  RETURN_IF_ERROR(zero(r.data(), r_bytes));
  w.a = a.data();
  w.b = b.data();
  w.slot_rank = r.as<int32_t>();
  w.host_rank.assign(static_cast<size_t>(num_slots), 0);
  w.owner = std::make_shared<std::vector<Buffer>>(std::vector<Buffer>{a, b, r});
  return w;
}

inline StatusOr<LoraModuleWeights> Backend::alloc_lora_module(int64_t num_slots, int64_t max_rank, int64_t in,
                                                              int64_t out) {
  return make_lora_module(DType::kF32, num_slots, max_rank, in, out);
}

inline Status Backend::set_lora_slot(LoraModuleWeights& w, int64_t slot, const float* a, const float* b, int64_t rank,
                                     float scale) {
  if (slot < 0 || slot >= w.num_slots || rank < 0 || rank > w.max_rank)
    return InvalidArgument("set_lora_slot: slot " + std::to_string(slot) + " or rank " + std::to_string(rank) +
                           " outside the module's " + std::to_string(w.num_slots) + " slots of rank " +
                           std::to_string(w.max_rank));
  if (w.dtype != DType::kF32) return Unimplemented("set_lora_slot: this backend stores LoRA factors as f32 only");
  const int64_t R = w.max_rank;
  std::vector<float> pa(static_cast<size_t>(R * w.in), 0.0f), pb(static_cast<size_t>(w.out * R), 0.0f);
  for (int64_t j = 0; j < rank; ++j)
    for (int64_t i = 0; i < w.in; ++i) pa[static_cast<size_t>(j * w.in + i)] = a[j * w.in + i];
  for (int64_t o = 0; o < w.out; ++o)
    for (int64_t j = 0; j < rank; ++j) pb[static_cast<size_t>(o * R + j)] = scale * b[o * rank + j];
  RETURN_IF_ERROR(copy_to_device(static_cast<float*>(w.a) + slot * R * w.in, pa.data(), pa.size() * sizeof(float)));
  RETURN_IF_ERROR(copy_to_device(static_cast<float*>(w.b) + slot * w.out * R, pb.data(), pb.size() * sizeof(float)));
  const int32_t r32 = static_cast<int32_t>(rank);
  RETURN_IF_ERROR(copy_to_device(w.slot_rank + slot, &r32, sizeof r32));
  w.host_rank[static_cast<size_t>(slot)] = r32;
  return synchronize();  // the staging vectors go out of scope
}

inline Status Backend::rope_kv_write(const RopeArgs& r, const KvWriteArgs& w, const KvCacheLayer& cache) {
  RETURN_IF_ERROR(rope(r));
  return kv_write(w, cache);
}

inline Status Backend::set_op_timing(bool on) {
  if (!on) {
    op_timer_.reset();
    return OkStatus();
  }
  ASSIGN_OR_RETURN(op_timer_, make_op_timer());
  return OkStatus();
}

inline Status Backend::take_op_times(OpTimes* acc) {
  if (!op_timer_) return FailedPrecondition(std::string(name()) + " backend: op timing is off");
  return op_timer_->take(acc);
}

inline StatusOr<std::unique_ptr<Backend::PendingCopy>> Backend::copy_to_host_async(void* dst, const void* src,
                                                                                   size_t nbytes) {
  // Done when it returns: wait() has nothing left to wait for.
  struct Done final : PendingCopy {
    Status wait() override { return OkStatus(); }
  };
  RETURN_IF_ERROR(copy_to_host(dst, src, nbytes));
  return std::unique_ptr<PendingCopy>(new Done());
}

inline StatusOr<Buffer> Backend::alloc_host(size_t nbytes) {
  const size_t n = nbytes ? nbytes : 1;
  void* p = ::operator new(n, std::align_val_t{64});
  return Buffer(p, nbytes, std::shared_ptr<void>(p, [](void* q) { ::operator delete(q, std::align_val_t{64}); }));
}

inline StatusOr<std::unique_ptr<Backend::DeviceMark>> Backend::mark_device() {
  class HostMark final : public DeviceMark {
   public:
    StatusOr<bool> reached() override { return true; }
    StatusOr<double> seconds_after(DeviceMark& earlier) override {
      auto* e = dynamic_cast<HostMark*>(&earlier);
      if (!e) return InvalidArgument("device mark: the earlier mark is from another backend");
      return std::chrono::duration<double>(at_ - e->at_).count();
    }

   private:
    std::chrono::steady_clock::time_point at_ = std::chrono::steady_clock::now();
  };
  return std::unique_ptr<DeviceMark>(new HostMark());
}

struct CpuBackendOptions {
  int num_threads = 0;  // 0 = the process-wide default pool
  // "auto" picks the best instruction set the CPU has; "avx512", "avx2", "scalar" force one
  // (an unsupported choice is an error).
  std::string isa = "auto";
  // Q8_0/Q4_0/Q4_1 weights: kOn multiplies activations quantized to int8 per 32-block as
  // llama.cpp does (Q8_0, or Q8_1 for Q4_1), with integer dot products; kOff uses f32 tiles
  // of the dequantized weights (exact w.r.t. dequantize-then-matmul). kAuto is on, except
  // under a forced isa "avx2"/"scalar", which other backends' tests use as exact references.
  enum class QuantActivations { kAuto, kOn, kOff };
  QuantActivations quant_activations = QuantActivations::kAuto;
};

StatusOr<std::unique_ptr<Backend>> make_cpu_backend(const CpuBackendOptions& opts = {});

// "cpu" (or "cuda" when built with it).
StatusOr<std::unique_ptr<Backend>> make_backend(const std::string& name);
// The backend on one device of its kind ("cuda" device 1, ...); the CPU has device 0 only.
StatusOr<std::unique_ptr<Backend>> make_backend_on_device(const std::string& name, int device);

}  // namespace lancet
