// KV cache writes and paged attention on the CUDA backend: argument checks that need no
// device data, then the kernel of the step's route with the step's split plan (both from
// attention_plan.h: made once per step by plan_attention, or here for an unplanned call); a
// mixed step's plan runs its leading decode rows in the decode kernel and the prompt chunks
// after them in the prompt kernel.
#include <algorithm>
#include <cmath>
#include <string>

#include "backend/cuda/attention_plan.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_check.h"
#include "backend/cuda/device_info.h"
#include "backend/cuda/kernels.h"

namespace lancet::cuda {
namespace {

Status check_cache(const KvCacheLayer& c) {
  if (c.dtype != DType::kF32 && c.dtype != DType::kBF16 && c.dtype != DType::kF8E4M3)
    return Unimplemented(std::string("cuda kv cache: dtype ") + dtype_name(c.dtype) + " (f32, bf16 or fp8 e4m3)");
  if (c.dtype == DType::kF8E4M3 &&
      !(std::isfinite(c.k_scale) && std::isfinite(c.v_scale) && c.k_scale > 0.0f && c.v_scale > 0.0f))
    return InvalidArgument("kv cache: fp8 K/V scales must be finite and positive");
  if (c.num_blocks <= 0 || c.block_size <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || !c.k || !c.v)
    return InvalidArgument("kv cache: empty layer");
  return OkStatus();
}

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

}  // namespace

Status CudaBackend::kv_write(const KvWriteArgs& a, const KvCacheLayer& c) {
  const OpScope timed(op_timer(), OpKind::kKvWrite);

  RETURN_IF_ERROR(check_cache(c));
  if (a.num_tokens < 0) return InvalidArgument("kv_write: negative token count");
  if (a.num_tokens == 0) return OkStatus();
  if (!a.k || !a.v || !a.slot_mapping) return InvalidArgument("kv_write: null input");
  return launch_status(launch_kv_write(a, c, err_word_.as<unsigned>(), ctx_->stream), "kv_write");
}

Status CudaBackend::rope_kv_write(const RopeArgs& r, const KvWriteArgs& w, const KvCacheLayer& c) {
  // Prompt chunks keep the two kernels (the KV write's wider stores); a decode-sized step,
  // a few kilobytes, takes one launch.
  if (r.num_tokens > kRopeKvFusedMaxTokens || r.num_tokens != w.num_tokens || r.k != w.k ||
      r.num_kv_heads != c.num_kv_heads || r.head_dim != c.head_dim)
    return Backend::rope_kv_write(r, w, c);
  const OpScope timed(op_timer(), OpKind::kRope);

  RETURN_IF_ERROR(check_cache(c));
  if (r.rotary_dim <= 0 || r.rotary_dim > r.head_dim || r.rotary_dim % 2 != 0 || r.head_dim % 2 != 0)
    return InvalidArgument("rope: rotary_dim " + std::to_string(r.rotary_dim) + " must be even and <= head_dim");
  if (r.num_tokens < 0 || r.num_heads < 0 || !r.positions || !r.cos || !r.sin || !w.v || !w.slot_mapping)
    return InvalidArgument("rope_kv_write: bad arguments");
  return launch_status(launch_rope_kv_write(r, w, c, err_word_.as<unsigned>(), ctx_->stream), "rope_kv_write");
}

AttentionStepPlan CudaBackend::plan_attention(const AttentionPlanQuery& q, const KvCacheLayer& c) const {
  if (q.max_context_len <= 0) return AttentionStepPlan{};  // unknown: each call plans itself
  const AttentionDevice dev{num_sms_, precision_ == ActivationPrecision::kExact};
  return plan_attention_splits(
      AttentionShape{q.num_tokens, q.num_seqs, q.num_heads, q.max_context_len, q.decode_seqs, q.decode_tokens,
                     q.decode_max_context_len},
      c, dev);
}

Status CudaBackend::paged_attention(const PagedAttentionArgs& a, const KvCacheLayer& c) {
  const OpScope timed(op_timer(), OpKind::kAttention);

  RETURN_IF_ERROR(check_cache(c));
  if (c.head_dim != 64 && c.head_dim != 128)
    return Unimplemented("paged_attention: head_dim " + std::to_string(c.head_dim) + " (cuda supports 64 and 128)");
  if (a.num_heads <= 0 || a.num_heads % c.num_kv_heads != 0)
    return InvalidArgument("paged_attention: " + std::to_string(a.num_heads) + " query heads for " +
                           std::to_string(c.num_kv_heads) + " kv heads");
  if (a.num_tokens < 0) return InvalidArgument("paged_attention: negative token count");
  if (a.num_tokens == 0) return OkStatus();
  if (a.num_seqs <= 0 || a.max_blocks_per_seq <= 0)
    return InvalidArgument("paged_attention: tokens without sequences or block tables");
  if (a.max_blocks_per_seq * c.block_size > INT32_MAX || c.num_blocks > INT32_MAX)
    return OutOfRange("paged_attention: context bound past 2^31 tokens");
  if (!a.q || !a.out || !a.query_start || !a.context_lens || !a.block_tables)
    return InvalidArgument("paged_attention: null input");
  if (!aligned16(a.q) || !aligned16(a.out) || !aligned16(c.k) || !aligned16(c.v))
    return InvalidArgument("paged_attention: q, out and the cache must be 16-byte aligned");

  const AttentionDevice dev{num_sms_, precision_ == ActivationPrecision::kExact};
  const AttentionStepPlan& sp = a.plan;
  if (sp.num_splits > 0 && sp.decode_seqs > 0) {
    // A mixed step: the leading decode rows in the decode kernel, then the prompt chunks in
    // the prompt kernel; q and out rows stay absolute (query_start's values).
    const int64_t ds = sp.decode_seqs, dt = sp.decode_tokens;
    if (ds >= a.num_seqs || dt < ds || dt > 3 * ds || dt >= a.num_tokens || a.device_plan)
      return InvalidArgument("paged_attention: bad mixed-step plan (" + std::to_string(ds) + " decode sequences, " +
                             std::to_string(dt) + " rows)");
    PagedAttentionArgs dec = a;
    dec.num_tokens = dt;
    dec.num_seqs = ds;
    const AttentionStepPlan dplan{sp.decode_splits, sp.decode_split_len, sp.decode_splits};
    RETURN_IF_ERROR(attention_kernel(dec, c, AttentionRoute::kDecode, dplan, 0));
    PagedAttentionArgs pro = a;
    pro.num_tokens = a.num_tokens - dt;
    pro.num_seqs = a.num_seqs - ds;
    pro.query_start = a.query_start + ds;
    pro.context_lens = a.context_lens + ds;
    pro.block_tables = a.block_tables + ds * a.max_blocks_per_seq;
    const AttentionStepPlan pplan{sp.num_splits, sp.split_len, sp.max_splits};
    return attention_kernel(pro, c, AttentionRoute::kPrefillPacked, pplan, dt);
  }
  const AttentionShape shape{a.num_tokens, a.num_seqs, a.num_heads, a.max_blocks_per_seq * c.block_size};
  return attention_kernel(a, c, attention_route(shape, c, dev),
                          sp.num_splits > 0 ? sp : plan_attention_splits(shape, c, dev), 0);
}

Status CudaBackend::attention_kernel(const PagedAttentionArgs& a, const KvCacheLayer& c, AttentionRoute route,
                                     const AttentionStepPlan& sp, int64_t first_row) {
  if (sp.num_splits < 1 || (sp.num_splits > 1 && sp.split_len <= 0))
    return InvalidArgument("paged_attention: bad attention plan");
  // A graph-captured step reads its own plan at run time: the launch holds max_splits splits.
  const bool device_plan =
      a.device_plan != nullptr && (route == AttentionRoute::kDecode || route == AttentionRoute::kExact);
  if (device_plan && sp.max_splits < sp.num_splits)
    return InvalidArgument("paged_attention: a device plan's split bound is below its splits");
  AttentionPlan plan;
  plan.num_splits = sp.num_splits;
  plan.split_len = sp.split_len;
  plan.grid_splits = device_plan ? sp.max_splits : sp.num_splits;
  plan.device = device_plan ? a.device_plan : nullptr;
  plan.first_row = first_row;
  if (plan.grid_splits > 1) {
    const int64_t floats = attention_workspace_floats(a.num_tokens, a.num_heads, c.head_dim, plan.grid_splits);
    RETURN_IF_ERROR(ensure_scratch(&attn_partial_, static_cast<size_t>(floats) * sizeof(float)));
    plan.partial = attn_partial_.as<float>();
  }
  unsigned* err = err_word_.as<unsigned>();
  switch (route) {
    case AttentionRoute::kPrefillF32Cache:
      return launch_status(launch_attention_prefill_f32_cache(a, c, err, ctx_->stream), "paged_attention");
    case AttentionRoute::kPrefillPacked:
      if (current_device_sm() == 90 && attention_prefill_sm90_available())
        return launch_status(launch_attention_prefill_sm90(a, c, plan, fp8_attention_, err, ctx_->stream),
                             "paged_attention");
      return launch_status(launch_attention_prefill_sm80(a, c, plan, err, ctx_->stream), "paged_attention");
    case AttentionRoute::kDecode:
      return launch_status(launch_attention_decode(a, c, plan, err, ctx_->stream), "paged_attention");
    case AttentionRoute::kExact:
      break;
  }
  return launch_status(launch_attention_exact(a, c, plan, err, ctx_->stream), "paged_attention");
}

}  // namespace lancet::cuda
