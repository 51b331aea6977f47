// CpuBackend::lora_apply: per slot, the shrink (rows x A_s^T into scratch) then the expand
// (scratch x B_s^T added to the rows' outputs). Each row is computed by the same sequence of
// operations whatever else the step holds, so a row's result does not depend on its batch.
#include <string>

#include "backend/cpu/cpu_backend.h"

namespace lancet::cpu {

Status CpuBackend::lora_apply(const LoraApplyArgs& a) {
  const OpScope timed(op_timer(), OpKind::kLora);
  const LoraModuleWeights* w = a.w;
  if (!w || !a.x || !a.y) return InvalidArgument("lora_apply: missing weights, input or output");
  if (a.rows.empty()) return OkStatus();
  if (w->dtype != DType::kF32) return InvalidArgument("lora_apply: the cpu backend keeps LoRA factors as f32");
  if (a.rows.num_slots != w->num_slots || !a.rows.rows || !a.rows.slot_start || !a.scratch)
    return InvalidArgument("lora_apply: the step's rows do not match the module's " + std::to_string(w->num_slots) +
                           " slots, or no scratch");
  const int64_t R = w->max_rank, in = w->in, out = w->out;
  const float* A = static_cast<const float*>(w->a);
  const float* B = static_cast<const float*>(w->b);
  for (int64_t s = 0; s < w->num_slots; ++s) {
    const int32_t begin = a.rows.slot_start[s], end = a.rows.slot_start[s + 1];
    if (begin < 0 || end < begin || end > a.rows.num_rows)
      return InvalidArgument("lora_apply: slot " + std::to_string(s) + "'s rows are outside the step's");
    const int64_t rank = w->host_rank[static_cast<size_t>(s)];
    if (begin == end || rank == 0) continue;
    for (int32_t k = begin; k < end; ++k)
      if (a.rows.rows[k] < 0 || a.rows.rows[k] >= a.num_tokens)
        return InvalidArgument("lora_apply: row " + std::to_string(a.rows.rows[k]) + " outside the step's tokens");
    const float* As = A + s * R * in;
    const float* Bs = B + s * out * R;
    float* tmp = a.scratch;
    pool().parallel_for(static_cast<int64_t>(end - begin) * rank, [&](int64_t b, int64_t e, int) {
      for (int64_t idx = b; idx < e; ++idx) {
        const int64_t k = begin + idx / rank, j = idx % rank;
        const float* x = a.x + static_cast<int64_t>(a.rows.rows[k]) * in;
        const float* aj = As + j * in;
        float acc = 0.0f;
        for (int64_t i = 0; i < in; ++i) acc += x[i] * aj[i];
        tmp[k * R + j] = acc;
      }
    });
    pool().parallel_for(static_cast<int64_t>(end - begin) * out, [&](int64_t b, int64_t e, int) {
      for (int64_t idx = b; idx < e; ++idx) {
        const int64_t k = begin + idx / out, o = idx % out;
        const float* t = tmp + k * R;
        const float* bo = Bs + o * R;
        float acc = 0.0f;
        for (int64_t j = 0; j < rank; ++j) acc += t[j] * bo[j];
        a.y[static_cast<int64_t>(a.rows.rows[k]) * out + o] += acc;
      }
    });
  }
  return OkStatus();
}

}  // namespace lancet::cpu
