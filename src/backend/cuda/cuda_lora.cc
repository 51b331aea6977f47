// CudaBackend's LoRA: modules with BF16 factors (half the bytes the kernels read per step),
// slots filled by conversion on the host (scale folded into B before rounding, zeros past the
// slot's rank) and stream-ordered copies, and lora_apply's argument checks and launches
// (lora.cu): lora_apply_multi takes up to kLoraMaxModules modules of one input in one launch
// pair, lora_apply is its 1-module case. They read nothing back and allocate nothing, so they
// may be captured: the workspace of the shrink's partial sums is allocated with the first module.
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/kernels.h"
#include "core/dtype.h"

namespace lancet::cuda {

StatusOr<LoraModuleWeights> CudaBackend::alloc_lora_module(int64_t num_slots, int64_t max_rank, int64_t in,
                                                           int64_t out) {
  if (max_rank > kLoraMaxRank)
    return InvalidArgument("alloc_lora_module: the cuda backend takes LoRA ranks up to " +
                           std::to_string(kLoraMaxRank) + ", not " + std::to_string(max_rank));
  if (num_slots > (int64_t{1} << 30))
    return InvalidArgument("alloc_lora_module: " + std::to_string(num_slots) + " slots");
  if (capturing_) return FailedPrecondition("alloc_lora_module: not allowed while capturing a graph");
  if (lora_partials_.empty()) {
    ASSIGN_OR_RETURN(lora_partials_, alloc(static_cast<size_t>(kLoraPartialFloats) * sizeof(float)));
  }
  return make_lora_module(DType::kBF16, num_slots, max_rank, in, out);
}

Status CudaBackend::set_lora_slot(LoraModuleWeights& w, int64_t slot, const float* a, const float* b, int64_t rank,
                                  float scale) {
  if (slot < 0 || slot >= w.num_slots || rank < 0 || rank > w.max_rank)
    return InvalidArgument("set_lora_slot: slot " + std::to_string(slot) + " or rank " + std::to_string(rank) +
                           " outside the module's " + std::to_string(w.num_slots) + " slots of rank " +
                           std::to_string(w.max_rank));
  if (w.dtype != DType::kBF16 || !w.a || !w.b || !w.slot_rank)
    return InvalidArgument("set_lora_slot: the module was not allocated by the cuda backend (bf16)");
  if (rank > 0 && (!a || !b)) return InvalidArgument("set_lora_slot: missing factors");
  if (capturing_) return FailedPrecondition("set_lora_slot: not allowed while capturing a graph");
  const int64_t R = w.max_rank, in = w.in, out = w.out;
  uint16_t* da = static_cast<uint16_t*>(w.a) + slot * R * in;
  uint16_t* db = static_cast<uint16_t*>(w.b) + slot * out * R;
  const int32_t r32 = static_cast<int32_t>(rank);
  if (rank == 0) {
    RETURN_IF_ERROR(zero(da, static_cast<size_t>(R * in) * 2));
    RETURN_IF_ERROR(zero(db, static_cast<size_t>(out * R) * 2));
  } else {
    // Round to nearest even on the host, B scaled first; ranks past `rank` stay zero.
    std::vector<uint16_t> pa(static_cast<size_t>(R * in), 0), pb(static_cast<size_t>(out * R), 0);
    for (int64_t i = 0; i < rank * in; ++i) pa[static_cast<size_t>(i)] = f32_to_bf16(a[i]);
    for (int64_t o = 0; o < out; ++o)
      for (int64_t j = 0; j < rank; ++j) pb[static_cast<size_t>(o * R + j)] = f32_to_bf16(scale * b[o * rank + j]);
    // Copies from pageable memory return once staged: the vectors may go (copy_to_device).
    RETURN_IF_ERROR(copy_to_device(da, pa.data(), pa.size() * 2));
    RETURN_IF_ERROR(copy_to_device(db, pb.data(), pb.size() * 2));
  }
  RETURN_IF_ERROR(copy_to_device(w.slot_rank + slot, &r32, sizeof r32));
  w.host_rank[static_cast<size_t>(slot)] = r32;
  return OkStatus();
}

namespace {

// lora_apply's checks of one module's arguments (its grids take up to 65535 slots).
Status check_apply(const LoraApplyArgs& a) {
  const LoraModuleWeights* w = a.w;
  if (!w || !a.x || !a.y) return InvalidArgument("lora_apply: missing weights, input or output");
  if (a.rows.empty()) return OkStatus();
  if (w->dtype != DType::kBF16 || !w->a || !w->b || !w->slot_rank)
    return InvalidArgument("lora_apply: the module was not allocated by the cuda backend (bf16)");
  if (w->max_rank <= 0 || w->max_rank > kLoraMaxRank)
    return InvalidArgument("lora_apply: max_rank " + std::to_string(w->max_rank) + " outside [1, " +
                           std::to_string(kLoraMaxRank) + "]");
  if (a.rows.num_slots != w->num_slots || !a.rows.rows || !a.rows.slot_start || !a.scratch)
    return InvalidArgument("lora_apply: the step's rows do not match the module's " + std::to_string(w->num_slots) +
                           " slots, or no scratch");
  if (w->num_slots > 65535) return InvalidArgument("lora_apply: more than 65535 slots");
  if (a.num_tokens < 0 || a.rows.num_rows < 0 || a.rows.num_rows > INT32_MAX)
    return InvalidArgument("lora_apply: bad token or row count");
  return OkStatus();
}

// Whether b can share a launch with a (lora.cu): the same input and rows, and y and scratch
// regions that overlap neither a's (the modules' kernels run side by side).
bool same_launch(const LoraApplyArgs& a, const LoraApplyArgs& b) {
  auto overlap = [](const float* p, int64_t n, const float* q, int64_t m) { return p < q + m && q < p + n; };
  return a.x == b.x && a.w->in == b.w->in && a.num_tokens == b.num_tokens && a.rows.rows == b.rows.rows &&
         a.rows.slot_start == b.rows.slot_start && a.rows.num_rows == b.rows.num_rows &&
         a.rows.num_slots == b.rows.num_slots &&
         !overlap(a.y, a.num_tokens * a.w->out, b.y, b.num_tokens * b.w->out) &&
         !overlap(a.scratch, a.rows.num_rows * a.w->max_rank, b.scratch, b.rows.num_rows * b.w->max_rank);
}

}  // namespace

Status CudaBackend::lora_apply(const LoraApplyArgs& a) { return lora_apply_multi(std::span<const LoraApplyArgs>(&a, 1)); }

Status CudaBackend::lora_apply_multi(std::span<const LoraApplyArgs> args) {
  const OpScope timed(op_timer(), OpKind::kLora);
  for (const LoraApplyArgs& a : args) RETURN_IF_ERROR(check_apply(a));
  // Greedy batches of consecutive modules that share a launch, kLoraMaxModules at most.
  LoraApplyArgs batch[kLoraMaxModules];
  int n = 0;
  auto flush = [&]() -> Status {
    if (n == 0) return OkStatus();
    const cudaError_t e = launch_lora_apply(std::span<const LoraApplyArgs>(batch, static_cast<size_t>(n)),
                                            lora_partials_.as<float>(), kLoraPartialFloats,
                                            err_word_.as<unsigned>(), ctx_->stream);
    n = 0;
    return launch_status(e, "lora_apply");
  };
  for (const LoraApplyArgs& a : args) {
    if (a.rows.empty()) continue;
    bool joins = n < kLoraMaxModules;
    for (int i = 0; joins && i < n; ++i) joins = same_launch(batch[i], a);
    if (!joins) RETURN_IF_ERROR(flush());
    batch[n++] = a;
  }
  return flush();
}

}  // namespace lancet::cuda
