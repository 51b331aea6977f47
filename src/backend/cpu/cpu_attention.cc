// KV cache writes and varlen paged attention on the CPU. Attention is split into work items of
// (sequence, KV head, run of query tokens) spread over the thread pool; each item runs the
// flash-style kernel of prefill_attention_impl.inc over the sequence's block table.
// FP8 E4M3 caches store x / scale rounded to nearest even and saturated at +-448
// (backend.h); the kernel reads the codes directly and applies the scales itself.
#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>
#include <vector>

#include "backend/cpu/cpu_backend.h"
#include "backend/cpu/decode_attention.h"

namespace lancet::cpu {

namespace {
// Query tokens per work item: every key chunk an item loads and transposes serves run x group
// rows, so longer runs read the cache fewer times; about 512 rows (at most 128 tokens) keep an
// item's query, score and accumulator buffers within a core's L2 at head_dim 128.
int64_t query_run(int64_t group) { return std::clamp<int64_t>(512 / group / 16 * 16, 16, 128); }

Status check_cache(const KvCacheLayer& c) {
  if (c.dtype != DType::kF32 && c.dtype != DType::kBF16 && c.dtype != DType::kF8E4M3)
    return Unimplemented(std::string("cpu kv cache: dtype ") + dtype_name(c.dtype) + " (f32, bf16 or f8_e4m3)");
  if (c.num_blocks <= 0 || c.block_size <= 0 || c.num_kv_heads <= 0 || c.head_dim <= 0 || !c.k || !c.v)
    return InvalidArgument("kv cache: empty layer");
  if (c.dtype == DType::kF8E4M3 && !(std::isfinite(c.k_scale) && c.k_scale > 0.f && std::isfinite(c.v_scale) &&
                                     c.v_scale > 0.f))
    return InvalidArgument("kv cache: fp8 scales must be finite and positive (k_scale " + std::to_string(c.k_scale) +
                           ", v_scale " + std::to_string(c.v_scale) + ")");
  return OkStatus();
}

// f32 -> E4M3FN, round to nearest even, saturating at +-448 (NaN stays NaN): the same codes
// as core's f32_to_fp8e4m3(f, /*saturate=*/true), by bit arithmetic instead of frexp/ldexp,
// since prefill encodes every K and V element of every layer.
inline uint8_t encode_e4m3(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  const uint8_t sign = static_cast<uint8_t>((u >> 24) & 0x80);
  const uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return sign | 0x7f;      // NaN
  if (a >= 0x43e00000u) return sign | 0x7e;     // >= 448 (and inf): saturate
  if (a >= 0x3c800000u) {                        // >= 2^-6: normal E4M3
    // Round the 23-bit mantissa to 3 bits (nearest even); a carry bumps the exponent, which
    // the same addition handles. Rebias the exponent from 127 to 7.
    const uint32_t r = (a + 0x7ffffu + ((a >> 20) & 1u)) >> 20;
    return sign | static_cast<uint8_t>(r - ((127u - 7u) << 3));
  }
  // Subnormal: multiples of 2^-9 (a code of 8 is the smallest normal, 2^-6, as it should be).
  float m;
  std::memcpy(&m, &a, 4);
  return sign | static_cast<uint8_t>(std::nearbyint(m * 512.f));
}
}  // namespace

// The KV tier's block copies: each layer's block of K and of V is contiguous.
Status CpuBackend::kv_block_read(std::span<const KvCacheLayer> layers, int64_t block, void* host) {
  ASSIGN_OR_RETURN(const size_t bytes, kv_block_host_bytes(layers, block));
  auto* dst = static_cast<uint8_t*>(host);
  const size_t offset = static_cast<size_t>(block) * bytes;
  for (const KvCacheLayer& l : layers) {
    std::memcpy(dst, static_cast<const uint8_t*>(l.k) + offset, bytes);
    std::memcpy(dst + bytes, static_cast<const uint8_t*>(l.v) + offset, bytes);
    dst += 2 * bytes;
  }
  return OkStatus();
}

Status CpuBackend::kv_block_write(std::span<const KvCacheLayer> layers, int64_t block, const void* host) {
  ASSIGN_OR_RETURN(const size_t bytes, kv_block_host_bytes(layers, block));
  const auto* src = static_cast<const uint8_t*>(host);
  const size_t offset = static_cast<size_t>(block) * bytes;
  for (const KvCacheLayer& l : layers) {
    std::memcpy(static_cast<uint8_t*>(l.k) + offset, src, bytes);
    std::memcpy(static_cast<uint8_t*>(l.v) + offset, src + bytes, bytes);
    src += 2 * bytes;
  }
  return OkStatus();
}

Status CpuBackend::kv_write(const KvWriteArgs& a, const KvCacheLayer& c) {
  const OpScope timed(op_timer(), OpKind::kKvWrite);
  RETURN_IF_ERROR(check_cache(c));
  const int64_t num_slots = c.num_blocks * c.block_size;
  for (int64_t t = 0; t < a.num_tokens; ++t)
    if (a.slot_mapping[t] >= num_slots)
      return OutOfRange("kv_write: slot " + std::to_string(a.slot_mapping[t]) + " past the cache's " +
                        std::to_string(num_slots));
  const int64_t row = c.num_kv_heads * c.head_dim;
  pool().parallel_for(a.num_tokens, [&](int64_t b, int64_t e, int) {
    for (int64_t t = b; t < e; ++t) {
      const int64_t slot = a.slot_mapping[t];
      if (slot < 0) continue;
      const float* ks = a.k + t * row;
      const float* vs = a.v + t * row;
      if (c.dtype == DType::kF32) {
        std::memcpy(static_cast<float*>(c.k) + slot * row, ks, row * sizeof(float));
        std::memcpy(static_cast<float*>(c.v) + slot * row, vs, row * sizeof(float));
      } else if (c.dtype == DType::kF8E4M3) {
        // A true division, not a multiply by 1/scale, so every backend rounds the same codes.
        uint8_t* kd = static_cast<uint8_t*>(c.k) + slot * row;
        uint8_t* vd = static_cast<uint8_t*>(c.v) + slot * row;
        for (int64_t i = 0; i < row; ++i) {
          kd[i] = encode_e4m3(ks[i] / c.k_scale);
          vd[i] = encode_e4m3(vs[i] / c.v_scale);
        }
      } else {
        uint16_t* kd = static_cast<uint16_t*>(c.k) + slot * row;
        uint16_t* vd = static_cast<uint16_t*>(c.v) + slot * row;
        for (int64_t i = 0; i < row; ++i) {
          kd[i] = f32_to_bf16(ks[i]);
          vd[i] = f32_to_bf16(vs[i]);
        }
      }
    }
  }, 16);
  return OkStatus();
}

Status CpuBackend::paged_attention(const PagedAttentionArgs& args, const KvCacheLayer& c) {
  const OpScope timed(op_timer(), OpKind::kAttention);
  RETURN_IF_ERROR(check_cache(c));
  PagedAttentionArgs a = args;
  const bool e4m3_prompt = fp8_attention_ != Fp8AttentionMath::kF16 && c.dtype == DType::kF8E4M3 &&
                           attention_prompt_step(a.num_tokens, a.num_seqs);
  if (e4m3_prompt) {
    // Each query row rounded to E4M3 under its own scale, as the GPU's prompt kernel does (with
    // the two-term modes: to two terms, the first rounding and the rounding of the rest).
    const int64_t rows = a.num_tokens * a.num_heads, D = c.head_dim;
    q_e4m3_.resize(static_cast<size_t>(rows * D));
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = a.q + r * D;
      float* dst = q_e4m3_.data() + r * D;
      float amax = 0.0f;
      for (int64_t i = 0; i < D; ++i) amax = std::max(amax, std::fabs(src[i]));
      const float inv = amax > 0.0f ? kFp8E4M3Max / amax : 0.0f, qs = amax > 0.0f ? amax / kFp8E4M3Max : 1.0f;
      const bool two_terms = fp8_attention_ == Fp8AttentionMath::kE4m3x2Query ||
                             fp8_attention_ == Fp8AttentionMath::kE4m3x2QueryAndP;
      for (int64_t i = 0; i < D; ++i) {
        const float x = src[i] * inv, hi = fp8e4m3_to_f32(encode_e4m3(x));
        dst[i] = (two_terms ? hi + fp8e4m3_to_f32(encode_e4m3(x - hi)) : hi) * qs;
      }
    }
    a.q = q_e4m3_.data();
  }
  if (a.num_heads <= 0 || a.num_heads % c.num_kv_heads != 0)
    return InvalidArgument("paged_attention: " + std::to_string(a.num_heads) + " query heads for " +
                           std::to_string(c.num_kv_heads) + " kv heads");
  if (a.query_start[0] != 0 || a.query_start[a.num_seqs] != a.num_tokens)
    return InvalidArgument("paged_attention: query_start must run from 0 to num_tokens");
  std::vector<AttentionItem> items;
  const int64_t group = a.num_heads / c.num_kv_heads;
  const int64_t row = a.num_heads * c.head_dim;
  for (int64_t s = 0; s < a.num_seqs; ++s) {
    const int64_t q0 = a.query_start[s], q_len = a.query_start[s + 1] - q0, ctx = a.context_lens[s];
    if (q_len < 0 || ctx < q_len)
      return InvalidArgument("paged_attention: sequence " + std::to_string(s) + " has " + std::to_string(q_len) +
                             " queries for a context of " + std::to_string(ctx));
    if (q_len == 0) continue;
    const int64_t nblocks = (ctx + c.block_size - 1) / c.block_size;
    if (nblocks > a.max_blocks_per_seq)
      return OutOfRange("paged_attention: sequence " + std::to_string(s) + " needs " + std::to_string(nblocks) +
                        " blocks, table holds " + std::to_string(a.max_blocks_per_seq));
    const int32_t* table = a.block_tables + s * a.max_blocks_per_seq;
    for (int64_t b = 0; b < nblocks; ++b)
      if (table[b] < 0 || table[b] >= c.num_blocks)
        return OutOfRange("paged_attention: block id " + std::to_string(table[b]) + " outside the cache");
    // Long-context decode rows take the split-KV path (decode_attention.h), run below.
    if (decode_attention_handles(q_len, ctx, c)) continue;
    const int64_t run = query_run(group);
    for (int64_t t0 = 0; t0 < q_len; t0 += run) {
      const int64_t nt = std::min(run, q_len - t0);
      for (int64_t h = 0; h < c.num_kv_heads; ++h) {
        AttentionItem it;
        it.q = a.q + (q0 + t0) * row;
        it.out = a.out + (q0 + t0) * row;
        it.q_tokens = nt;
        it.first_pos = ctx - q_len + t0;
        it.kv_head = h;
        it.group = group;
        it.p_e4m3 = e4m3_prompt && (fp8_attention_ == Fp8AttentionMath::kE4m3QueryAndP ||
                                    fp8_attention_ == Fp8AttentionMath::kE4m3x2QueryAndP);
        it.num_heads = a.num_heads;
        it.block_table = table;
        it.scale = a.scale;
        items.push_back(it);
      }
    }
  }
  // Items differ in cost (later runs see more keys): hand them out one at a time, longest
  // first, instead of the pool's fixed contiguous chunks.
  std::reverse(items.begin(), items.end());
  const CpuKernels& kk = *kernels_;
  std::atomic<int64_t> next{0};
  const int64_t num_items = static_cast<int64_t>(items.size());
  pool().parallel_for(std::min<int64_t>(num_items, pool().num_threads()), [&](int64_t, int64_t, int) {
    for (int64_t i; (i = next.fetch_add(1)) < num_items;) kk.attention(items[i], c);
  });
  return decode_attention(a, c, pool(), kk.isa, &attn_partials_);
}

}  // namespace lancet::cpu
